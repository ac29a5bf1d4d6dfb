// The wire vocabulary (EventSource, ClickAction, SystemFormat, AttributeValue, IngestLimits)
// is the same list the server uses; an app gets it with `import TrackerClient`.
@_exported import TrackerModel

// The wire vocabulary (EventType, EventSource, …, IngestLimits) is part of this module's API.
@_exported import TrackerModel
@_exported import TrackerInput
@_exported import TrackerPostgres

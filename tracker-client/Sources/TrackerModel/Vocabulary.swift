// The vocabulary of the wire protocol (the protocol's sections 1 and 2 (docs/PROTOCOL.md)), shared by the server and
// TrackerClient: one list of event types, sources, click actions, system formats and limits.
// Pure Swift, no dependencies, so an app can link it.

/// The kinds of event a native ad produces (the protocol's section 2 (docs/PROTOCOL.md)).
public enum EventType: String, CaseIterable, Sendable, Hashable {
    case adLoaded = "ad_loaded"
    case impression
    case click
    case adchoicesImpression = "adchoices_impression"
    case adchoicesClick = "adchoices_click"
    case videoPlay = "video_play"
    case videoPause = "video_pause"
    case videoEnd = "video_end"
    case videoMute = "video_mute"
    case videoUnmute = "video_unmute"
}

/// Who detected the event: the app, the Google ads SDK, or a mediated network's SDK.
public enum EventSource: String, CaseIterable, Sendable, Hashable {
    case app
    case sdk
    case mediation
}

/// How a click was handled on the device.
public enum ClickAction: String, CaseIterable, Sendable, Hashable {
    case customHandler = "custom_handler"
    case deepLink = "deep_link"
    case destinationURL = "destination_url"
}

/// One value of the flat `attributes` object.
public enum AttributeValue: Sendable, Hashable {
    case string(String)
    /// The number exactly as it was written in the request, so nothing is rounded.
    case number(String)
    case bool(Bool)
}

/// The system native formats; every other format is a custom format ID (digits).
public enum SystemFormat: String, CaseIterable, Sendable {
    case native
    case appInstall = "app_install"
    case content
}

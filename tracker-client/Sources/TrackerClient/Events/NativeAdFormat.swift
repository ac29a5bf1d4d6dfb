/// The format of a native ad: a system-defined format, or a custom native ad format ID from
/// Ad Manager (e.g. `10063170`).
public enum NativeAdFormat: Sendable, Hashable {
    case system(SystemFormat)
    case custom(formatID: String)

    /// The `formatId` the server expects.
    public var wireValue: String {
        switch self {
        case .system(let format): format.rawValue
        case .custom(let id): id
        }
    }
}

/// What a native ad's video controller reports.
public enum VideoEvent: Sendable, Hashable, CaseIterable {
    case play, pause, end, mute, unmute

    var eventType: EventType {
        switch self {
        case .play: .videoPlay
        case .pause: .videoPause
        case .end: .videoEnd
        case .mute: .videoMute
        case .unmute: .videoUnmute
        }
    }
}

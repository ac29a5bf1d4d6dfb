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
    /// The app called `loadRequest:` on a `GADAdLoader` (the protocol's section 10: the ad funnel).
    case adRequest = "ad_request"
    /// `adLoader:didFailToReceiveAdWithError:`.
    case adFailed = "ad_failed"
    /// One network of the mediation waterfall answered the load, or the waterfall gave up on it.
    case mediationResult = "mediation_result"

    /// The types that belong to a load (`loadId`) rather than to an ad (`requestId`).
    public var isLoadEvent: Bool {
        switch self {
        case .adRequest, .adFailed, .mediationResult: true
        default: false
        }
    }
}

/// Why a load failed: the SDK's `GADErrorCode` cases in snake case (`ad_failed`'s and a failed
/// `mediation_result`'s `errorCode`).
public enum AdErrorCode: String, CaseIterable, Sendable, Hashable {
    case noFill = "no_fill"
    case networkError = "network_error"
    case timeout
    case serverError = "server_error"
    case invalidRequest = "invalid_request"
    case invalidArgument = "invalid_argument"
    case receivedInvalidResponse = "received_invalid_response"
    case mediationNoFill = "mediation_no_fill"
    case mediationAdapterError = "mediation_adapter_error"
    case mediationDataError = "mediation_data_error"
    case mediationInvalidAdSize = "mediation_invalid_ad_size"
    case internalError = "internal_error"
    case adAlreadyUsed = "ad_already_used"
    case osVersionTooLow = "os_version_too_low"
    case applicationIdentifierMissing = "application_identifier_missing"
    case other
}

/// How one network of a mediation waterfall answered a load (`mediation_result`'s `result`).
public enum MediationResult: String, CaseIterable, Sendable, Hashable {
    case loaded
    case failed
    /// The waterfall gave up waiting for the network.
    case timeout
}

/// The ranges of the funnel's numeric fields (the protocol's section 10).
public enum FunnelLimits {
    /// `adsRequested`: `GADMultipleAdsAdLoaderOptions`' `numberOfAds`.
    public static let adsRequested: ClosedRange<Int> = 1...5
    /// `latencyMs`: up to ten minutes.
    public static let latencyMs: ClosedRange<Int> = 0...600_000
    /// `position`: a network's place in the waterfall.
    public static let position: ClosedRange<Int> = 1...100
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

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Hummingbird
import Tracker

/// `GET /`: the dashboard for report-scope users, with its script and style sheet (built into
/// the binary) and Chart.js from the server's own Debian package. No key is needed for the
/// files: the page asks the user for a report key and reads the JSON reports API with it.
struct DashboardRoutes: Sendable {
    /// Where Debian's `libjs-chart.js` installs Chart.js's browser build (`TRACKER_CHARTJS_PATH` overrides).
    static let defaultChartLibraryPath = "/usr/share/javascript/chart.js/chart.min.js"

    let page: StaticAsset
    let script = StaticAsset(text: EmbeddedFile.dashboardScript.text,
                             mediaType: "text/javascript; charset=utf-8", cacheControl: "no-cache")
    let style = StaticAsset(text: EmbeddedFile.dashboardStyle.text,
                            mediaType: "text/css; charset=utf-8", cacheControl: "no-cache")
    let chartLibrary: ChartLibrary
    /// `{"defaultTimeZone": "America/New_York"}` (`null` without `TRACKER_DEFAULT_TZ`): what the
    /// page reads before its first report. A file the page fetches, not a value written into
    /// the page, because the page runs no inline script.
    let settings: StaticAsset

    /// Reads Chart.js once, at startup: the page is rendered with it, or with a notice saying it is missing.
    init(chartLibraryPath: String, defaultTimeZone: String? = nil) {
        chartLibrary = ChartLibrary(path: chartLibraryPath)
        page = StaticAsset(text: Self.page(chartLibrary: chartLibrary),
                           mediaType: "text/html; charset=utf-8", cacheControl: "no-cache")
        var json = "{\"defaultTimeZone\":"
        if let defaultTimeZone { JSONText.appendQuoted(defaultTimeZone, to: &json) } else { json += "null" }
        settings = StaticAsset(text: json + "}", mediaType: "application/json", cacheControl: "no-cache")
    }

    func register(on router: Router<some RequestContext>) {
        router.get("/") { request, _ in page.response(to: request) }
        router.get("/dashboard/app.js") { request, _ in script.response(to: request) }
        router.get("/dashboard/app.css") { request, _ in style.response(to: request) }
        router.get("/dashboard/settings.json") { request, _ in settings.response(to: request) }
        router.get("/dashboard/chart.js") { request, _ in
            switch chartLibrary {
            case .loaded(let asset): return asset.response(to: request)
            case .missing(let path, let reason):
                throw APIError(.chartLibraryMissing,
                               "Chart.js is not at \(path) on the server (\(reason)): install Debian's libjs-chart.js or set TRACKER_CHARTJS_PATH, then restart the tracker")
            }
        }
    }

    /// The embedded page with Chart.js's script tag, or, when the library is missing, a notice
    /// that says where it was looked for and how to install it (the tables still work).
    static func page(chartLibrary: ChartLibrary) -> String {
        let html = EmbeddedFile.dashboardPage.text
        switch chartLibrary {
        case .loaded:
            return html.replacing("<!--chart-library-->", with: #"<script src="/dashboard/chart.js" defer></script>"#)
                .replacing("<!--chart-notice-->", with: "")
        case .missing(let path, let reason):
            let notice = """
                <p id="chart-notice" class="notice" role="alert">Charts are off: Chart.js was not found on the \
                server at <code>\(escapingHTML(path))</code> (\(escapingHTML(reason))). Install Debian's \
                <code>libjs-chart.js</code> or set <code>TRACKER_CHARTJS_PATH</code>, then restart the tracker. \
                The numbers in the tables are complete.</p>
                """
            return html.replacing("<!--chart-library-->", with: "").replacing("<!--chart-notice-->", with: notice)
        }
    }

    static func escapingHTML(_ text: String) -> String {
        var out = ""
        for ch in text {
            switch ch {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(ch)
            }
        }
        return out
    }
}

/// Chart.js as read from disk at startup, or why it could not be.
enum ChartLibrary: Sendable {
    case loaded(StaticAsset)
    case missing(path: String, reason: String)

    /// The browser build is about 200 KiB; anything past this is not Chart.js.
    static let maxBytes = 8 << 20

    init(path: String) {
        switch Self.contents(of: path) {
        case .success(let bytes):
            // The file changes only with a package upgrade: a day of reuse, then revalidation by ETag.
            self = .loaded(StaticAsset(bytes: bytes, mediaType: "text/javascript; charset=utf-8",
                                       cacheControl: "public, max-age=86400"))
        case .failure(let error):
            self = .missing(path: path, reason: error.reason)
        }
    }

    struct ReadError: Error {
        var reason: String
    }

    static func contents(of path: String) -> Result<[UInt8], ReadError> {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(ReadError(reason: String(cString: strerror(errno)))) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                return .failure(ReadError(reason: String(cString: strerror(errno))))
            }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
            if bytes.count > maxBytes { return .failure(ReadError(reason: "larger than \(maxBytes >> 20) MiB")) }
        }
        if bytes.isEmpty { return .failure(ReadError(reason: "the file is empty")) }
        return .success(bytes)
    }
}

import Foundation
import Testing
@testable import TrackerServer

struct WebFilesTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The binary serves docs/openapi.yaml and web/dashboard/ as they are in the repository:
    /// scripts/embed-web.sh was run after the last edit.
    @Test(arguments: EmbeddedFile.all.map(\.source))
    func embeddedCopyEqualsTheFile(source: String) throws {
        let file = try String(contentsOf: Self.repository.appendingPathComponent(source), encoding: .utf8)
        let embedded = try #require(EmbeddedFile.all.first { $0.source == source })
        #expect(embedded.text == file, "\(source) differs from the copy in the binary: run scripts/embed-web.sh")
    }

    @Test func everyFileOfTheDashboardFolderIsEmbedded() throws {
        let folder = Self.repository.appendingPathComponent("web/dashboard")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).map { "web/dashboard/" + $0 }
        #expect(Set(files).isSubset(of: Set(EmbeddedFile.all.map(\.source))), "add the new file to scripts/embed-web.sh")
    }

    @Test func pageLoadsChartJSFromThisServerWhenItIsInstalled() {
        let asset = StaticAsset(text: "/* chart */", mediaType: "text/javascript", cacheControl: "no-cache")
        let page = DashboardRoutes.page(chartLibrary: .loaded(asset))
        #expect(page.contains(#"<script src="/dashboard/chart.js" defer></script>"#))
        #expect(!page.contains("chart-notice"))
        #expect(!page.contains("<!--chart-"))
    }

    @Test func pageSaysWhereChartJSWasLookedForWhenItIsMissing() {
        let page = DashboardRoutes.page(chartLibrary: .missing(path: "/opt/<x>/chart.min.js", reason: "No such file or directory"))
        #expect(page.contains(#"id="chart-notice""#))
        #expect(page.contains("<code>/opt/&lt;x&gt;/chart.min.js</code>"), "the path is shown, escaped")
        #expect(page.contains("libjs-chart.js") && page.contains("TRACKER_CHARTJS_PATH"))
        #expect(!page.contains("/dashboard/chart.js"), "no script tag for a file the server does not have")
    }

    @Test func missingChartLibraryNamesTheReason() {
        guard case .missing(let path, let reason) = ChartLibrary(path: "/nonexistent/chart.min.js") else {
            Issue.record("a file that does not exist was loaded")
            return
        }
        #expect(path == "/nonexistent/chart.min.js")
        #expect(reason == "No such file or directory")
    }

    @Test func pageSecurityPolicyAllowsNoInlineScriptAndNothingFromElsewhere() {
        let policy = PageSecurity.contentSecurityPolicy
        #expect(policy.contains("default-src 'none'"))
        #expect(policy.contains("script-src 'self'"))
        #expect(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval") && !policy.contains("http"))
        #expect(!EmbeddedFile.dashboardPage.text.contains("<script>"), "inline script would be refused by the policy")
        #expect(!EmbeddedFile.dashboardPage.text.contains(" style=\""), "inline style would be refused by the policy")
    }

    @Test func ifNoneMatchMatchesTheETagInAListOrWeakOrStar() {
        let etag = "\"00ff\""
        #expect(StaticAsset.matches(ifNoneMatch: "\"00ff\"", etag: etag))
        #expect(StaticAsset.matches(ifNoneMatch: "\"abc\", W/\"00ff\"", etag: etag))
        #expect(StaticAsset.matches(ifNoneMatch: "*", etag: etag))
        #expect(!StaticAsset.matches(ifNoneMatch: "\"00fe\"", etag: etag))
        #expect(!StaticAsset.matches(ifNoneMatch: "00ff", etag: etag))
    }

    @Test func eTagChangesWithTheBytes() {
        let a = StaticAsset(text: "a", mediaType: "text/plain", cacheControl: "no-cache")
        let b = StaticAsset(text: "b", mediaType: "text/plain", cacheControl: "no-cache")
        #expect(a.etag != b.etag)
        #expect(a.etag.count == 18)
    }
}

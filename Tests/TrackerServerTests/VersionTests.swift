import ArgumentParser
import Foundation
import Testing
@testable import TrackerServer

/// `TrackerCommand.version` is the one place the version is written; every file that repeats
/// it must say the same, so a release changes them together.
struct VersionTests {
    static func file(_ path: String) throws -> String {
        try String(contentsOf: WebFilesTests.repository.appendingPathComponent(path), encoding: .utf8)
    }

    /// Every `tracker:TAG` image reference of a file (compose's default, the manifests, the
    /// smoke test's tag), not the `tracker:` of a URL's user or a service name.
    static func imageTags(in text: String) -> [String] {
        let reference = /(?:^|[\s\/=-])tracker:([0-9A-Za-z][0-9A-Za-z._-]*)(?=$|[\s"'},])/.anchorsMatchLineEndings()
        return text.matches(of: reference).map { String($0.output.1) }
    }

    @Test func theVersionIsSemanticVersioning() {
        #expect(TrackerCommand.version.wholeMatch(of: /(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)/) != nil,
                "\(TrackerCommand.version) is not MAJOR.MINOR.PATCH")
    }

    @Test func trackerDashDashVersionPrintsTheVersion() {
        do {
            _ = try TrackerCommand.parseAsRoot(["--version"])
            Issue.record("tracker --version ran a command instead of printing the version")
        } catch {
            #expect(TrackerCommand.message(for: error) == TrackerCommand.version)
            #expect(TrackerCommand.exitCode(for: error) == .success)
        }
    }

    @Test func theOpenAPIDocumentHasTheVersion() throws {
        let document = try Self.file("docs/openapi.yaml")
        let info = try #require(document.firstMatch(of: /\ninfo:\n(?:  .*\n)*?  version: "?([^"\n]+)"?\n/))
        #expect(String(info.output.1) == TrackerCommand.version, "docs/openapi.yaml's info.version")
    }

    @Test(arguments: ["deploy/compose.yaml", "deploy/.env.example", "deploy/kubernetes/deployment.yaml",
                      "deploy/kubernetes/job-migrate.yaml", "deploy/smoke-test"])
    func theImageIsTaggedWithTheVersion(path: String) throws {
        let tags = Self.imageTags(in: try Self.file(path))
        #expect(!tags.isEmpty, "\(path) names no tracker image")
        for tag in tags {
            #expect(tag == TrackerCommand.version, "\(path) names the image tracker:\(tag)")
        }
    }

    @Test func theImageIsLabelledWithTheVersion() throws {
        let dockerfile = try Self.file("deploy/Dockerfile")
        let label = try #require(dockerfile.firstMatch(of: /org\.opencontainers\.image\.version="([^"]+)"/))
        #expect(String(label.output.1) == TrackerCommand.version, "deploy/Dockerfile's version label")
        #expect(Self.imageTags(in: dockerfile).allSatisfy { $0 == TrackerCommand.version }, "deploy/Dockerfile's build command")
    }

    @Test func theChangelogsNewestReleaseIsTheVersion() throws {
        let changelog = try Self.file("CHANGELOG.md")
        let releases = changelog.matches(of: /\n## \[([^\]]+)\]/).map { String($0.output.1) }
        #expect(releases.first == "Unreleased", "CHANGELOG.md starts with an Unreleased section")
        #expect(releases.dropFirst().first == TrackerCommand.version, "CHANGELOG.md's newest release")
    }

    @Test func imageReferencesAreFoundAndOthersAreNot() {
        #expect(Self.imageTags(in: "  image: ${TRACKER_IMAGE:-tracker:1.2.3}\n") == ["1.2.3"])
        #expect(Self.imageTags(in: "IMAGE=localhost/tracker:1.2.3\n") == ["1.2.3"])
        #expect(Self.imageTags(in: "image: tracker:1.2.3   # a comment") == ["1.2.3"])
        #expect(Self.imageTags(in: "postgresql://tracker:secret@db/tracker\n  tracker:\n").isEmpty)
        #expect(Self.imageTags(in: "localhost/tracker-smoke-lb:latest").isEmpty)
    }
}

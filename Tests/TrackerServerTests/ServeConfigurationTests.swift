import ArgumentParser
import Testing
import Tracker
@testable import TrackerServer

/// `tracker serve`'s settings, resolved from a dictionary as from the environment.
struct ServeConfigurationTests {
    static func resolve(_ values: [String: String], port: Int? = nil) throws -> ServeConfiguration {
        try ServeConfiguration(settings: Settings(["DATABASE_URL": "postgresql://db/tracker"].merging(values) { $1 }),
                               port: port, descriptorLimit: 65_536)
    }

    @Test func withNothingSetEverySettingHasTheDefaultTheHelpPrints() throws {
        let c = try Self.resolve([:])
        #expect(c.host == ServeDefaults.host && c.port == ServeDefaults.port)
        #expect(c.databaseURL == "postgresql://db/tracker")
        #expect(c.poolSize == ServeDefaults.poolSize && c.writers == ServeDefaults.writers)
        #expect(c.appendTimeout == .seconds(ServeDefaults.appendTimeoutSeconds))
        #expect(c.bodyBudgetBytes == ServeDefaults.bodyBufferMiB << 20)
        #expect(c.connections.maxConnections == ServeDefaults.maxConnections)
        #expect(c.rateLimit == ServeDefaults.rateLimit && c.retentionDays == nil && c.beaconSecrets == nil)
        #expect(c.runProjector && c.metrics)
        #expect(c.defaultTimeZone == nil, "reports in UTC, the dashboard in the browser's zone")
    }

    @Test func theDefaultZoneIsAZoneOfTheTzDatabaseAsItIsSpelt() throws {
        for zone in ["America/New_York", "Asia/Kolkata", "Asia/Calcutta", "Etc/GMT+5", "UTC", "Etc/UTC", "Zulu"] {
            #expect(try Self.resolve(["TRACKER_DEFAULT_TZ": zone]).defaultTimeZone == zone)
        }
    }

    @Test func settingsAreReadAndAFlagWins() throws {
        let c = try Self.resolve(["TRACKER_PORT": "9000", "TRACKER_WRITERS": "5", "TRACKER_PROJECTOR": "off", "TRACKER_METRICS": "off",
                                  "TRACKER_REPORT_WAIT": "0.5", "TRACKER_IP_STORAGE": "truncated", "TRACKER_RATE_LIMIT": ""], port: 7000)
        #expect(c.port == 7000, "the --port flag wins over TRACKER_PORT")
        #expect(c.writers == 5 && !c.runProjector && !c.metrics)
        #expect(c.reportWait == .milliseconds(500))
        #expect(c.clients.truncatesAddresses)
        #expect(c.rateLimit == ServeDefaults.rateLimit, "an empty value is unset")
        #expect(c.projectorGroup == nil, "the projector reads the whole log")
        #expect(try Self.resolve(["TRACKER_PROJECTOR_GROUP": "2/4"]).projectorGroup?.description == "2/4")
    }

    @Test(arguments: [
        ("TRACKER_WRITERS", "0", "TRACKER_WRITERS must be a positive integer, got '0'"),
        ("TRACKER_PORT", "70000", "TRACKER_PORT must be a port number, got '70000'"),
        ("TRACKER_METRICS", "yes", "TRACKER_METRICS must be on or off, got 'yes'"),
        ("TRACKER_IP_STORAGE", "hashed", "TRACKER_IP_STORAGE must be full or truncated, got 'hashed'"),
        ("TRACKER_DEFAULT_TZ", "Europe/Atlantis", ServeConfigurationTests.badZone("Europe/Atlantis")),
        ("TRACKER_DEFAULT_TZ", "america/new_york", ServeConfigurationTests.badZone("america/new_york")),
        ("TRACKER_DEFAULT_TZ", "EST5EDT,M3.2.0,M11.1.0", ServeConfigurationTests.badZone("EST5EDT,M3.2.0,M11.1.0")),
        ("TRACKER_DEFAULT_TZ", "../../etc/passwd", ServeConfigurationTests.badZone("../../etc/passwd")),
        ("TRACKER_PROJECTOR_GROUP", "3/2", "TRACKER_PROJECTOR_GROUP must be K/N, group K of N (1 ≤ K ≤ N ≤ 1024), got '3/2'"),
    ])
    func aBadValueStopsServeNamingTheSettingAndTheRule(name: String, value: String, message: String) {
        #expect { try Self.resolve([name: value]) } throws: { ($0 as? ValidationError)?.message == message }
    }

    static func badZone(_ value: String) -> String {
        "TRACKER_DEFAULT_TZ must be an IANA time zone name as the tz database spells it, such as UTC, America/New_York or Asia/Kolkata, got '\(value)'"
    }

    @Test func withoutADatabaseServeSaysHowToGiveOne() {
        #expect { try ServeConfiguration(settings: Settings([:]), descriptorLimit: 1024) } throws: {
            ($0 as? ValidationError)?.message.hasPrefix("no database: pass --database-url or set DATABASE_URL") == true
        }
    }
}

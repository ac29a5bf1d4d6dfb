import ArgumentParser
import Testing
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
    }

    @Test func settingsAreReadAndAFlagWins() throws {
        let c = try Self.resolve(["TRACKER_PORT": "9000", "TRACKER_WRITERS": "5", "TRACKER_PROJECTOR": "off", "TRACKER_METRICS": "off",
                                  "TRACKER_REPORT_WAIT": "0.5", "TRACKER_IP_STORAGE": "truncated", "TRACKER_RATE_LIMIT": ""], port: 7000)
        #expect(c.port == 7000, "the --port flag wins over TRACKER_PORT")
        #expect(c.writers == 5 && !c.runProjector && !c.metrics)
        #expect(c.reportWait == .milliseconds(500))
        #expect(c.clients.truncatesAddresses)
        #expect(c.rateLimit == ServeDefaults.rateLimit, "an empty value is unset")
    }

    @Test(arguments: [
        ("TRACKER_WRITERS", "0", "TRACKER_WRITERS must be a positive integer, got '0'"),
        ("TRACKER_PORT", "70000", "TRACKER_PORT must be a port number, got '70000'"),
        ("TRACKER_METRICS", "yes", "TRACKER_METRICS must be on or off, got 'yes'"),
        ("TRACKER_IP_STORAGE", "hashed", "TRACKER_IP_STORAGE must be full or truncated, got 'hashed'"),
    ])
    func aBadValueStopsServeNamingTheSettingAndTheRule(name: String, value: String, message: String) {
        #expect { try Self.resolve([name: value]) } throws: { ($0 as? ValidationError)?.message == message }
    }

    @Test func withoutADatabaseServeSaysHowToGiveOne() {
        #expect { try ServeConfiguration(settings: Settings([:]), descriptorLimit: 1024) } throws: {
            ($0 as? ValidationError)?.message.hasPrefix("no database: pass --database-url or set DATABASE_URL") == true
        }
    }
}

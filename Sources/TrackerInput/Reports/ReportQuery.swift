/// The reports of docs/PROTOCOL.md ("Reports", "Invalid traffic").
public enum ReportKind: String, Sendable, CaseIterable {
    case summary, assets, sources, adchoices, ivt
    /// The ad funnel (PROTOCOL.md 10): loads requested, filled, failed; loaded and shown ads.
    case funnel
    /// Failed loads by error code.
    case failures
    /// Mediation attempts by adapter and position.
    case waterfall
}

/// How a report cuts time into rows.
public enum ReportGranularity: String, Sendable, Hashable, CaseIterable {
    /// One row per local day (the default).
    case day
    /// One row per local hour: an `hour` dimension after `day`.
    case hour
}

/// One report request: which report, which days in which time zone, which rows.
public struct ReportQuery: Sendable, Hashable {
    public var kind: ReportKind
    /// First and last local day in `timeZone`, inclusive.
    public var from: Day
    public var to: Day
    /// An ad unit, or with a trailing `/` every ad unit under that path (`/1234567/news/`).
    public var adUnit: String?
    public var formatId: String?
    /// Rolls ad units up to their first this many segments after the network code (Ad
    /// Manager's ad unit levels: `/1234567/news/sports` is `/1234567/news` at level 1); `nil`:
    /// each ad unit as it is.
    public var adUnitLevel: Int?
    public var includeTest: Bool
    /// The IANA name of the zone whose local days and hours the rows are (`UTC` by default).
    /// Its syntax is checked here; whether the zone exists, by `Reports`, against the database's zones.
    public var timeZone: String
    public var granularity: ReportGranularity

    /// The longest range one request may ask for, in days.
    public static let maxDays = 366
    /// The zone reports use when none is asked for.
    public static let defaultTimeZone = "UTC"

    /// Checks the range rules; the error names the parameter and the rule.
    public init(kind: ReportKind, from: Day, to: Day, adUnit: String? = nil, formatId: String? = nil, includeTest: Bool = false,
                timeZone: String = ReportQuery.defaultTimeZone, granularity: ReportGranularity = .day,
                adUnitLevel: Int? = nil) throws(ReportQueryError) {
        guard from <= to else { throw .fromAfterTo(from: from, to: to) }
        let days = Int(to.daysSinceEpoch - from.daysSinceEpoch) + 1
        guard days <= Self.maxDays else { throw .rangeTooLong(days: days) }
        guard Self.isZoneName(timeZone) else { throw .unknownTimeZone(timeZone) }
        self.kind = kind
        self.from = from
        self.to = to
        self.adUnit = adUnit
        self.formatId = formatId
        self.includeTest = includeTest
        self.timeZone = timeZone
        self.granularity = granularity
        self.adUnitLevel = adUnitLevel
    }

    /// The deepest `adUnitLevel` a report takes (an ad unit path has at most 256 characters).
    public static let maxAdUnitLevel = 100

    /// Whether rows are UTC days, the shape every report had before time zones (and the
    /// cheapest: read from the day tables).
    public var isUTCDays: Bool {
        granularity == .day && Self.utcNames.contains(timeZone)
    }

    /// Whether the zone is UTC under one of its names (its hours are written with `Z`).
    public var isUTC: Bool {
        Self.utcNames.contains(timeZone)
    }

    /// The tz database's names for UTC itself.
    public static let utcNames: Set<String> = ["UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"]

    /// The shape of an IANA zone name (`America/Argentina/Buenos_Aires`, `Etc/GMT+5`, `UTC`):
    /// ASCII letters, digits, `/`, `_`, `-` and `+`, at most 64 characters, no empty part.
    public static func isZoneName(_ name: String) -> Bool {
        let utf8 = Array(name.utf8)
        guard (1...64).contains(utf8.count) else { return false }
        let allowed = utf8.allSatisfy { b in
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39)
                || b == UInt8(ascii: "/") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-") || b == UInt8(ascii: "+")
        }
        return allowed && !name.split(separator: "/", omittingEmptySubsequences: false).contains { $0.isEmpty || $0 == "." || $0 == ".." }
    }
}

/// Why a report cannot be answered as asked; each names the parameter and the rule.
public enum ReportQueryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A report name other than the four (`400 unknown_report`).
    case unknownReport(String)
    /// A parameter breaks its rule (`400 invalid_parameter`); the text says which and how.
    case invalidParameter(String)
    case fromAfterTo(from: Day, to: Day)
    case rangeTooLong(days: Int)
    /// `tz` is not the name of a zone of the tz database.
    case unknownTimeZone(String)

    public var description: String {
        switch self {
        case .unknownReport(let name):
            "unknown report '\(name)'; reports are \(ReportKind.allCases.map(\.rawValue).joined(separator: ", ")) and reconciliation"
        case .invalidParameter(let message): message
        case .fromAfterTo(let from, let to): "from (\(from)) is after to (\(to)); from and to are inclusive days (local days in tz, UTC by default) with from <= to"
        case .rangeTooLong(let days): "the range from..to spans \(days) days; at most \(ReportQuery.maxDays) days per report"
        case .unknownTimeZone(let name):
            "tz must be an IANA time zone name such as UTC, America/New_York or Asia/Kolkata, got '\(name)'"
        }
    }
}

/// Reading a report's parameters as a request carries them (PROTOCOL.md 6), for the HTTP API and
/// the command line alike.
extension ReportQuery {
    /// The query of report `report`, from its parameters by name (`from`, `to`, `adUnit`,
    /// `formatId`, `includeTest`, `tz`, `granularity`; `nil` when absent). An empty filter
    /// means no filter; an empty `tz` or `granularity` means the default.
    public static func parse(report: String, parameter: (String) -> String?) throws(ReportQueryError) -> ReportQuery {
        guard let kind = ReportKind(rawValue: report) else { throw .unknownReport(report) }
        let zone = parameter("tz").flatMap { $0.isEmpty ? nil : $0 } ?? defaultTimeZone
        let dayName = utcNames.contains(zone) ? "a UTC day" : "a local day in \(isZoneName(zone) ? zone : "tz")"
        func day(_ name: String) throws(ReportQueryError) -> Day {
            guard let text = parameter(name), !text.isEmpty else {
                throw .invalidParameter("\(name) is required: \(dayName) as YYYY-MM-DD")
            }
            guard let day = Day(iso: text) else {
                throw .invalidParameter("\(name) must be \(dayName) as YYYY-MM-DD, got '\(text)'")
            }
            return day
        }
        let includeTest = try includeTest(parameter("includeTest"))
        let granularity = try granularity(parameter("granularity"))
        return try ReportQuery(kind: kind, from: try day("from"), to: try day("to"),
                               adUnit: try adUnitFilter(parameter("adUnit")),
                               formatId: try formatIdFilter(parameter("formatId")),
                               includeTest: includeTest, timeZone: zone, granularity: granularity,
                               adUnitLevel: try adUnitLevel(parameter("adUnitLevel")))
    }

    /// `adUnit`: absent, an ad unit path as events carry it (`/6499/example/native`), or a path
    /// ending in `/` for every ad unit under it (`/6499/example/`, `/6499/`). Anything else
    /// could match no row, and an empty report would read as "nothing happened".
    public static func adUnitFilter(_ value: String?) throws(ReportQueryError) -> String? {
        guard let value, !value.isEmpty else { return nil }
        let isPrefix = value.hasSuffix("/")
        let path = isPrefix ? String(value.dropLast()) : value
        var valid = false
        if case .ok = EventRules.checkAdUnit(path) {
            valid = true
        } else if isPrefix {
            // A network's every ad unit: `/6499/`.
            valid = path.utf8.count > 1 && path.utf8.first == UInt8(ascii: "/") && path.utf8.dropFirst().allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
        }
        guard valid else {
            throw .invalidParameter("adUnit must be an ad unit path such as /6499/example/native, or a path ending in / for every ad unit "
                                    + "under it (/6499/example/, /6499/), got '\(value.prefix(80))'")
        }
        return value
    }

    /// Whether an `adUnit` filter keeps `adUnit`: the ad unit itself, or with a trailing `/` any
    /// ad unit under that path. Compared by bytes, as `ReportSQL.rowFilters` compares them in
    /// SQL (two spellings of an accented letter are two ad units).
    public static func filter(_ filter: String?, keeps adUnit: some StringProtocol) -> Bool {
        guard let filter else { return true }
        return adUnit.utf8.elementsEqual(filter.utf8) || (filter.utf8.last == UInt8(ascii: "/") && adUnit.utf8.starts(with: filter.utf8))
    }

    /// `formatId`: absent, a custom native format ID (digits) or a system format, as events carry it.
    public static func formatIdFilter(_ value: String?) throws(ReportQueryError) -> String? {
        guard let value, !value.isEmpty else { return nil }
        switch EventRules.checkFormatId(value) {
        case .ok: return value
        case .broken(let rule, let showValue):
            throw .invalidParameter("formatId \(rule)" + (showValue ? ", got '\(value.prefix(80))'" : ""))
        }
    }

    /// `adUnitLevel`: absent, or a whole number from 1 to `maxAdUnitLevel`.
    public static func adUnitLevel(_ value: String?) throws(ReportQueryError) -> Int? {
        guard let value, !value.isEmpty else { return nil }
        guard let level = Int(value), (1...maxAdUnitLevel).contains(level), value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            throw .invalidParameter("adUnitLevel must be a whole number from 1 to \(maxAdUnitLevel) (the segments kept after the network code), got '\(value)'")
        }
        return level
    }

    /// `granularity`: absent, `day` or `hour`.
    public static func granularity(_ value: String?) throws(ReportQueryError) -> ReportGranularity {
        guard let value, !value.isEmpty else { return .day }
        guard let granularity = ReportGranularity(rawValue: value.lowercased()) else {
            throw .invalidParameter("granularity must be day or hour, got '\(value)'")
        }
        return granularity
    }

    /// `includeTest`: absent, `false`/`0` or `true`/`1`.
    public static func includeTest(_ value: String?) throws(ReportQueryError) -> Bool {
        switch value?.lowercased() {
        case nil, "", "false", "0": false
        case "true", "1": true
        case let other?: throw .invalidParameter("includeTest must be true or false, got '\(other)'")
        }
    }

    /// The first parameter of a raw query string (`a=1&b=2`) whose percent-decoded name or
    /// value is not UTF-8 text or holds NUL, as an error naming it. Decoded leniently, `%00`
    /// cut a value short (`/1/a%00x` answered for `/1/a`) and `%FF` matched nothing; either
    /// way the answer was for another filter than the one sent.
    public static func unreadableParameter(rawQuery: String) -> ReportQueryError? {
        for (name, value) in decodedPairs(rawQuery: rawQuery) {
            let shownName = String(decoding: name, as: UTF8.self)
            for bytes in [name, value] {
                if bytes.contains(0) {
                    return .invalidParameter("\(shownName) must not contain the character U+0000 (%00)")
                }
                if String(validating: bytes, as: UTF8.self) == nil {
                    return .invalidParameter("\(shownName) must be UTF-8 text once percent-decoded")
                }
            }
        }
        return nil
    }

    /// The `name=value` pairs of a raw query string, each side percent-decoded (a pair
    /// without `=` has an empty value).
    public static func decodedPairs(rawQuery: String) -> [(name: [UInt8], value: [UInt8])] {
        rawQuery.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (percentDecoded(parts[0]), parts.count > 1 ? percentDecoded(parts[1]) : [])
        }
    }

    /// The bytes of a query component: `%XX` decoded, `+` as a space (form encoding), a `%`
    /// without two hex digits kept as it is.
    static func percentDecoded(_ text: Substring) -> [UInt8] {
        PercentDecoding.decode(text, plusIsSpace: true, malformed: .literal) ?? []
    }
}

/// The four reports of SPEC section 6.
public enum ReportKind: String, Sendable, CaseIterable {
    case summary, assets, sources, adchoices
}

/// One report request: which report, which days, which rows.
public struct ReportQuery: Sendable, Hashable {
    public var kind: ReportKind
    public var from: Day
    public var to: Day
    public var adUnit: String?
    public var formatId: String?
    public var includeTest: Bool

    /// The longest range one request may ask for, in days.
    public static let maxDays = 366

    /// Checks the range rules; the error names the parameter and the rule.
    public init(kind: ReportKind, from: Day, to: Day, adUnit: String? = nil, formatId: String? = nil, includeTest: Bool = false) throws(ReportQueryError) {
        guard from <= to else { throw .fromAfterTo(from: from, to: to) }
        let days = Int(to.daysSinceEpoch - from.daysSinceEpoch) + 1
        guard days <= Self.maxDays else { throw .rangeTooLong(days: days) }
        self.kind = kind
        self.from = from
        self.to = to
        self.adUnit = adUnit
        self.formatId = formatId
        self.includeTest = includeTest
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

    public var description: String {
        switch self {
        case .unknownReport(let name): "unknown report '\(name)'; reports are summary, assets, sources and adchoices"
        case .invalidParameter(let message): message
        case .fromAfterTo(let from, let to): "from (\(from)) is after to (\(to)); from and to are inclusive UTC days with from <= to"
        case .rangeTooLong(let days): "the range from..to spans \(days) days; at most \(ReportQuery.maxDays) days per report"
        }
    }
}

/// Reading a report's parameters as a request carries them (SPEC 6), for the HTTP API and
/// the command line alike.
extension ReportQuery {
    /// The query of report `report`, from its parameters by name (`from`, `to`, `adUnit`,
    /// `formatId`, `includeTest`; `nil` when absent). An empty filter means no filter.
    public static func parse(report: String, parameter: (String) -> String?) throws(ReportQueryError) -> ReportQuery {
        guard let kind = ReportKind(rawValue: report) else { throw .unknownReport(report) }
        func day(_ name: String) throws(ReportQueryError) -> Day {
            guard let text = parameter(name), !text.isEmpty else {
                throw .invalidParameter("\(name) is required: a UTC day as YYYY-MM-DD")
            }
            guard let day = Day(iso: text) else {
                throw .invalidParameter("\(name) must be a UTC day as YYYY-MM-DD, got '\(text)'")
            }
            return day
        }
        let includeTest = try includeTest(parameter("includeTest"))
        return try ReportQuery(kind: kind, from: try day("from"), to: try day("to"),
                               adUnit: parameter("adUnit").flatMap { $0.isEmpty ? nil : $0 },
                               formatId: parameter("formatId").flatMap { $0.isEmpty ? nil : $0 },
                               includeTest: includeTest)
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

    /// The bytes of a query component: `%XX` decoded, `+` as a space (form encoding).
    static func percentDecoded(_ text: Substring) -> [UInt8] {
        var out: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let b = utf8.popFirst() {
            // Two hex digits exactly: UInt8("+0", radix: 16) would read a sign as well.
            if b == UInt8(ascii: "%"), utf8.count >= 2, utf8.prefix(2).allSatisfy({ Character(Unicode.Scalar($0)).isHexDigit }),
               let value = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16) {
                out.append(value)
                utf8 = utf8.dropFirst(2)
            } else {
                out.append(b == UInt8(ascii: "+") ? UInt8(ascii: " ") : b)
            }
        }
        return out
    }
}


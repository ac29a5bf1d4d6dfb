// `make bench-json`: what the three hand-written JSON bodies (the ingest receipt, the error
// body, a report) cost against `JSONEncoder` writing the same values, in one run.
//
// Each body is made `iterations` times per round, 7 rounds per way, alternating; the figure
// is the median round's time per body. Both ways must give JSON that parses to the same value.
import Foundation
import Tracker
import TrackerInput
import TrackerServer

struct ReceiptJSON: Encodable {
    struct Rejected: Encodable {
        var index: Int
        var id: String?
        var error: String
        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(index, forKey: .index)
            try c.encode(id, forKey: .id)  // null, not left out
            try c.encode(error, forKey: .error)
        }
        enum CodingKeys: String, CodingKey { case index, id, error }
    }
    var accepted: Int
    var duplicates: Int
    var rejected: [Rejected]
}

struct ErrorJSON: Encodable {
    var error: String
    var message: String
}

struct ReportJSON: Encodable {
    var from: String
    var to: String
    var rows: [Row]
    struct Row: Encodable {
        var columns: [String]
        var values: [ReportValue]
        struct Key: CodingKey {
            var stringValue: String
            init(stringValue: String) { self.stringValue = stringValue }
            var intValue: Int? { nil }
            init?(intValue: Int) { nil }
        }
        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Key.self)
            for (name, value) in zip(columns, values) {
                switch value {
                case .text(let s): try c.encode(s, forKey: Key(stringValue: name))
                case .count(let n): try c.encode(n, forKey: Key(stringValue: name))
                case .ratio(let r): try c.encode(r.isFinite ? r : 0, forKey: Key(stringValue: name))
                case .noDenominator: try c.encode(0.0, forKey: Key(stringValue: name))
                case .missing: try c.encodeNil(forKey: Key(stringValue: name))
                }
            }
        }
    }
}

func median(_ xs: [Duration]) -> Duration { xs.sorted()[xs.count / 2] }

/// Times `handBuilt` and `encoder` alternately; checks they give the same JSON value.
func compare(_ name: String, iterations: Int, handBuilt: () -> String, encoder: () throws -> Data) throws {
    let a = try JSONSerialization.jsonObject(with: Data(handBuilt().utf8)) as? NSObject
    let b = try JSONSerialization.jsonObject(with: encoder()) as? NSObject
    guard let a, let b, a.isEqual(b) else {
        print("\(name): the two ways give different JSON")
        exit(1)
    }
    var hand: [Duration] = [], coded: [Duration] = []
    var sink = 0
    let clock = ContinuousClock()
    for _ in 0..<7 {
        hand.append(clock.measure { for _ in 0..<iterations { sink &+= handBuilt().utf8.count } })
        coded.append(try clock.measure { for _ in 0..<iterations { sink &+= try encoder().count } })
    }
    let h = median(hand) / iterations, c = median(coded) / iterations
    let ratio = Double(c.attoseconds) / Double(h.attoseconds)
    func us(_ d: Duration) -> String { String(format: "%.2f µs", Double(d.attoseconds) / 1e12) }
    print("\(name.padding(toLength: 34, withPad: " ", startingAt: 0)) hand-built \(us(h))   JSONEncoder \(us(c))   \(String(format: "%.1f", ratio)) x   (\(sink > 0 ? "ok" : "?"))")
}

let encoder = JSONEncoder()

// A single-event batch, as in bench-ingest phase (c), and a batch of 100 with 3 rejected.
try compare("receipt, 1 event accepted", iterations: 200_000,
            handBuilt: { IngestRoute.receiptBody(outcome: AppendOutcome(stored: 1, duplicates: 0), rejected: []) },
            encoder: { try encoder.encode(ReceiptJSON(accepted: 1, duplicates: 0, rejected: [])) })
let rejected = (0..<3).map { Rejection(index: $0 * 7, id: "0190b0a4-7f7e-7c3a-9d41-1e2f3a4b5c6\($0)", error: "occurredAt: must be an RFC 3339 time with a zone") }
try compare("receipt, 100 events, 3 rejected", iterations: 50_000,
            handBuilt: { IngestRoute.receiptBody(outcome: AppendOutcome(stored: 97, duplicates: 0), rejected: rejected) },
            encoder: { try encoder.encode(ReceiptJSON(accepted: 97, duplicates: 0, rejected: rejected.map { .init(index: $0.index, id: $0.id, error: $0.error) })) })
let refusal = APIError(.rateLimited, "this key sent more than 100 events/s; retry after the Retry-After seconds")
try compare("error body (429)", iterations: 200_000,
            handBuilt: { refusal.body },
            encoder: { try encoder.encode(ErrorJSON(error: ErrorCode.rateLimited.rawValue, message: refusal.message)) })

// The summary report over 30 days: 30 days x 4 formats, 9 columns.
let query = try ReportQuery(kind: .summary, from: Day(year: 2026, month: 10, day: 1)!, to: Day(year: 2026, month: 10, day: 30)!)
let columns = ["day", "adUnit", "formatId", "impressions", "clicks", "ctr", "duplicates", "staleImpressions", "clicksWithoutImpression"]
func reportRow(_ i: Int) -> [ReportValue] {
    let day = "2026-10-" + String(format: "%02d", i / 4 + 1)
    let impressions = Int64(10_000 + i), clicks = Int64(120 + i)
    let ctr = Double(clicks) / Double(impressions)
    return [.text(day), .text("/6499/example/native"), .text("1234567\(i % 4)"), .count(impressions), .count(clicks),
            .ratio(ctr), .count(3), .count(1), .count(0)]
}
let rows: [[ReportValue]] = (0..<120).map(reportRow)
let report = ReportResult(query: query, columns: columns, rows: rows, totals: columns.map { _ in .empty },
                          lag: ProjectionLag(events: 0, seconds: 0), ivtRules: 0)
try compare("report, 120 rows x 9 columns", iterations: 2_000,
            handBuilt: { report.json },
            encoder: { try encoder.encode(ReportJSON(from: "\(query.from)", to: "\(query.to)", rows: rows.map { .init(columns: columns, values: $0) })) })

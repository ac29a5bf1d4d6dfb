// tracker-client-probe: a small program that uses TrackerClient the way an app does, for the
// integration tests (which kill it mid-delivery) and scripts/bench-client.sh.
//
//   TrackerClientProbe record  --queue DIR --ads N [--ids FILE] [--ad-unit U]
//   TrackerClientProbe deliver --queue DIR --endpoint URL --key KEY [--timeout SECONDS]
//   TrackerClientProbe bench-enqueue  --queue DIR --events N
//   TrackerClientProbe bench-deliver  --queue DIR --endpoint URL --key KEY
//   TrackerClientProbe bench-live     --queue DIR --endpoint URL --key KEY --events N
//   TrackerClientProbe bench-baseline --endpoint URL --key KEY --events N
//
// `record` records four events per ad (ad_loaded, impression, a click on MainImage,
// adchoices_impression) into the queue without sending, and writes their ids to FILE.
// `deliver` sends what the queue holds until it is empty and prints the statistics as one
// JSON line; exit 0 when everything left the queue, 2 when delivery stopped, 3 on timeout.
// The bench-* commands print `key=value` figures, including the process's peak RSS.
import Foundation
import TrackerClient
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

struct Options {
    var values: [String: String] = [:]

    init(_ arguments: ArraySlice<String>) {
        var rest = arguments
        while let name = rest.popFirst() {
            guard name.hasPrefix("--"), let value = rest.popFirst() else { fail("expected --name value, got '\(name)'") }
            values[String(name.dropFirst(2))] = value
        }
    }

    func string(_ name: String) -> String {
        guard let value = values[name] else { fail("--\(name) is required") }
        return value
    }

    func int(_ name: String, default fallback: Int? = nil) -> Int {
        guard let text = values[name] else {
            if let fallback { return fallback }
            fail("--\(name) is required")
        }
        guard let value = Int(text), value >= 0 else { fail("--\(name) must be a whole number, got '\(text)'") }
        return value
    }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("tracker-client-probe: \(message)\n".utf8))
    exit(64)
}

func configuration(_ options: Options, endpoint: String = "http://127.0.0.1:9") -> AdTracker.Configuration {
    guard let url = URL(string: options.values["endpoint"] ?? endpoint) else { fail("--endpoint is not a URL") }
    var c = AdTracker.Configuration(endpoint: url, ingestKey: options.values["key"] ?? "none",
                                    queueDirectory: URL(fileURLWithPath: options.string("queue")))
    // A service that delivers a backlog: the largest batches, a short backoff (loopback).
    c.flushAt = 500
    c.flushInterval = .milliseconds(200)
    c.backoff = AdTracker.Backoff(initial: .milliseconds(100), maximum: .seconds(2))
    c.queueLimits = AdTracker.QueueLimits(maxEvents: 1_000_000, maxBytes: 1 << 30, maxAge: .seconds(86_400))
    c.attributes = ["probe": .string("tracker-client-probe")]
    return c
}

func open(_ c: AdTracker.Configuration) -> AdTracker {
    do {
        return try AdTracker(configuration: c)
    } catch {
        fail(error.description)
    }
}

/// Records one ad's four events.
func recordAd(_ tracker: AdTracker, _ n: Int, adUnit: String) -> [UUID] {
    let ad = tracker.adLoaded(requestId: "probe-\(n)-\(UInt32.random(in: 0...UInt32.max))", adUnit: adUnit,
                              format: .custom(formatID: "10063170"), eea: true, reservation: true)
    return [
        ad.loadEventID!,
        ad.recordImpression(),
        ad.recordClick(onAsset: "MainImage", action: .customHandler),
        ad.recordAdChoicesImpression(),
    ]
}

/// The process's peak resident set in MiB (Linux: VmHWM).
func peakRSSMiB() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
          let kib = Double(line.split(separator: " ")[1]) else { return -1 }
    return kib / 1024
}

func seconds(_ d: Duration) -> Double {
    Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
}

/// Delivers until the queue is empty; the statistics, or nil on timeout.
func deliverAll(_ tracker: AdTracker, timeout: Duration) async -> (AdTracker.Statistics, stopped: Bool)? {
    let delivery = Task { await tracker.run() }
    defer { delivery.cancel() }
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        switch await tracker.flush() {
        case .delivered:
            if tracker.statistics.pending == 0 { return (tracker.statistics, false) }
        case .willRetry(let after, _):
            try? await Task.sleep(for: min(after, .milliseconds(200)))
        case .stopped:
            return (tracker.statistics, true)
        case .notRunning:
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
    return nil
}

func statisticsLine(_ s: AdTracker.Statistics) -> String {
    let dropped = s.dropped.values.reduce(0, +)
    return "{\"recorded\":\(s.recorded),\"recovered\":\(s.recovered),\"accepted\":\(s.accepted),\"duplicates\":\(s.duplicates),"
        + "\"rejected\":\(s.rejected),\"dropped\":\(dropped),\"pending\":\(s.pending),\"requests\":\(s.requests),\"retries\":\(s.retries)}"
}

let arguments = CommandLine.arguments
guard arguments.count >= 2 else { fail("usage: TrackerClientProbe record|deliver|bench-enqueue|bench-deliver|bench-live|bench-baseline --name value …") }
let options = Options(arguments.dropFirst(2))

switch arguments[1] {
case "record":
    let tracker = open(configuration(options))
    let adUnit = options.values["ad-unit"] ?? "/1234/home/native"
    var ids: [UUID] = []
    for n in 0..<options.int("ads") { ids += recordAd(tracker, n, adUnit: adUnit) }
    if let path = options.values["ids"] {
        let text = ids.map { $0.uuidString.lowercased() }.joined(separator: "\n") + "\n"
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8)) else { fail("cannot write \(path)") }
    }
    print(statisticsLine(tracker.statistics))

case "deliver":
    let tracker = open(configuration(options))
    guard let (statistics, stopped) = await deliverAll(tracker, timeout: .seconds(options.int("timeout", default: 120))) else {
        print(statisticsLine(tracker.statistics))
        exit(3)
    }
    print(statisticsLine(statistics))
    exit(stopped ? 2 : 0)

case "bench-enqueue":
    // How fast the app's thread hands events over: recording calls with delivery not running.
    let tracker = open(configuration(options))
    let count = options.int("events")
    let ad = tracker.ad(requestId: "bench", adUnit: "/1234/home/native", format: .custom(formatID: "10063170"))
    var latencies: [Duration] = []
    latencies.reserveCapacity(count)
    let clock = ContinuousClock()
    let start = clock.now
    for _ in 0..<count {
        let t0 = clock.now
        ad.recordClick(onAsset: "MainImage", action: .customHandler)
        latencies.append(clock.now - t0)
    }
    let elapsed = clock.now - start
    latencies.sort()
    let pending = tracker.statistics
    print("enqueue_events=\(count)")
    print("enqueue_seconds=\(seconds(elapsed))")
    print("enqueue_events_per_second=\(Int(Double(count) / seconds(elapsed)))")
    print("enqueue_p50_us=\(seconds(latencies[count / 2]) * 1e6)")
    print("enqueue_p99_us=\(seconds(latencies[count * 99 / 100]) * 1e6)")
    print("enqueue_pending=\(pending.pending) enqueue_bytes=\(pending.pendingBytes)")
    // The floor: the same bytes appended with one write(2) each, no tracker.
    let sample = Array(repeating: UInt8(ascii: "x"), count: pending.pendingBytes / max(1, pending.pending))
    let path = options.string("queue") + "/baseline.raw"
    let fd = Foundation.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    let rawStart = clock.now
    for _ in 0..<count { _ = sample.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) } }
    let rawElapsed = clock.now - rawStart
    close(fd)
    unlink(path)
    print("baseline_write_events_per_second=\(Int(Double(count) / seconds(rawElapsed)))")
    print("peak_rss_mib=\(peakRSSMiB())")

case "bench-deliver":
    // How fast one client delivers a backlog (the queue `bench-enqueue` filled) to the tracker.
    let tracker = open(configuration(options))
    let before = tracker.statistics.pending
    let clock = ContinuousClock()
    let start = clock.now
    guard let (statistics, stopped) = await deliverAll(tracker, timeout: .seconds(600)), !stopped else {
        fail("delivery did not finish: \(statisticsLine(tracker.statistics))")
    }
    let elapsed = clock.now - start
    print("deliver_events=\(before) deliver_seconds=\(seconds(elapsed))")
    print("deliver_events_per_second=\(Int(Double(statistics.accepted + statistics.duplicates) / seconds(elapsed)))")
    print("deliver_requests=\(statistics.requests) deliver_retries=\(statistics.retries) accepted=\(statistics.accepted)")
    print("peak_rss_mib=\(peakRSSMiB())")

case "bench-live":
    // An app recording as fast as it can while the tracker delivers: time until the last
    // event is stored.
    let tracker = open(configuration(options))
    let count = options.int("events")
    let delivery = Task { await tracker.run() }
    let clock = ContinuousClock()
    let start = clock.now
    let ad = tracker.ad(requestId: "bench-live", adUnit: "/1234/home/native", format: .custom(formatID: "10063170"))
    for _ in 0..<count { ad.recordImpression() }
    let recorded = clock.now - start
    var outcome = await tracker.flush()
    while outcome != .delivered || tracker.statistics.pending > 0 {
        if case .stopped = outcome { fail("delivery stopped") }
        try? await Task.sleep(for: .milliseconds(50))
        outcome = await tracker.flush()
    }
    let elapsed = clock.now - start
    delivery.cancel()
    let statistics = tracker.statistics
    print("live_events=\(count) live_record_seconds=\(seconds(recorded)) live_seconds=\(seconds(elapsed))")
    print("live_events_per_second=\(Int(Double(statistics.accepted + statistics.duplicates) / seconds(elapsed)))")
    print("live_requests=\(statistics.requests) live_retries=\(statistics.retries) accepted=\(statistics.accepted)")
    print("peak_rss_mib=\(peakRSSMiB())")

case "bench-baseline":
    // The same requests with no client library: batches of 500 events built and gzipped up
    // front, posted back to back through URLSession.
    guard let endpoint = URL(string: options.string("endpoint")) else { fail("--endpoint is not a URL") }
    let count = options.int("events")
    let gzip = "/bin/gzip"
    var bodies: [Data] = []
    var made = 0
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("probe-baseline-\(UUID().uuidString)")
    try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    while made < count {
        let n = min(500, count - made)
        let now = Date()
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let stamp = formatter.string(from: now)
        var json = "{\"sentAt\":\"\(stamp)\",\"events\":["
        for i in 0..<n {
            if i > 0 { json += "," }
            json += "{\"id\":\"\(UUID().uuidString.lowercased())\",\"type\":\"impression\",\"requestId\":\"bench-baseline\","
                + "\"adUnit\":\"/1234/home/native\",\"formatId\":\"10063170\",\"occurredAt\":\"\(stamp)\",\"source\":\"app\","
                + "\"attributes\":{\"probe\":\"tracker-client-probe\"}}"
        }
        json += "]}"
        let input = directory.appendingPathComponent("in.json")
        try! Data(json.utf8).write(to: input)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: gzip)
        process.arguments = ["-c", input.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try! process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        bodies.append(data)
        made += n
    }
    let configuration = URLSessionConfiguration.ephemeral
    configuration.httpMaximumConnectionsPerHost = 1
    let session = URLSession(configuration: configuration)
    let url = endpoint.appendingPathComponent("v1").appendingPathComponent("events")
    let clock = ContinuousClock()
    let start = clock.now
    var accepted = 0
    for body in bodies {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("gzip", forHTTPHeaderField: "Content-Encoding")
        request.setValue("Bearer " + options.string("key"), forHTTPHeaderField: "Authorization")
        request.httpBody = body
        guard let (data, response) = try? await session.data(for: request), (response as? HTTPURLResponse)?.statusCode == 200,
              let receipt = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { fail("a baseline request failed") }
        accepted += receipt["accepted"] as? Int ?? 0
    }
    let elapsed = clock.now - start
    print("baseline_events=\(count) baseline_seconds=\(seconds(elapsed)) baseline_accepted=\(accepted)")
    print("baseline_events_per_second=\(Int(Double(accepted) / seconds(elapsed)))")
    print("peak_rss_mib=\(peakRSSMiB())")

default:
    fail("unknown command '\(arguments[1])'")
}

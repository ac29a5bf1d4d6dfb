#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging
import Synchronization
import Tracker

/// How log lines are written: one JSON object per line, or text for a person at a terminal.
enum LogFormat: String, Sendable, CaseIterable {
    case json
    case text

    /// `TRACKER_LOG_FORMAT`, else text when `descriptor` is a terminal and JSON otherwise
    /// (a container's or systemd's collector reads JSON lines; a person reads text).
    static func resolve(_ value: String?, descriptor: Int32) throws(LogSettingError) -> LogFormat {
        guard let value else { return isatty(descriptor) == 1 ? .text : .json }
        guard let format = LogFormat(rawValue: value.lowercased()) else { throw .format(value) }
        return format
    }
}

/// A logging variable holds a value the tracker does not know.
enum LogSettingError: Error, Equatable, CustomStringConvertible {
    case format(String)
    case level(String)

    var description: String {
        switch self {
        case .format(let value): "TRACKER_LOG_FORMAT must be json or text, got '\(value)'"
        case .level(let value):
            "TRACKER_LOG_LEVEL must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), got '\(value)'"
        }
    }
}

/// One file descriptor that log lines go to, each line written with one `write` under a lock
/// so that lines from many threads never interleave.
final class LogStream: Sendable {
    let descriptor: Int32
    private let lock = Mutex(())

    init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    func emit(_ line: String) {
        var line = line
        line.withUTF8 { bytes in
            lock.withLock { _ in
                var offset = 0
                while offset < bytes.count {
                    let n = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                    if n > 0 { offset += n } else if n < 0, errno == EINTR { continue } else { return }
                }
            }
        }
    }
}

/// The tracker's log handler: JSON lines for collectors or text lines for terminals.
///
/// swift-log's `StreamLogHandler` writes only text; servers need lines a collector can parse
/// without guessing (`{"time":…,"level":…,"message":…,"tracker.request_id":…}`), so the
/// executable bootstraps this one. Metadata keys are written flat, sorted, after the fixed ones.
struct LineLogHandler: LogHandler {
    let label: String
    let format: LogFormat
    let stream: LogStream
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, format: LogFormat, stream: LogStream, level: Logger.Level) {
        self.label = label
        self.format = format
        self.stream = stream
        self.logLevel = level
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var all = metadata
        if let provided = metadataProvider?.get() { all.merge(provided) { _, new in new } }
        if let own = event.metadata { all.merge(own) { _, new in new } }
        stream.emit(Self.line(format: format, time: Timestamp.now(), level: event.level, label: label,
                               message: event.message.description, metadata: all))
    }

    /// One line, newline included.
    static func line(format: LogFormat, time: Timestamp, level: Logger.Level, label: String, message: String,
                     metadata: Logger.Metadata) -> String {
        var out = ""
        out.reserveCapacity(160 + message.utf8.count)
        let keys = metadata.keys.sorted()
        switch format {
        case .json:
            out += "{\"time\":\""
            out += time.rfc3339
            out += "\",\"level\":\""
            out += level.rawValue
            out += "\",\"logger\":"
            JSONText.appendQuoted(label, to: &out)
            out += ",\"message\":"
            JSONText.appendQuoted(message, to: &out)
            for key in keys where !Self.fixedKeys.contains(key) {
                out += ","
                JSONText.appendQuoted(key, to: &out)
                out += ":"
                appendJSON(metadata[key]!, to: &out)
            }
            out += "}\n"
        case .text:
            out += time.rfc3339
            out += " "
            out += level.rawValue
            out += " "
            out += label
            out += ": "
            out += message
            for key in keys {
                out += " "
                out += key
                out += "="
                out += metadata[key]!.description
            }
            out += "\n"
        }
        return out
    }

    /// Keys of every JSON line; metadata with these names would make a line with two of them.
    static let fixedKeys: Set<String> = ["time", "level", "logger", "message"]

    static func appendJSON(_ value: Logger.Metadata.Value, to out: inout String) {
        switch value {
        case .string(let s): JSONText.appendQuoted(s, to: &out)
        case .stringConvertible(let c): JSONText.appendQuoted(c.description, to: &out)
        case .array(let values):
            out += "["
            for (i, v) in values.enumerated() {
                if i > 0 { out += "," }
                appendJSON(v, to: &out)
            }
            out += "]"
        case .dictionary(let dictionary):
            out += "{"
            for (i, key) in dictionary.keys.sorted().enumerated() {
                if i > 0 { out += "," }
                JSONText.appendQuoted(key, to: &out)
                out += ":"
                appendJSON(dictionary[key]!, to: &out)
            }
            out += "}"
        }
    }
}

/// Where and how the process logs, from `TRACKER_LOG_FORMAT` and `TRACKER_LOG_LEVEL`.
struct LogSettings: Sendable {
    var format: LogFormat
    var level: Logger.Level
    var stream: LogStream

    /// Servers (`serve`, `project`) log to standard output, as a container runtime expects;
    /// one-shot commands to standard error, so that what they print (a key, a report) stays
    /// alone on standard output.
    static func resolve(server: Bool, format: String?, level: String?) throws(LogSettingError) -> LogSettings {
        let descriptor: Int32 = server ? STDOUT_FILENO : STDERR_FILENO
        let parsedLevel: Logger.Level
        if let level {
            guard let l = Logger.Level(rawValue: level.lowercased()) else { throw .level(level) }
            parsedLevel = l
        } else {
            parsedLevel = .info
        }
        return LogSettings(format: try LogFormat.resolve(format, descriptor: descriptor), level: parsedLevel,
                           stream: LogStream(descriptor: descriptor))
    }
}

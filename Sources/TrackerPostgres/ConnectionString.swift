/// Rewrites a PostgreSQL connection string (a `postgresql://` URL or `key=value` pairs) to log in
/// as another role: how `tracker roles passwords` turns the owner's DATABASE_URL into each
/// role's.
public enum ConnectionString {
    /// `conninfo` with its user and password replaced. In a URL the user information goes
    /// (percent-encoded); in `key=value` form the pairs are appended, and libpq takes the last.
    public static func replacingLogin(of conninfo: String, user: String, password: String) -> String {
        for scheme in ["postgresql://", "postgres://"] where conninfo.hasPrefix(scheme) {
            let rest = conninfo.dropFirst(scheme.count)
            let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
            let authority = rest[..<authorityEnd]
            let hosts = authority.lastIndex(of: "@").map { authority[authority.index(after: $0)...] } ?? authority
            return scheme + percentEncoded(user) + ":" + percentEncoded(password) + "@" + hosts + rest[authorityEnd...]
        }
        return conninfo + " user=" + quoted(user) + " password=" + quoted(password)
    }

    /// `conninfo` pointed at another server of the same cluster (a Citus worker): same login,
    /// database and options, another host and port. A URL gets the new authority; `key=value`
    /// form gets the pairs appended (libpq takes the last).
    public static func replacingHost(of conninfo: String, host: String, port: Int) -> String {
        for scheme in ["postgresql://", "postgres://"] where conninfo.hasPrefix(scheme) {
            let rest = conninfo.dropFirst(scheme.count)
            let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
            let authority = rest[..<authorityEnd]
            let login = authority.lastIndex(of: "@").map { String(authority[...$0]) } ?? ""
            let address = host.contains(":") ? "[\(host)]" : percentEncoded(host)
            var tail = String(rest[authorityEnd...])
            // A host or port in the query string would win over the authority: drop them.
            if let q = tail.firstIndex(of: "?") {
                let kept = tail[tail.index(after: q)...].split(separator: "&").filter {
                    !$0.hasPrefix("host=") && !$0.hasPrefix("hostaddr=") && !$0.hasPrefix("port=")
                }
                tail = String(tail[..<q]) + (kept.isEmpty ? "" : "?" + kept.joined(separator: "&"))
            }
            return scheme + login + address + ":" + String(port) + tail
        }
        return conninfo + " host=" + quoted(host) + " hostaddr='' port=" + String(port)
    }

    /// RFC 3986 unreserved characters pass; every other byte is %XX.
    static func percentEncoded(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(Character(Unicode.Scalar(byte)))
            default:
                let hex = Array("0123456789ABCDEF")
                out += "%" + String(hex[Int(byte >> 4)]) + String(hex[Int(byte & 15)])
            }
        }
        return out
    }

    /// A `key=value` value in single quotes, with `\` and `'` escaped (libpq's rule).
    static func quoted(_ value: String) -> String {
        var out = "'"
        for character in value {
            if character == "\\" || character == "'" { out.append("\\") }
            out.append(character)
        }
        return out + "'"
    }
}

/// The Ad Manager networks a key is scoped to (PROTOCOL.md 11): the first segment of an ad unit
/// path is its network code (`/6499/…`). A key without a scope serves every network.
public struct NetworkScope: Sendable, Hashable, CustomStringConvertible {
    /// The network codes, sorted and without repeats.
    public let codes: [String]

    /// The longest network code.
    public static let maxDigits = 20

    /// A scope of no network: what a stored scope that cannot be read serves.
    public static let none = NetworkScope(sortedCodes: [])

    private init(sortedCodes: [String]) {
        codes = sortedCodes
    }

    /// A scope of `codes`, each 1 to 20 ASCII digits; `nil` when a code breaks the rule or there
    /// is none.
    public init?(codes: some Sequence<String>) {
        let sorted = Array(Set(codes)).sorted()
        guard !sorted.isEmpty, sorted.allSatisfy(Self.isNetworkCode) else { return nil }
        self.init(sortedCodes: sorted)
    }

    /// A comma-separated list (`6499,21775744923`), as `tracker keys create --networks` takes it.
    ///
    /// - Throws: `NetworkScopeError`, naming what is wrong.
    public static func parse(_ list: String) throws(NetworkScopeError) -> NetworkScope {
        let parts = list.split(separator: ",", omittingEmptySubsequences: false).map { String($0) }
        for part in parts where !isNetworkCode(part) {
            throw .malformed(part)
        }
        guard let scope = NetworkScope(codes: parts) else { throw .malformed(list) }
        return scope
    }

    /// 1 to 20 ASCII digits.
    public static func isNetworkCode(_ text: some StringProtocol) -> Bool {
        (1...maxDigits).contains(text.utf8.count) && text.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }

    /// The network code of an ad unit path: its first segment (`6499` of `/6499/example/native`);
    /// empty when the path has none.
    public static func network(of adUnit: some StringProtocol) -> Substring {
        let text = Substring(adUnit)
        guard text.first == "/" else { return "" }
        let rest = text.dropFirst()
        return rest.prefix { $0 != "/" }
    }

    /// Whether the ad unit belongs to one of the scope's networks.
    public func contains(adUnit: some StringProtocol) -> Bool {
        contains(network: Self.network(of: adUnit))
    }

    /// Whether `network` is one of the scope's networks.
    public func contains(network: some StringProtocol) -> Bool {
        codes.contains { $0.utf8.elementsEqual(network.utf8) }
    }

    /// Whether every network of `other` is one of this scope's.
    public func covers(_ other: NetworkScope) -> Bool {
        other.codes.allSatisfy { contains(network: $0) }
    }

    /// `6499,21775744923`.
    public var description: String { codes.joined(separator: ",") }
}

/// Why a list of networks cannot scope a key.
public enum NetworkScopeError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A part of the list is not a network code.
    case malformed(String)

    public var description: String {
        switch self {
        case .malformed(let part):
            "networks must be a comma-separated list of Ad Manager network codes (1 to \(NetworkScope.maxDigits) digits each, "
                + "e.g. 6499,21775744923), got '\(part)'"
        }
    }
}

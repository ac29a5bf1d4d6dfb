/// A set of CIDR ranges that answers "is this address in any of them" in O(log n).
///
/// Built once per rule set (or per `TRACKER_TRUSTED_PROXIES`): the ranges are merged where
/// they overlap or touch into disjoint intervals, sorted per family, and an address is looked
/// up by binary search. Building sorts the ranges, O(n log n); a value is immutable and can be
/// shared between threads.
public struct IPRangeSet: Sendable, Equatable {
    /// Disjoint IPv4 intervals, sorted, neither overlapping nor adjacent: first and last address.
    private let v4First: [UInt32]
    private let v4Last: [UInt32]
    /// The same for IPv6, as 128-bit keys.
    private let v6First: [UInt128Key]
    private let v6Last: [UInt128Key]

    /// The set holding no address.
    public static let empty = IPRangeSet([])

    /// The union of `ranges`.
    ///
    /// - Parameters:
    ///   - ranges: any ranges, in any order, overlapping or not.
    public init(_ ranges: [CIDRRange]) {
        var v4: [(first: UInt32, last: UInt32)] = []
        var v6: [(first: UInt128Key, last: UInt128Key)] = []
        for range in ranges {
            let (first, last) = range.bounds
            switch range.network.family {
            case .v4: v4.append((UInt32(truncatingIfNeeded: first.low), UInt32(truncatingIfNeeded: last.low)))
            case .v6: v6.append((first, last))
            }
        }
        (v4First, v4Last) = Self.merged(v4, successor: { $0 == .max ? nil : $0 + 1 })
        (v6First, v6Last) = Self.merged(v6, successor: \.successor)
    }

    /// Sorted disjoint intervals from any intervals: each one starting at or before the
    /// successor of the current last address is folded into it.
    private static func merged<Key: Comparable>(_ intervals: [(first: Key, last: Key)], successor: (Key) -> Key?) -> ([Key], [Key]) {
        let sorted = intervals.sorted { $0.first < $1.first }
        var firsts: [Key] = []
        var lasts: [Key] = []
        firsts.reserveCapacity(sorted.count)
        lasts.reserveCapacity(sorted.count)
        for interval in sorted {
            if let last = lasts.last {
                // `nil`: the current interval already reaches the family's last address.
                guard let next = successor(last) else { break }
                if interval.first <= next {
                    if interval.last > last { lasts[lasts.count - 1] = interval.last }
                    continue
                }
            }
            firsts.append(interval.first)
            lasts.append(interval.last)
        }
        return (firsts, lasts)
    }

    /// Whether `address` is inside one of the ranges (an IPv4 address only in IPv4 ranges).
    ///
    /// - Parameters:
    ///   - address: the address to look up.
    public func contains(_ address: IPAddress) -> Bool {
        switch address.family {
        case .v4: Self.contains(UInt32(truncatingIfNeeded: address.low), firsts: v4First, lasts: v4Last)
        case .v6: Self.contains(address.key, firsts: v6First, lasts: v6Last)
        }
    }

    /// Binary search for the last interval starting at or before `key`.
    private static func contains<Key: Comparable>(_ key: Key, firsts: [Key], lasts: [Key]) -> Bool {
        var low = 0
        var high = firsts.count  // firsts[..<low] <= key, firsts[high...] > key
        while low < high {
            let mid = (low + high) / 2
            if firsts[mid] <= key { low = mid + 1 } else { high = mid }
        }
        return low > 0 && key <= lasts[low - 1]
    }

    /// Whether the set holds no address.
    public var isEmpty: Bool { v4First.isEmpty && v6First.isEmpty }

    /// How many disjoint intervals the ranges merged into (IPv4 and IPv6 together).
    public var intervalCount: Int { v4First.count + v6First.count }
}

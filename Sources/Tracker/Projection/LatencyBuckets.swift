/// The fixed latency buckets of the funnel (PROTOCOL.md 10): percentiles are read from counts per
/// bucket, which projections can keep and reports can sum over any rows.
public enum LatencyBuckets {
    /// Each bucket's upper bound in milliseconds, inclusive; a latency goes to the first bucket
    /// whose bound is at least it.
    public static let bounds: [Int] = [10, 20, 30, 50, 75, 100, 150, 200, 300, 400, 500, 750, 1000, 1500, 2000, 3000,
                                       4000, 5000, 7500, 10000, 15000, 20000, 30000, 60000, 600_000]

    /// The bucket (an index into `bounds`) of a latency of `milliseconds` (0 to 600 000).
    public static func bucket(of milliseconds: Int) -> Int {
        bounds.firstIndex { milliseconds <= $0 } ?? bounds.count - 1
    }

    /// The `p`th percentile of the values counted per bucket (`counts[i]` values in bucket i):
    /// the smallest bound b such that at least ceil(p / 100 × n) of the n values are ≤ b;
    /// `nil` when there are no values.
    public static func percentile(_ p: Int, of counts: some Collection<Int64>) -> Int? {
        let n = counts.reduce(0, +)
        guard n > 0 else { return nil }
        // ceil(p × n / 100) in integers.
        let needed = (Int64(p) * n + 99) / 100
        var seen: Int64 = 0
        for (bucket, count) in counts.enumerated() {
            seen += count
            if seen >= needed { return bounds[bucket] }
        }
        return bounds.last
    }
}

import FanfareCore

/// Dense indexes for `APNsReason`, so per-reason tables (counters, precomputed error bodies) are plain
/// arrays indexed without hashing or allocation.
///
/// `APNsReason.allCases` builds a new array on each call, so it is read once here. The index of a case
/// is read from the enum's one-byte tag, which Swift assigns in declaration order — the same order
/// `allCases` uses; `verifyLayout()` checks that assumption once at start-up.
enum ReasonTable {
    /// Every reason, in declaration order; `all[index(of: r)] == r`.
    static let all: [APNsReason] = {
        let cases = APNsReason.allCases.map { $0 }
        verifyLayout(cases)
        return cases
    }()

    static var count: Int { all.count }

    @inlinable
    static func index(of reason: APNsReason) -> Int {
        withUnsafeBytes(of: reason) { Int($0[0]) }
    }

    private static func verifyLayout(_ cases: [APNsReason]) {
        precondition(MemoryLayout<APNsReason>.size == 1, "APNsReason is expected to be a one-byte enum")
        for (position, reason) in cases.enumerated() {
            precondition(index(of: reason) == position, "APNsReason tag order differs from allCases order")
        }
    }
}

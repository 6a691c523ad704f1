/// Counts pushes per device token in fixed one-second windows and refuses those above the limit
/// (429 `TooManyRequests`). One per worker thread; storage allocated once, no allocation per push.
///
/// Tokens are identified by a 64-bit hash of their (case-folded) text, so two distinct tokens sharing a
/// hash would share a counter — negligible at these table sizes. Entries from earlier windows are free
/// slots, so the table never needs clearing; if more than the table can track arrive within one second,
/// the extra tokens are admitted unlimited and counted in `overflows`.
public final class PerTokenRateLimiter {
    private struct Entry {
        var hash: UInt64
        var window: Int64  // UNIX second; Int64.min = never used
        var count: Int32
    }

    /// Linear-probe distance before giving up (keeps the worst case bounded).
    static let probeLimit = 16

    public let limit: Int
    public let capacity: Int
    private let entries: UnsafeMutablePointer<Entry>
    /// Pushes admitted without tracking because the table was full for the current second.
    /// (`@exclusivity(unchecked)`: one thread owns the limiter; skips a per-push dynamic access check.)
    @exclusivity(unchecked) public private(set) var overflows = 0

    /// `limit` pushes per token per second; `capacity` must be a power of two.
    public init(limit: Int, capacity: Int) {
        precondition(limit > 0, "a rate limiter needs a positive limit")
        precondition(capacity > 0 && capacity & (capacity - 1) == 0, "capacity must be a power of two")
        self.limit = limit
        self.capacity = capacity
        entries = .allocate(capacity: capacity)
        entries.initialize(repeating: Entry(hash: 0, window: .min, count: 0), count: capacity)
    }

    deinit {
        entries.deinitialize(count: capacity)
        entries.deallocate()
    }

    /// Counts one push to `token` at `now`; false when it exceeds the limit for the current second.
    public func admit(token: UnsafeRawBufferPointer, now: SimulatorInstant) -> Bool {
        let hash = deviceTokenHash(token)
        let window = now.seconds
        let mask = capacity - 1
        var slot = Int(truncatingIfNeeded: hash) & mask
        // Within one window, occupied slots never free up, so a token's entry is always before the first
        // stale slot of its probe sequence: the first stale slot is where a new entry goes.
        for _ in 0..<min(Self.probeLimit, capacity) {
            let entry = entries[slot]
            if entry.window != window {
                entries[slot] = Entry(hash: hash, window: window, count: 1)
                return true
            }
            if entry.hash == hash {
                guard Int(entry.count) < limit else { return false }
                entries[slot].count += 1
                return true
            }
            slot = (slot + 1) & mask
        }
        overflows += 1
        return true
    }
}

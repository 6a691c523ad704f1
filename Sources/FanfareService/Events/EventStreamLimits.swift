import FanfareFanout
import Synchronization

/// Caps the event streams (`/v1/waves/{id}/events`) open at once: each holds a connection and a task for as long
/// as its client reads. A stream holds a `Ticket` until it is released (the response ended or its client left).
package final class EventStreamLimiter: Sendable {
    package let limit: Int
    private let open = Atomic<Int>(0)

    package init(limit: Int) { self.limit = limit }

    /// Streams open now.
    package var count: Int { open.load(ordering: .relaxed) }

    /// A ticket, or nil when `limit` streams are open.
    package func admit() -> Ticket? {
        let now = open.add(1, ordering: .acquiringAndReleasing).newValue
        guard now <= limit else {
            open.subtract(1, ordering: .acquiringAndReleasing)
            return nil
        }
        return Ticket(self)
    }

    fileprivate func release() { open.subtract(1, ordering: .acquiringAndReleasing) }

    package final class Ticket: Sendable {
        private let limiter: EventStreamLimiter
        fileprivate init(_ limiter: EventStreamLimiter) { self.limiter = limiter }
        deinit { limiter.release() }
    }
}

/// Several nodes: the running waves' reports as the shared store sums them, read at most once per `interval`
/// per wave on this node however many event streams follow it (each stream used to read the database every
/// interval on its own).
package final class SharedReportCache: Sendable {
    private struct Entry {
        var report: WaveReport?
        var readAt: ContinuousClock.Instant
        var reading: Bool
    }

    private let interval: Duration
    private let entries = Mutex<[UInt64: Entry]>([:])
    private let read: @Sendable (UInt64) async -> WaveReport?

    package init(interval: Duration, read: @escaping @Sendable (UInt64) async -> WaveReport?) {
        self.interval = interval
        self.read = read
    }

    /// The wave's report, read again if the cached one is an interval old and no other stream is reading it.
    package func report(id: UInt64) async -> WaveReport? {
        let now = ContinuousClock.now
        let cached: WaveReport? = entries.withLock { entries in
            if let entry = entries[id], let report = entry.report, entry.reading || now - entry.readAt < interval {
                return report
            }
            entries[id] = Entry(report: entries[id]?.report, readAt: entries[id]?.readAt ?? now, reading: true)
            return nil
        }
        if let cached { return cached }
        let fresh = await read(id)
        entries.withLock { entries in
            // A complete wave is read no more: its report stays only until the last stream lets go of it.
            if fresh?.isComplete == true || fresh == nil {
                entries[id] = nil
            } else {
                entries[id] = Entry(report: fresh, readAt: ContinuousClock.now, reading: false)
            }
        }
        return fresh
    }
}

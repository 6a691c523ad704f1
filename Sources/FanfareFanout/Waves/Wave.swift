import FanfareCore
import FanfareIO
import Synchronization
import Glibc

/// One update × its audience: the unit of accounting. Every token the wave targets ends in exactly one of
/// delivered, failed (by reason), superseded, expired or invalidated; `sent`, `downgraded` and `retried`
/// count attempts, not outcomes.
public final class Wave: Sendable {
    public let id: UInt64
    public let channel: String
    public let event: LiveActivityEvent
    public let timestamp: Int64
    /// The update's `dismissal-date` (UNIX seconds), if any: an `end` wave retires its channel after it.
    public let dismissalDate: Int64?
    /// Monotonic ns (`IOLoop.monotonicNanoseconds()`) when `publish` accepted it.
    public let publishedAt: UInt64
    /// UNIX ms when it was first published (before any restart).
    public let publishedAtWall: Int64
    /// How many times an engine resumed it after a restart.
    public let restarts: Int
    let tallies: [WaveTally]
    /// The broadcast half, on a channel linked to an APNs broadcast channel (update and end events).
    public let broadcast: BroadcastPart?
    /// Set when a graceful shutdown left the wave unfinished (checkpointed, resumed by the next engine).
    private let interrupted = Atomic<Bool>(false)
    private let unfinishedShards: Atomic<Int>
    /// Monotonic ns when the last shard finished (0 while running).
    private let completedAtStorage = Atomic<UInt64>(0)
    private let waiters = Mutex<[Waiter]>([])

    /// Who waits for the wave to end: a suspended task, or a blocked thread.
    private enum Waiter {
        case task(CheckedContinuation<Void, Never>)
        case thread(ThreadSignal)

        func wake() {
            switch self {
            case .task(let continuation): continuation.resume()
            case .thread(let signal): signal.post()
            }
        }
    }
    private let onComplete: (@Sendable (Wave) -> Void)?
    /// The engine's breaker: an unfinished wave is paused while it is open.
    private let breaker: InvalidTokenBreaker?

    init(
        id: UInt64, update: ChannelUpdate, shardCount: Int, publishedAt: UInt64, breaker: InvalidTokenBreaker? = nil,
        publishedAtWall: Int64 = 0, restarts: Int = 0, broadcast: BroadcastPart? = nil, participating: [Int]? = nil,
        onComplete: (@Sendable (Wave) -> Void)?
    ) {
        self.broadcast = broadcast
        self.publishedAtWall = publishedAtWall
        self.restarts = restarts
        self.id = id
        channel = update.channel
        event = update.content.event
        timestamp = update.content.timestamp
        dismissalDate = update.content.dismissalDate
        self.publishedAt = publishedAt
        tallies = (0..<shardCount).map { _ in WaveTally() }
        if let participating {
            // Several nodes: this engine's view covers the shards it holds; the others' parts are theirs.
            precondition(!participating.isEmpty, "a wave view over no shard would never complete")
            let taking = Set(participating)
            for shard in 0..<shardCount where !taking.contains(shard) {
                tallies[shard].finished.store(true, ordering: .relaxed)
            }
            unfinishedShards = Atomic(taking.count)
        } else {
            unfinishedShards = Atomic(shardCount)
        }
        self.breaker = breaker
        self.onComplete = onComplete
    }

    /// True once every shard has accounted for every token it targeted.
    public var isComplete: Bool { unfinishedShards.load(ordering: .acquiring) == 0 }

    /// Running, paused (the invalid-token breaker is open: nothing of it is sent), or complete.
    public var state: WaveState {
        if isComplete { return .complete }
        if interrupted.load(ordering: .acquiring) { return .interrupted }
        return breaker?.isOpen == true ? .paused : .running
    }

    /// Monotonic ns when the wave completed (nil while it runs).
    public var completedAt: UInt64? {
        let value = completedAtStorage.load(ordering: .acquiring)
        return value == 0 ? nil : value
    }

    /// A consistent-enough snapshot for progress displays (counters move while a wave runs).
    public var report: WaveReport { WaveReport(self) }

    /// Returns once the wave is complete (or interrupted by a graceful shutdown: see `state`).
    public func completion() async {
        if isComplete || isInterrupted { return }
        await withCheckedContinuation { continuation in
            let ready = waiters.withLock { list -> Bool in
                if isComplete || isInterrupted { return true }
                list.append(.task(continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    var isInterrupted: Bool { interrupted.load(ordering: .acquiring) }

    /// A graceful shutdown left it unfinished: wake whoever waits for it.
    func interrupt() {
        guard !isComplete else { return }
        interrupted.store(true, ordering: .releasing)
        let continuations = waiters.withLock { list in
            defer { list.removeAll() }
            return list
        }
        for waiter in continuations { waiter.wake() }
    }

    /// Blocks the calling thread until the wave completes or `timeout` passes; returns whether it completed.
    public func waitUntilComplete(timeout: Duration) -> Bool {
        let (seconds, attoseconds) = timeout.components
        let deadline =
            monotonicNow() &+ UInt64(max(0, seconds)) &* 1_000_000_000 &+ UInt64(max(0, attoseconds) / 1_000_000_000)
        let signal = ThreadSignal()
        let waiting = waiters.withLock { list -> Bool in
            if isComplete { return false }
            list.append(.thread(signal))
            return true
        }
        // An interrupt wakes it too, before the wave completes: then the deadline is what is left to wait.
        while waiting && !isComplete && signal.wait(until: deadline) {}
        return isComplete
    }

    /// Called by a shard's thread once, when its part is done.
    /// Several nodes: `shard`'s part went to another node (rebalancing); this view stops waiting for it.
    func partHandedOver(_ shard: Int) {
        guard !tallies[shard].finished.load(ordering: .acquiring) else { return }
        shardFinished(shard)
    }

    func shardFinished(_ shard: Int) {
        assert(!tallies[shard].finished.load(ordering: .relaxed), "shard finished a wave twice")
        tallies[shard].finished.store(true, ordering: .releasing)
        guard unfinishedShards.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        completedAtStorage.store(monotonicNow(), ordering: .releasing)
        let continuations = waiters.withLock { list in
            defer { list.removeAll() }
            return list
        }
        for waiter in continuations { waiter.wake() }
        onComplete?(self)
    }
}

@inline(__always)
func monotonicNow() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
}

/// Where a wave is.
public enum WaveState: String, Sendable, Equatable {
    /// Pushes are going out (or waiting for retries, the minimum interval, answers).
    case running
    /// The invalid-token breaker is open: the engine sends nothing of the wave and deletes no token until an
    /// operator resets the breaker (`FanoutEngine.resetBreaker(pruneHeldTokens:)`) or the engine shuts down.
    case paused
    /// Every targeted token has its outcome.
    case complete
    /// The engine shut down gracefully with the wave unfinished; its progress is checkpointed and the next
    /// engine on the same `WaveStore` resumes it (same id).
    case interrupted
}

/// A wave's counters summed over shards.
public struct WaveReport: Sendable, Equatable {
    public var id: UInt64
    public var channel: String
    public var event: LiveActivityEvent
    public var timestamp: Int64
    public var targeted = 0
    public var sent = 0
    public var delivered = 0
    public var failed = 0
    public var superseded = 0
    public var downgraded = 0
    public var expired = 0
    public var invalidated = 0
    public var retried = 0
    /// Delivered after an earlier attempt of the same state ended unconfirmed (`PushFailure.unconfirmed`):
    /// the device may have received it twice.
    public var possibleDuplicates = 0
    /// Pushes sent after a restart to tokens that may have received this wave's push before it (sent after the
    /// last checkpoint, or in flight at the crash): the most duplicates the restart could have caused.
    public var resentAfterRestart = 0
    /// How many times an engine resumed this wave after a restart.
    public var restarts = 0
    /// Failed outcomes by reason (APNs reason string, or DeadlineExceeded / ResendLimitReached / Shutdown).
    public var failedByReason: [String: Int] = [:]
    /// From publish to the first and to the last answer from APNs (makespan), in ns; nil before any answer.
    public var timeToFirstAck: UInt64?
    public var makespan: UInt64?
    public var state = WaveState.running
    public var isComplete: Bool { state == .complete }
    /// The broadcast half (a channel linked to an APNs broadcast channel); the counters above are the per-token
    /// half.
    public var broadcast: BroadcastReport?

    init(_ wave: Wave) {
        id = wave.id
        channel = wave.channel
        event = wave.event
        timestamp = wave.timestamp
        state = wave.state
        restarts = wave.restarts
        broadcast = wave.broadcast.map(BroadcastReport.init)
        var firstAck: UInt64 = .max
        var lastAck: UInt64 = 0
        for tally in wave.tallies {
            targeted += tally.targeted.load(ordering: .relaxed)
            sent += tally.sent.load(ordering: .relaxed)
            delivered += tally.delivered.load(ordering: .relaxed)
            failed += tally.failed.load(ordering: .relaxed)
            superseded += tally.superseded.load(ordering: .relaxed)
            downgraded += tally.downgraded.load(ordering: .relaxed)
            expired += tally.expired.load(ordering: .relaxed)
            invalidated += tally.invalidated.load(ordering: .relaxed)
            retried += tally.retried.load(ordering: .relaxed)
            possibleDuplicates += tally.possibleDuplicates.load(ordering: .relaxed)
            resentAfterRestart += tally.resentAfterRestart.load(ordering: .relaxed)
            let first = tally.firstAck.load(ordering: .relaxed)
            if first != 0 { firstAck = min(firstAck, first) }
            lastAck = max(lastAck, tally.lastAck.load(ordering: .relaxed))
            for reason in 0..<FailureReason.count {
                let count = tally.failures(reason: reason)
                if count > 0 { failedByReason[FailureReason.name(reason), default: 0] += count }
            }
        }
        if firstAck != .max { timeToFirstAck = firstAck > wave.publishedAt ? firstAck - wave.publishedAt : 0 }
        if lastAck != 0 { makespan = lastAck > wave.publishedAt ? lastAck - wave.publishedAt : 0 }
    }

    /// Failed because the connection ended after the push went out and before APNs answered
    /// (`PushFailure.unconfirmed`; by default such pushes are not sent again, see
    /// `FanoutConfiguration.retryUnconfirmed`). Part of `failed`.
    public var unconfirmed: Int { failedByReason[FailureReason.name(FailureReason.unconfirmed)] ?? 0 }

    /// Outcomes so far; equals `targeted` once the wave is complete.
    public var accounted: Int { delivered + failed + superseded + expired + invalidated }

    /// Answers per second over the makespan (pushes APNs answered, delivered or not).
    public var pushesPerSecond: Double {
        guard let makespan, makespan > 0 else { return 0 }
        return Double(delivered + failed + invalidated) / (Double(makespan) / 1e9)
    }
}

import FanfareCore
import FanfareIO
import Glibc
import Synchronization

/// Autoscaling (`ConnectionAutoscaler`): a worker measures each decision interval and opens or drains
/// connections.
extension PushWorker {

    /// Slots in use (the autoscaler's target).
    private var activeSlots: Int { slots.reduce(0) { $0 + ($1.active ? 1 : 0) } }

    /// A decision interval ended: measure, decide, and open or drain connections.
    func autoscale(now: UInt64) {
        guard autoscaler != nil else { return }
        var activeCount = 0
        var ready = 0
        var streamLimit = 0
        for slot in slots.indices where slots[slot].active {
            activeCount += 1
            if let connection = slots[slot].connection, connection.isFannedOut {
                ready += 1
                streamLimit = max(streamLimit, connection.streamLimit)
            }
        }
        let completed =
            counters.delivered.load(ordering: .relaxed) + counters.rejected.load(ordering: .relaxed)
            + counters.failed.load(ordering: .relaxed)
        let sample = measurement.finish(
            now: now, cpuTime: Self.threadCPUTime(), completed: completed, connections: activeCount, ready: ready,
            streamLimit: streamLimit)
        // In place, not on a copy: a connection failing while this decision opens connections reports to it.
        guard let decision = autoscaler?.decide(now: now, sample) else { return }
        switch decision {
        case .hold:
            break
        case .scaleUp(let count, let reason):
            var opened = 0
            for slot in slots.indices where !slots[slot].active && slots[slot].connection == nil && opened < count {
                slots[slot].active = true
                slots[slot].provisional = true
                slots[slot].backoff = 0
                opened += 1
                openConnection(slot)
            }
            if opened > 0 {
                counters.scaleUps.add(1, ordering: .relaxed)
                configuration.logger?.info(
                    "connections scaled up",
                    metadata: ["worker": "\(index)", "connections": "\(activeCount + opened)", "reason": "\(reason)"])
            }
        case .scaleDown(let reason):
            guard let slot = slots.lastIndex(where: \.active) else { break }
            slots[slot].active = false
            slots[slot].provisional = false
            slots[slot].connection?.beginDraining(reason: "the autoscaler let a surplus connection go")
            counters.scaleDowns.add(1, ordering: .relaxed)
            configuration.logger?.info(
                "connection scaled down",
                metadata: ["worker": "\(index)", "connections": "\(activeCount - 1)", "reason": "\(reason)"])
        }
        counters.connectionsTarget.store(activeSlots, ordering: .relaxed)
        if let reason = autoscaler?.lastReason { lastAutoscaleReasonBox.withLock { $0 = reason } }
    }

    /// A connection a scale-up opened ended before it proved usable (failed connect, 403, GOAWAY first): the
    /// slot goes back rather than retrying, and scale-ups back off. False for the worker's other slots,
    /// which keep reconnecting with the slot's back-off.
    func releaseFailedScaleUp(_ slot: Int) -> Bool {
        guard slots[slot].provisional, autoscaler != nil else { return false }
        slots[slot].provisional = false
        slots[slot].active = false
        autoscaler?.connectionFailed(now: loop.now)
        counters.scaleUpFailures.add(1, ordering: .relaxed)
        counters.connectionsTarget.store(activeSlots, ordering: .relaxed)
        if let reason = autoscaler?.lastReason {
            lastAutoscaleReasonBox.withLock { $0 = reason }
            configuration.logger?.info(
                "connection scale-up failed", metadata: ["worker": "\(index)", "reason": "\(reason)"])
        }
        return true
    }

    /// The autoscaler's latest reason (why it scaled or held), for statistics.
    var lastAutoscaleReason: String? { lastAutoscaleReasonBox.withLock { $0 } }

    /// CPU time of the calling thread (once per decision: one clock_gettime).
    static func threadCPUTime() -> UInt64 {
        var spec = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec) == 0 else { return 0 }
        return UInt64(max(0, spec.tv_sec)) &* 1_000_000_000 &+ UInt64(max(0, spec.tv_nsec))
    }

    /// The most recent connection failure, for error messages.
    var connectionErrorDescription: String? { lastConnectionError }
    /// The most recent rejection of the server's certificate, if any.
    var certificateRejection: String? { certificateRejectionBox.withLock { $0 } }
}

/// What a worker measures between two autoscaling decisions, once per tick (no work per push): the time
/// the stream credits were the limit and the time integral of pushes in flight.
struct AutoscaleMeasurement {
    private var startedAt: UInt64 = 0
    private var lastTick: UInt64 = 0
    private var lastInFlight = 0
    private var lastCreditBound = false
    private var creditBound: UInt64 = 0
    private var inFlightTime: Double = 0
    private var cpuTimeAtStart: UInt64 = 0
    private var completedAtStart = 0
    var peakInFlight = 0

    mutating func start(now: UInt64, cpuTime: UInt64) {
        startedAt = now
        lastTick = now
        cpuTimeAtStart = cpuTime
    }

    /// The state held since the previous tick; `inFlight` and `creditBound` hold from now on.
    mutating func advance(now: UInt64, inFlight: Int, creditBound: Bool) {
        let elapsed = now &- lastTick
        if lastCreditBound { self.creditBound &+= elapsed }
        inFlightTime += Double(lastInFlight) * Double(elapsed)
        lastTick = now
        lastInFlight = inFlight
        lastCreditBound = creditBound
    }

    /// The interval's sample; the next interval starts now.
    mutating func finish(
        now: UInt64, cpuTime: UInt64, completed: Int, connections: Int, ready: Int, streamLimit: Int
    )
        -> ConnectionAutoscaler.Sample
    {
        advance(now: now, inFlight: lastInFlight, creditBound: lastCreditBound)
        let sample = ConnectionAutoscaler.Sample(
            elapsed: now &- startedAt, creditBound: creditBound, inFlightTime: inFlightTime, peakInFlight: peakInFlight,
            completions: completed - completedAtStart, cpuTime: cpuTime &- cpuTimeAtStart, connections: connections,
            readyConnections: ready, streamLimit: streamLimit)
        startedAt = now
        creditBound = 0
        inFlightTime = 0
        cpuTimeAtStart = cpuTime
        completedAtStart = completed
        peakInFlight = lastInFlight
        return sample
    }
}

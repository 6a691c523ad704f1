/// The autoscaler's rule: from what a worker measured over one decision interval, how many connections it
/// should have. A value type with no clock of its own (the worker passes `now`), so the rule is tested with
/// made-up samples and times.
///
/// - Scale up when the stream credits were the limit (work waited while every connection was at its stream
///   limit, for most of the interval), every connection is up and past APNs' one-stream gate, the worker's
///   CPU is not the limit, and no back-off holds. How many: Little's law. The round trip is the mean in
///   flight / the answers per second; the rate the worker could send is its rate / its CPU share; wanted
///   in flight = that rate × the round trip, divided by the server's stream limit. At least one more, at
///   most `maximumNewConnections` more, never past `maximumConnections`. The first decision after a
///   scale-up (and after new connections came up) only measures.
/// - A scale-up that did not raise the rate by half of what Little's law promised (answers slowed down
///   instead: the server or the network is the limit) holds further scale-ups for 4 decision intervals,
///   doubling while it repeats, at most `idleTimeout`.
/// - A connection that failed before it proved usable (connect failed, 403, GOAWAY first) backs scale-ups
///   off: doubling from the reconnect back-off's minimum to its maximum; a new connection proving usable
///   resets it.
/// - Scale down one connection once the peak in flight has fitted in one connection fewer at half its
///   stream limit for `idleTimeout` (the next one waits another `idleTimeout`), never below
///   `minimumConnections`.
public struct ConnectionAutoscaler: Sendable {
    /// What the worker measured since the previous decision.
    public struct Sample: Sendable, Equatable {
        /// Nanoseconds since the previous decision.
        public var elapsed: UInt64
        /// Of those, the time work waited (pending pushes, or a producer with more) while every connection
        /// was at its stream limit.
        public var creditBound: UInt64
        /// The time integral of pushes in flight (in-flight × nanoseconds): / elapsed = mean in flight.
        public var inFlightTime: Double
        /// The most pushes in flight at once.
        public var peakInFlight: Int
        /// Pushes answered (or ended) in the interval.
        public var completions: Int
        /// Nanoseconds of CPU the worker's thread used in the interval.
        public var cpuTime: UInt64
        /// Connections the worker keeps (its target) and those of them ready past the one-stream gate.
        public var connections: Int
        public var readyConnections: Int
        /// The server's stream limit per connection (the largest live one among the ready connections).
        public var streamLimit: Int

        public init(
            elapsed: UInt64, creditBound: UInt64, inFlightTime: Double, peakInFlight: Int, completions: Int,
            cpuTime: UInt64,
            connections: Int, readyConnections: Int, streamLimit: Int
        ) {
            self.elapsed = elapsed
            self.creditBound = creditBound
            self.inFlightTime = inFlightTime
            self.peakInFlight = peakInFlight
            self.completions = completions
            self.cpuTime = cpuTime
            self.connections = connections
            self.readyConnections = readyConnections
            self.streamLimit = streamLimit
        }
    }

    public enum Decision: Sendable, Equatable {
        case hold
        /// Open this many connections more.
        case scaleUp(by: Int, reason: String)
        /// Drain one connection.
        case scaleDown(reason: String)
    }

    public let settings: ConnectionAutoscaling
    private let backoffMinimum: UInt64
    private let backoffMaximum: UInt64
    /// Scale-ups wait until then after a failed new connection; the wait doubles with each failure.
    public private(set) var holdUntil: UInt64 = 0
    public private(set) var backoff: UInt64 = 0
    /// Since when the connections have been little used (nil: they are not).
    private var idleSince: UInt64?
    /// The connections and rate of the latest scale-up, to see whether it raised the rate.
    private var lastScaleUp: (connections: Int, rate: Double)?
    /// Whether an interval measured the current connections: false after a scale-up (the interval that follows
    /// measures the ramp, not what they carry, even when they came up at once) and while new connections are
    /// still coming up; the next credit-bound decision then only measures.
    private var settled = true
    /// Scale-ups wait until then after one that did not raise the rate (the server or network is the limit, or
    /// the measurement was noise): 4 decision intervals, doubling while it repeats, at most `idleTimeout`.
    public private(set) var plateauUntil: UInt64 = 0
    private var plateauWait: UInt64 = 0
    /// The latest decision's reason (or why it held), for statistics.
    public private(set) var lastReason = "starting"

    public init(settings: ConnectionAutoscaling, backoffMinimum: Duration, backoffMaximum: Duration) {
        self.settings = settings
        self.backoffMinimum = max(1, backoffMinimum.nanoseconds)
        self.backoffMaximum = max(self.backoffMinimum, backoffMaximum.nanoseconds)
    }

    /// A connection opened by a scale-up failed before it proved usable.
    public mutating func connectionFailed(now: UInt64) {
        let doubled = backoff.multipliedReportingOverflow(by: 2)
        backoff =
            backoff == 0
            ? backoffMinimum : min(backoffMaximum, doubled.overflow ? backoffMaximum : doubled.partialValue)
        let until = now.addingReportingOverflow(backoff)
        holdUntil = until.overflow ? .max : until.partialValue
        lastReason = "a new connection failed: scale-ups wait \(Self.milliseconds(backoff)) ms"
    }

    /// A new connection proved usable: the back-off starts over.
    public mutating func connectionProvedUsable() {
        backoff = 0
    }

    public mutating func decide(now: UInt64, _ sample: Sample) -> Decision {
        guard sample.elapsed > 0 else { return .hold }
        let measured = Measured(sample)
        // Credits were the limit for most of the interval (not a moment between two answers).
        if sample.creditBound >= sample.elapsed / 4 * 3 {
            idleSince = nil
            return decideCreditBound(now: now, sample, measured)
        }
        return decideLittleUsed(now: now, sample, measured)
    }

    /// What a sample says per second and on average, worked out once for the decision and its reason.
    private struct Measured {
        /// Answers per second.
        let rate: Double
        let meanInFlight: Double
        /// The share of the interval the worker's thread was on a CPU.
        let cpuShare: Double
        let streamLimit: Int
        let summary: String

        init(_ sample: Sample) {
            let elapsedSeconds = Double(sample.elapsed) / 1e9
            rate = Double(sample.completions) / elapsedSeconds
            meanInFlight = sample.inFlightTime / Double(sample.elapsed)
            cpuShare = Double(sample.cpuTime) / Double(sample.elapsed)
            streamLimit = max(1, sample.streamLimit)
            summary =
                "\(Int(rate)) pushes/s, mean in flight \(Int(meanInFlight)), peak \(sample.peakInFlight), CPU \(Int(cpuShare * 100)) %"
        }
    }

    /// Work waited on stream credits: scale up unless something says more connections would not help yet.
    private mutating func decideCreditBound(now: UInt64, _ sample: Sample, _ measured: Measured) -> Decision {
        guard sample.connections < settings.maximumConnections else {
            lastReason =
                "credit-bound at the maximum of \(settings.maximumConnections) connections (\(measured.summary))"
            return .hold
        }
        guard sample.readyConnections >= sample.connections else {
            settled = false
            lastReason =
                "credit-bound, waiting for \(sample.connections - sample.readyConnections) connections to come up"
            return .hold
        }
        guard settled else {
            settled = true
            lastReason = "credit-bound, measuring the new connections (\(measured.summary))"
            return .hold
        }
        guard now >= holdUntil else {
            lastReason = "credit-bound, backing off after a failed connection"
            return .hold
        }
        if lastScaleUpFellShort(now: now, sample, rate: measured.rate) { return .hold }
        guard now >= plateauUntil else {
            lastReason = "credit-bound, but more connections did not raise the rate (\(measured.summary))"
            return .hold
        }
        guard measured.cpuShare < settings.cpuBoundShare else {
            lastReason = "CPU-bound, not credit-bound (\(measured.summary))"
            return .hold
        }
        guard measured.rate > 0, measured.meanInFlight > 0 else {
            lastReason = "credit-bound, no answers yet"
            return .hold
        }
        return scaleUp(sample, measured)
    }

    /// Whether the latest scale-up, now measured, fell short of what Little's law promised; if so, scale-ups
    /// wait (4 decision intervals, doubling while it repeats, at most `idleTimeout`).
    private mutating func lastScaleUpFellShort(now: UInt64, _ sample: Sample, rate: Double) -> Bool {
        guard let last = lastScaleUp, sample.connections > last.connections else { return false }
        // Little's law promised the rate would grow with the connections; when it did not (by half of
        // that), answers slowed down instead: the server or the network is the limit, not the credits.
        let promised = last.rate * Double(sample.connections) / Double(last.connections) - last.rate
        lastScaleUp = nil
        guard rate - last.rate < promised / 2 else {
            plateauWait = 0  // it did raise the rate
            return false
        }
        let first = settings.decisionInterval.nanoseconds.multipliedReportingOverflow(by: 4)
        let doubled = plateauWait.multipliedReportingOverflow(by: 2)
        let longest = max(settings.decisionInterval.nanoseconds, settings.idleTimeout.nanoseconds)
        let wait = min(
            longest,
            plateauWait == 0
                ? (first.overflow ? longest : first.partialValue)
                : (doubled.overflow ? longest : doubled.partialValue))
        plateauWait = wait
        let until = now.addingReportingOverflow(wait)
        plateauUntil = until.overflow ? .max : until.partialValue
        lastReason =
            "\(last.connections) → \(sample.connections) connections took the rate from \(Int(last.rate)) to only "
            + "\(Int(rate)) pushes/s: the server or network is the limit; no scale-up for \(Self.milliseconds(wait)) ms"
        return true
    }

    /// How many connections to open, by Little's law: round trip = in flight / rate; the rate this worker could
    /// send = rate / CPU share.
    private mutating func scaleUp(_ sample: Sample, _ measured: Measured) -> Decision {
        let limit = measured.streamLimit
        let roundTrip = measured.meanInFlight / measured.rate
        let sendable = measured.rate / max(measured.cpuShare, 0.01)
        let wantedInFlight = sendable * roundTrip
        let wanted = Int(min(Double(settings.maximumConnections), (wantedInFlight / Double(limit)).rounded(.up)))
        let step = min(
            settings.maximumNewConnections, settings.maximumConnections - sample.connections,
            max(1, wanted - sample.connections))
        lastReason =
            "credit-bound (\(measured.summary), round trip \(Self.milliseconds(UInt64(roundTrip * 1e9))) ms, limit \(limit)): "
            + "wants \(wanted) connections, opening \(step)"
        lastScaleUp = (sample.connections, measured.rate)
        settled = false  // the next interval measures the ramp; the one after it what the connections carry
        return .scaleUp(by: step, reason: lastReason)
    }

    /// Credits were not the limit: let one connection go once the peak has fitted in one fewer at half its stream
    /// limit for `idleTimeout`.
    private mutating func decideLittleUsed(now: UInt64, _ sample: Sample, _ measured: Measured) -> Decision {
        let fewer = sample.connections - 1
        guard fewer >= settings.minimumConnections, sample.peakInFlight * 2 <= fewer * measured.streamLimit else {
            idleSince = nil
            lastReason = "credits not the limit (\(measured.summary))"
            return .hold
        }
        let since = idleSince ?? now
        idleSince = since
        guard now &- since >= settings.idleTimeout.nanoseconds else {
            lastReason = "little used for \(Self.milliseconds(now &- since)) ms (\(measured.summary))"
            return .hold
        }
        lastReason =
            "little used for \(Self.milliseconds(now &- since)) ms (\(measured.summary)): letting one of \(sample.connections) go"
        idleSince = now  // the next one waits a whole idle time again
        return .scaleDown(reason: lastReason)
    }

    private static func milliseconds(_ nanoseconds: UInt64) -> String {
        let tenths = nanoseconds / 100_000
        return "\(tenths / 10).\(tenths % 10)"
    }
}

import FanfareClient
import FanfareCore
import FanfareIO
import Glibc
import Histogram

/// What a load run sends and how fast.
public struct LoadPlan: Sendable {
    /// Total pushes; nil runs until `duration` ends.
    public var pushes: Int?
    public var duration: Duration?
    /// Open loop: pushes per second over all workers; nil = closed loop (as fast as streams allow).
    public var rate: Double?
    public var tokens: [DeviceToken]
    public var payload: LoadPayload
    public var priority: PushPriority = .normal
    /// How often `progress` is called.
    public var progressInterval: Duration = .seconds(1)

    /// `LoadRunner.run` checks the plan (`validate()`) before it sends anything.
    public init(pushes: Int?, duration: Duration?, rate: Double?, tokens: [DeviceToken], payload: LoadPayload) {
        self.pushes = pushes
        self.duration = duration
        self.rate = rate
        self.tokens = tokens
        self.payload = payload
    }
}

/// One progress sample, for a live display.
public struct LoadProgress: Sendable {
    public var elapsedSeconds: Double
    public var completed: Int
    public var errors: Int
    public var inFlight: Int
    /// Connections open now (the autoscaler's choice, or the fixed count once up).
    public var connections: Int
    public var pushesPerSecond: Double  // over the last interval
    public var p99Milliseconds: Double  // over the whole run so far
}

/// A load plan that cannot run, with what to change.
public struct LoadPlanError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

extension LoadPlan {
    public enum Limits {
        public static let minimumRate = 0.001
        public static let maximumRate = 1e9
        public static let longestDurationSeconds = 30.0 * 24 * 3600
        public static let generatedTokens = 10_000_000
    }

    /// Throws the first value that cannot work (a rate, duration or count that would overflow a schedule).
    public func validate() throws(LoadPlanError) {
        guard pushes != nil || duration != nil else {
            throw LoadPlanError("a load plan needs a push count or a duration")
        }
        if let pushes, pushes <= 0 { throw LoadPlanError("pushes \(pushes) must be positive") }
        if let duration, !(duration > .zero && duration <= .seconds(Limits.longestDurationSeconds)) {
            throw LoadPlanError(
                "duration \(duration) must be positive and at most \(Int(Limits.longestDurationSeconds)) s")
        }
        if let rate, !(rate >= Limits.minimumRate && rate <= Limits.maximumRate) {
            throw LoadPlanError("rate \(rate) must be \(Limits.minimumRate)...\(Limits.maximumRate) pushes per second")
        }
        guard !tokens.isEmpty else { throw LoadPlanError("a load plan needs at least one token") }
        guard progressInterval > .zero && progressInterval <= .seconds(3600) else {
            throw LoadPlanError("progressInterval \(progressInterval) must be positive and at most an hour")
        }
    }
}

/// Drives a load plan through a real `APNsClient` and reports what happened.
public enum LoadRunner {
    public static func run(
        client configuration: ClientConfiguration, plan: LoadPlan, progress: ((LoadProgress) -> Void)? = nil,
        shouldStop: () -> Bool = { false }
    ) throws -> LoadReport {
        try plan.validate()
        let workers = configuration.workerCount
        let recorder = LoadRecorder(workers: workers)
        let start = IOLoop.monotonicNanoseconds()
        let interval = plan.rate.map { UInt64(1e9 * Double(workers) / $0) }
        var generators: [LoadGenerator] = []
        for worker in 0..<workers {
            var quota: Int?
            if let total = plan.pushes {
                quota = total / workers + (worker < total % workers ? 1 : 0)
            }
            generators.append(
                LoadGenerator(
                    worker: worker, workers: workers, tokens: plan.tokens, payload: plan.payload,
                    priority: plan.priority,
                    quota: quota, duration: plan.duration?.nanosecondsValue, interval: interval, startTime: start,
                    wallClockSeconds: { Int64(time(nil)) }))
        }
        let client = try APNsClient(configuration: configuration, resultHandler: recorder, producers: generators)

        var lastSample = (time: start, completed: 0)
        var peakConnections = 0
        let progressEvery = plan.progressInterval.nanosecondsValue
        var stopped = false
        var stopReason: String?
        // Pushes are only produced when a connection has free streams, so an endpoint that never accepts a
        // connection would stall the run forever: give up after one request timeout without any progress.
        var lastProgress = (time: start, produced: 0, completed: 0)
        let stallLimit = configuration.requestTimeout.nanosecondsValue &+ configuration.connectTimeout.nanosecondsValue
        while true {
            usleep(20_000)
            let produced = generators.reduce(0) { $0 + $1.producedCount }
            if client.producersFinished && recorder.completed >= produced { break }
            let now = IOLoop.monotonicNanoseconds()
            if let rejection = client.certificateRejection {
                // A configuration error (wrong CA, wrong host): waiting for the deadline would not fix it.
                stopReason = "the endpoint's certificate was rejected: \(rejection)"
                break
            }
            if produced != lastProgress.produced || recorder.completed != lastProgress.completed {
                lastProgress = (now, produced, recorder.completed)
            } else if now &- lastProgress.time > stallLimit, produced == recorder.completed,
                let error = client.lastConnectionError
            {
                stopReason = "no connection to the endpoint: \(error)"
                break
            }
            peakConnections = max(peakConnections, client.statistics.connectionsTarget)
            if let progress, now &- lastSample.time >= progressEvery {
                let completed = recorder.completed
                let rate = Double(completed - lastSample.completed) / (Double(now &- lastSample.time) / 1e9)
                let snapshot = recorder.snapshot()
                let stats = client.statistics
                progress(
                    LoadProgress(
                        elapsedSeconds: Double(now &- start) / 1e9, completed: completed, errors: recorder.errors,
                        inFlight: stats.inFlight, connections: stats.connectionsOpen - stats.connectionsDraining,
                        pushesPerSecond: rate,
                        p99Milliseconds: Double(snapshot.latency.valueAtPercentile(99)) / 1000))
                lastSample = (now, completed)
            }
            if !stopped && shouldStop() {
                stopped = true
                break
            }
        }
        let end = IOLoop.monotonicNanoseconds()
        client.shutdown()  // anything unanswered ends as failed(.shutdown) and is counted
        let produced = generators.reduce(0) { $0 + $1.producedCount }
        let snapshot = recorder.snapshot()
        let stats = client.statistics
        return LoadReport(
            pushes: produced, completed: recorder.completed, seconds: Double(end - start) / 1e9,
            counts: snapshot.counts,
            latencyMicroseconds: snapshot.latency, resends: snapshot.resends,
            connectionsOpened: stats.connectionsOpened,
            connectionsPeak: peakConnections, scaleUps: stats.scaleUps, scaleDowns: stats.scaleDowns,
            interrupted: stopped, connectionError: client.lastConnectionError, stopReason: stopReason)
    }
}

extension Duration {
    var nanosecondsValue: UInt64 {
        let (seconds, attoseconds) = components
        return UInt64(max(0, seconds)) &* 1_000_000_000 &+ UInt64(max(0, attoseconds) / 1_000_000_000)
    }
}

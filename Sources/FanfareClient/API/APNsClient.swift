import FanfareCore
import FanfareTLS
import FanfareHTTP2
import FanfareIO
import Synchronization
import Glibc

/// Why `submit` refused a push. Nothing is dropped silently: a refused push was never taken.
public enum SubmitError: Error, Sendable, CustomStringConvertible {
    /// The worker's inbox is full: slow down (back-pressure) and try again.
    case backPressure(worker: Int)
    /// The client is shutting down.
    case shutDown
    /// The push breaks a rule the client checks before sending (`PushJob.localProblem`: a broadcast at
    /// priority 1 or over 5120 bytes); APNs would refuse it as it is.
    case invalidPush(String)

    public var description: String {
        switch self {
        case .backPressure(let worker): return "worker \(worker) is full (back-pressure); submit again later"
        case .shutDown: return "the client is shut down"
        case .invalidPush(let problem): return "push refused before sending: \(problem)"
        }
    }
}

/// Sends pushes to APNs over `workerCount` io_uring worker threads, each with its own connections.
///
/// `submit` may be called from any thread; it routes by token hash so one token always goes through the same
/// worker (ordering and per-token state without locks). Results arrive on the worker threads through the
/// `PushResultHandler`, or through `send(_:) async` for one-off pushes.
public final class APNsClient: Sendable {
    public let configuration: ClientConfiguration
    private let workers: [PushWorker]
    private let threads: [IOThread]
    private let dispatcher: ResultDispatcher
    private let resolver: HostResolver
    private let isShutDown = Atomic<Bool>(false)
    private let nextTicket = Atomic<UInt64>(1)

    /// Starts the worker threads; connections open in the background (with back-off on failure).
    /// - Parameter producers: optional, one per worker: each worker pulls pushes from its producer on its own
    ///   thread as streams free up (see `PushProducer`); `submit` still works alongside.
    /// - Throws: `ClientConfigurationError` for a configuration the client cannot work with (see
    ///   `ClientConfiguration.validate()`), `IOError` when a thread or ring cannot be created.
    /// The provider key connections sign with, and the one before it while a new key proves itself.
    public let providerKeys: ProviderKeyRotation

    /// New connections sign with `source`; the connections of the previous key drain (their pushes in flight
    /// finish) as each worker opens their successors. If APNs refuses `source` on a connection's first request,
    /// the previous key takes over again (`providerKeys.lastRefusal`). Returns at once.
    public func rotateProviderKey(to source: ProviderTokenSource) {
        providerKeys.rotate(to: source)
        for worker in workers { worker.kickProducer() }
    }

    /// - Parameter providerKeys: the key rotation to follow (shared with a channel manager); nil: a new one,
    ///   starting with `configuration.providerTokens`.
    public init(
        configuration: ClientConfiguration, resultHandler: PushResultHandler? = nil, producers: [PushProducer]? = nil,
        providerKeys: ProviderKeyRotation? = nil
    ) throws {
        try configuration.validate()
        if let producers, producers.count != configuration.workerCount {
            throw ClientConfigurationError.producerCount(given: producers.count, workers: configuration.workerCount)
        }
        try Self.checkHeaderBlockFits(configuration)
        self.configuration = configuration
        let dispatcher = ResultDispatcher(forward: resultHandler)
        self.dispatcher = dispatcher
        let resolver = try HostResolver()
        self.resolver = resolver
        let keys = providerKeys ?? ProviderKeyRotation(configuration.providerTokens)
        self.providerKeys = keys
        var workers: [PushWorker] = []
        for index in 0..<configuration.workerCount {
            workers.append(
                PushWorker(
                    index: index, configuration: configuration, resultHandler: dispatcher, resolver: resolver,
                    producer: producers?[index], keys: keys))
        }
        self.workers = workers
        var threads: [IOThread] = []
        do {
            for worker in workers {
                let cpu = configuration.cpuAffinity.map { $0[worker.index % $0.count] }
                threads.append(
                    try IOThread(name: "fanfare-w\(worker.index)", cpu: cpu) { loop in
                        worker.attach(to: loop)
                    })
            }
        } catch {
            // The threads that did start stop again (no push was taken yet).
            for (index, thread) in threads.enumerated() {
                workers[index].requestStop()
                thread.join()
            }
            resolver.stop()
            throw error
        }
        self.threads = threads
    }

    deinit {
        shutdown()
    }

    /// Every request's header block must fit the HTTP/2 session's fixed per-request room: a topic or host
    /// too long for it is refused here, with its size, rather than failing on the first push.
    private static func checkHeaderBlockFits(_ configuration: ClientConfiguration) throws(ClientConfigurationError) {
        let authority = configuration.port == 443 ? configuration.host : "\(configuration.host):\(configuration.port)"
        // A JWT's length does not change between re-mints (same header and claims); 64 bytes of margin.
        let authorizationLength =
            configuration.providerTokens.map { $0.current().authorizationHeaderValue.utf8.count + 64 } ?? 0
        let largest = APNsRequestHeaders.largestBlock(
            authority: authority, authorizationLength: authorizationLength, pushType: configuration.pushType,
            topic: configuration.topic,
            broadcastBundleID: configuration.broadcastBundleID)
        guard largest <= HTTP2ClientSession.maxRequestHeaderBlock else {
            throw .headersTooLarge(bytes: largest, limit: HTTP2ClientSession.maxRequestHeaderBlock)
        }
    }

    /// Queues a push. Any thread; never blocks. A full worker inbox is reported, not dropped.
    ///
    /// A push that `submit` accepts gets exactly one result, even when `shutdown` runs at the same time on
    /// another thread (then `.failed(.shutdown)`); one it refuses throws and gets none.
    public func submit(_ job: PushJob) throws(SubmitError) {
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        if case .channel = job.target, let problem = job.localProblem { throw .invalidPush(problem) }
        var job = job
        let now = IOLoop.monotonicNanoseconds()
        job.submittedAt = job.scheduledAt ?? now
        job.deadline = PushWorker.deadline(now: now, timeout: job.timeout ?? configuration.requestTimeout)
        let worker = workers[Self.workerIndex(for: job.target, workerCount: workers.count)]
        guard worker.inbox.enqueue(job) else {
            // A closed inbox means shutdown began: the push was not taken.
            throw worker.inbox.isClosed ? .shutDown : .backPressure(worker: worker.index)
        }
        worker.counters.submitted.add(1, ordering: .relaxed)
        worker.waker?.wake()
    }

    /// Sends one push and waits for its result (convenience for one-off sends and tests).
    public func send(_ job: PushJob) async throws(SubmitError) -> PushResult {
        var job = job
        // The cookie carries the ticket through the worker; the caller's own cookie is put back on the result.
        let callerCookie = job.cookie
        let ticket = nextTicket.add(1, ordering: .relaxed).newValue | (1 << 63)
        job.cookie = ticket
        let result: Result<PushResult, SubmitError> = await withCheckedContinuation { continuation in
            dispatcher.register(ticket: ticket, continuation: continuation)
            do throws(SubmitError) {
                try submit(job)
            } catch {
                dispatcher.cancel(ticket: ticket)
                continuation.resume(returning: .failure(error))
            }
        }
        var value = try result.get()
        assert(value.cookie == ticket)
        value.cookie = callerCookie
        return value
    }

    /// Any thread: tells worker `index`'s producer it has new work, so the worker polls it now even if it last
    /// answered `.wait` (a fan-out shard calls this after queueing a command). Lock-free; one eventfd write.
    /// An index outside `0..<workerCount` names no worker and is ignored.
    public func kickProducer(worker index: Int) {
        guard workers.indices.contains(index) else { return }
        workers[index].kickProducer()
    }

    /// Which worker (and so which producer) handles `token`: `submit` routes by this, and a fan-out shard
    /// that owns a token's state must be the same worker.
    /// A `workerCount` below 1 counts as 1.
    public static func workerIndex(for token: DeviceToken, workerCount: Int) -> Int {
        Int(token.shardHash % UInt64(max(1, workerCount)))
    }

    /// Which worker handles `target` (a channel's broadcasts all go through one worker).
    public static func workerIndex(for target: PushTarget, workerCount: Int) -> Int {
        Int(target.shardHash % UInt64(max(1, workerCount)))
    }

    /// True once every worker's producer said `.finished` (false when there are no producers).
    public var producersFinished: Bool {
        workers.allSatisfy { $0.isProducerFinished }
    }

    /// A snapshot of the counters of all workers.
    public var statistics: ClientStatistics {
        var stats = ClientStatistics()
        for worker in workers {
            let counters = worker.counters
            stats.submitted += counters.submitted.load(ordering: .relaxed)
            stats.delivered += counters.delivered.load(ordering: .relaxed)
            stats.rejected += counters.rejected.load(ordering: .relaxed)
            stats.failed += counters.failed.load(ordering: .relaxed)
            stats.resends += counters.resends.load(ordering: .relaxed)
            stats.pending += counters.pending.load(ordering: .relaxed)
            stats.inFlight += counters.inFlight.load(ordering: .relaxed)
            stats.connectionsOpened += counters.connectionsOpened.load(ordering: .relaxed)
            stats.connectionsClosed += counters.connectionsClosed.load(ordering: .relaxed)
            stats.connectionsEstablished += counters.connectionsEstablished.load(ordering: .relaxed)
            stats.connectionsOpen +=
                counters.connectionsEstablished.load(ordering: .relaxed)
                - counters.connectionsEstablishedClosed.load(ordering: .relaxed)
            stats.connectionsDraining += counters.connectionsDraining.load(ordering: .relaxed)
            stats.certificateRejections += counters.certificateRejections.load(ordering: .relaxed)
            stats.reconnectBackoffs += counters.reconnectBackoffs.load(ordering: .relaxed)
            stats.unconfirmed += counters.unconfirmed.load(ordering: .relaxed)
            stats.connectionsTarget += counters.connectionsTarget.load(ordering: .relaxed)
            stats.scaleUps += counters.scaleUps.load(ordering: .relaxed)
            stats.scaleDowns += counters.scaleDowns.load(ordering: .relaxed)
            stats.scaleUpFailures += counters.scaleUpFailures.load(ordering: .relaxed)
            stats.inFlightPeak += counters.inFlightPeak.load(ordering: .relaxed)
        }
        return stats
    }

    /// Why the server's certificate was last rejected (untrusted CA, wrong host name, expired), or nil. A
    /// configuration error: connections keep backing off and retrying, but they will not succeed until
    /// the trust store or host is fixed. `statistics.certificateRejections` counts the rejections.
    public var certificateRejection: String? {
        for worker in workers {
            if let rejection = worker.certificateRejection { return rejection }
        }
        return nil
    }

    /// Stops every worker: pushes not yet answered end as `.failed(.shutdown)`; waits for the threads.
    public func shutdown() {
        guard !isShutDown.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // From here a racing submit either got its push into an inbox (and the push gets its result from
        // the worker or from finishRemainingAfterStop) or is refused with .shutDown.
        for worker in workers { worker.inbox.close() }
        for worker in workers { worker.requestStop() }
        // Workers close their connections (TLS close_notify, kernel buffers returned) before their loops stop.
        let deadline = IOLoop.monotonicNanoseconds() &+ 5_000_000_000
        while !workers.allSatisfy(\.isStopped) && IOLoop.monotonicNanoseconds() < deadline {
            usleep(1000)
        }
        for thread in threads {
            thread.stop()
            thread.join()
        }
        // The threads are gone, so this thread may touch their state: a submit that passed the shut-down
        // check just before it was set (and enqueued after its worker's last drain), or work left behind if
        // the stop timed out, still gets its result.
        for worker in workers { worker.finishRemainingAfterStop() }
        resolver.stop()
    }

    /// `shutdown()` from an async caller: the wait for the workers happens on a thread of its own, so the
    /// caller's cooperative thread is free meanwhile.
    public func shutdown() async {
        await BlockingHandOff.run(name: "fanfare-stop") { self.shutdown() }
    }

    /// Why the autoscaler last scaled or held, per worker (nil for a worker without autoscaling or before
    /// its first decision).
    public var autoscalingReasons: [String?] { workers.map(\.lastAutoscaleReason) }

    /// The most recent connection failure of any worker (for messages when pushes get no answer).
    public var lastConnectionError: String? {
        for worker in workers {
            if let error = worker.connectionErrorDescription { return error }
        }
        return nil
    }
}

/// Totals across workers.
public struct ClientStatistics: Sendable, Equatable {
    public var submitted = 0
    public var delivered = 0
    public var rejected = 0
    public var failed = 0
    public var resends = 0
    public var pending = 0
    public var inFlight = 0
    public var connectionsOpened = 0
    public var connectionsClosed = 0
    /// Connections whose TLS and HTTP/2 came up (`connectionsOpened` counts attempts).
    public var connectionsEstablished = 0
    /// Established connections not closed yet (draining ones included).
    public var connectionsOpen = 0
    /// Connections that stopped taking pushes (GOAWAY, rotation, expired provider token) and finish their
    /// streams before closing.
    public var connectionsDraining = 0
    /// Connections that ended because we rejected the server's certificate (see `certificateRejection`).
    public var certificateRejections = 0
    /// Connections that waited out a back-off before opening (failed connects, successors of connections
    /// that ended before they proved usable or soon after they started).
    public var reconnectBackoffs = 0
    /// Pushes that ended `.failed(.unconfirmed)` (sent, connection ended before an answer).
    public var unconfirmed = 0
    /// Connections the workers keep: the fixed count, or what the autoscaler aims at now.
    public var connectionsTarget = 0
    /// Autoscaler decisions that opened connections, and those that let one go (drained).
    public var scaleUps = 0
    public var scaleDowns = 0
    /// Connections a scale-up opened that failed before they proved usable (each backs scale-ups off).
    public var scaleUpFailures = 0
    /// The most pushes in flight at once, summed over workers (each worker's high-water mark).
    public var inFlightPeak = 0
    public var completed: Int { delivered + rejected + failed }
}

/// Routes results: tickets from `send(_:) async` resume their continuation, the rest go to the user's handler.
final class ResultDispatcher: PushResultHandler {
    private let forward: PushResultHandler?
    private let waiting = Mutex<[UInt64: CheckedContinuation<Result<PushResult, SubmitError>, Never>]>([:])

    init(forward: PushResultHandler?) {
        self.forward = forward
    }

    func register(ticket: UInt64, continuation: CheckedContinuation<Result<PushResult, SubmitError>, Never>) {
        waiting.withLock { $0[ticket] = continuation }
    }

    func cancel(ticket: UInt64) {
        _ = waiting.withLock { $0.removeValue(forKey: ticket) }
    }

    func pushCompleted(_ result: PushResult) {
        // Tickets have the top bit set; ordinary cookies go straight to the caller without a lock.
        if result.cookie & (1 << 63) != 0,
            let continuation = waiting.withLock({ $0.removeValue(forKey: result.cookie) })
        {
            continuation.resume(returning: .success(result))
            return
        }
        forward?.pushCompleted(result)
    }

    func pushCompleted(inPlace completion: borrowing PushCompletion) {
        // Only a ticket's continuation needs the result as a value.
        if completion.cookie & (1 << 63) != 0 {
            pushCompleted(completion.result)
            return
        }
        forward?.pushCompleted(inPlace: completion)
    }
}

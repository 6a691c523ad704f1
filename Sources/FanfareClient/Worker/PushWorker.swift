import FanfareCore
import FanfareHTTP2
import FanfareIO
import FanfareTLS
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One worker thread: an io_uring loop, its APNs connections, and the pushes routed to it.
///
/// Other threads only touch `inbox` (lock-free) and `waker`; everything else is confined to the worker's
/// thread. Each tick drains the inbox into a bounded pending FIFO and admits pushes onto connections with
/// stream credits; a connection that reads responses also refills its freed streams at once (`refill`), so
/// its next requests leave with that read's flush. Results go to the handler on this thread.
final class PushWorker: IOHandler, @unchecked Sendable {
    private enum TimerTag: UInt8 { case reconnect = 1, sweep, producer, autoscale }

    let index: Int
    let configuration: ClientConfiguration
    let inbox: BoundedMPSCQueue<PushJob>
    let counters = WorkerCounters()
    private let resultHandler: PushResultHandler
    /// Unowned: the loop holds the worker (a registered handler) and lives as long as the worker's thread; a
    /// strong reference back made a cycle that kept both after shutdown (LeakSanitizer). Not used once the
    /// thread has ended (`finishRemainingAfterStop`).
    @exclusivity(unchecked) private(set) unowned(unsafe) var loop: IOLoop!
    @exclusivity(unchecked) private var handlerID: IOHandlerID!
    @exclusivity(unchecked) var identifiers = APNsIDGenerator()
    let sweepInterval: UInt64

    @exclusivity(unchecked) private var pending: PendingQueue<PushJob>
    /// One per connection the worker may keep (`ConnectionSlot`), by the index its connection carries.
    @exclusivity(unchecked) var slots: [ConnectionSlot]
    /// The autoscaler's latest reason (why it scaled or held), for statistics.
    let lastAutoscaleReasonBox = Mutex<String?>(nil)
    /// Debug check that everything above runs on the worker's thread (until it is joined).
    @exclusivity(unchecked) private var ownership = ThreadOwnership()
    @exclusivity(unchecked) var autoscaler: ConnectionAutoscaler?
    @exclusivity(unchecked) var measurement = AutoscaleMeasurement()
    /// getaddrinfo blocks, so it runs on the resolver's thread; results come back here and wake the loop.
    private let resolver: HostResolver
    /// The CONNECT tunnel every connection opens first, when the configuration has a proxy (made once).
    let tunnel: ProxyTunnel?
    private let resolved = Mutex<[(slot: Int, result: Result<[SocketAddress], IOError>)]>([])
    private let hasResolved = Atomic<Bool>(false)
    @exclusivity(unchecked) private var needsAdmission = false
    @exclusivity(unchecked) private var nextConnection = 0
    private let stopRequested = Atomic<Bool>(false)
    @exclusivity(unchecked) private var stopping = false
    private let lastConnectionErrorBox = Mutex<String?>(nil)
    var lastConnectionError: String? {
        get { lastConnectionErrorBox.withLock { $0 } }
        set { lastConnectionErrorBox.withLock { $0 = newValue } }
    }
    /// The latest rejection of the server's certificate (a configuration error), kept until the client stops.
    let certificateRejectionBox = Mutex<String?>(nil)
    @exclusivity(unchecked) private var random = SystemRandomNumberGenerator()

    /// Pulled on this thread when connections have free streams (see `PushProducer`).
    private let producer: PushProducer?
    /// The producer's lease when it has one (a leased fan-out shard): every connection's transport stops sending
    /// at its end.
    let sendingLease: (any SendingLease)?
    @exclusivity(unchecked) private var producerWaitUntil: UInt64 = 0
    @exclusivity(unchecked) private var producerFinished = false {
        didSet { producerFinishedFlag.store(producerFinished, ordering: .releasing) }
    }
    private let producerFinishedFlag = Atomic<Bool>(false)
    /// Set by `kickProducer()` from any thread: the producer has new work, so poll it now instead of waiting.
    private let producerKicked = Atomic<Bool>(false)

    /// Any thread: the producer has new work (its `.wait` no longer holds); wakes the loop.
    func kickProducer() {
        producerKicked.store(true, ordering: .releasing)
        waker?.wake()
    }
    /// Any thread.
    var isProducerFinished: Bool { producerFinishedFlag.load(ordering: .acquiring) }

    init(
        index: Int, configuration: ClientConfiguration, resultHandler: PushResultHandler, resolver: HostResolver,
        producer: PushProducer? = nil, keys: ProviderKeyRotation? = nil
    ) {
        self.keys = keys ?? ProviderKeyRotation(configuration.providerTokens)
        providerTokens = configuration.providerTokens
        self.producer = producer
        sendingLease = producer as? any SendingLease
        self.resolver = resolver
        self.index = index
        self.configuration = configuration
        self.resultHandler = resultHandler
        tunnel = configuration.proxy?.tunnel(to: configuration.host, port: configuration.port)
        inbox = BoundedMPSCQueue(capacity: configuration.inboxCapacityPerWorker)
        let slotCount = configuration.connectionSlotsPerWorker
        let reserve = slotCount * configuration.maxConcurrentStreamsPerConnection
        pending = PendingQueue(capacity: configuration.pendingCapacityPerWorker + reserve)
        let initial = configuration.autoscaling?.minimumConnections ?? slotCount
        slots = (0..<slotCount).map { ConnectionSlot(active: $0 < initial) }
        autoscaler = configuration.autoscaling.map {
            ConnectionAutoscaler(
                settings: $0, backoffMinimum: configuration.reconnectBackoffMinimum,
                backoffMaximum: configuration.reconnectBackoffMaximum)
        }
        counters.connectionsTarget.store(initial, ordering: .relaxed)
        let timeout = configuration.requestTimeout.nanoseconds
        sweepInterval = max(1_000_000, min(100_000_000, timeout / 20))
    }

    /// Runs once on the worker thread (from `IOThread`'s setup): the loop belongs to that thread.
    func attach(to loop: IOLoop) {
        self.loop = loop
        _ = wakerReference.storeIfNil(loop.waker)
        handlerID = loop.register(self)
        loop.addTickHandler(handlerID)
        loop.setWakeHandler(handlerID, tag: 0)
        for slot in slots.indices where slots[slot].active { openConnection(slot) }
        loop.schedule(at: loop.now &+ sweepInterval, handler: handlerID, tag: TimerTag.sweep.rawValue, cookie: 0)
        if let settings = configuration.autoscaling {
            measurement.start(now: loop.now, cpuTime: Self.threadCPUTime())
            loop.schedule(
                at: loop.now &+ settings.decisionInterval.nanoseconds, handler: handlerID,
                tag: TimerTag.autoscale.rawValue, cookie: 0)
        }
    }

    /// Wakes the worker's loop from any thread; nil until `attach` ran (the loop then finds the inbox on its
    /// first tick). Atomic: `attach` runs on the worker's thread after `APNsClient.init` may have returned.
    var waker: IOWaker? { wakerReference.load() }
    private let wakerReference = AtomicLazyReference<IOWaker>()

    /// Any thread: begin a shutdown. Pushes not yet answered end as `.failed(.shutdown)`; `isStopped`
    /// turns true once every connection has closed.
    func requestStop() {
        stopRequested.store(true, ordering: .releasing)
        waker?.wake()
    }

    /// Any thread: the worker has closed its connections and reported every push.
    var isStopped: Bool { stoppedFlag.load(ordering: .acquiring) }
    private let stoppedFlag = Atomic<Bool>(false)

    private var isIdle: Bool {
        slots.allSatisfy { $0.connection == nil } && pending.isEmpty
    }

    // MARK: - Connections

    /// Connects slot `slot` to the next address of its latest lookup, or asks for a lookup first.
    func openConnection(_ slot: Int) {
        guard !stopping, slots[slot].active else { return }
        slots[slot].reconnectScheduled = false
        if slots[slot].nextAddress >= slots[slot].addresses.count, let fixed = configuration.connectAddresses {
            slots[slot].addresses = configuration.addressFamilies.apply(to: fixed)
            slots[slot].nextAddress = 0
        }
        guard slots[slot].nextAddress < slots[slot].addresses.count else {
            // APNs asks for an uncached lookup per new connection, to spread load over its servers (a proxy is
            // looked up the same way). It runs off this thread; `takeResolvedAddresses` continues here.
            guard !slots[slot].resolving else { return }
            slots[slot].resolving = true
            resolver.resolve(
                host: configuration.dialHost, port: configuration.dialPort, preference: configuration.addressFamilies
            ) {
                [self] result in
                resolved.withLock { $0.append((slot, result)) }
                hasResolved.store(true, ordering: .releasing)
                waker?.wake()
            }
            return
        }
        let address = slots[slot].addresses[slots[slot].nextAddress]
        slots[slot].nextAddress += 1
        let tls: TLSConnection
        do {
            tls = try TLSConnection(client: configuration.tls, serverName: configuration.host)
        } catch {
            lastConnectionError = "\(error)"
            scheduleReconnect(slot)
            return
        }
        let connection = APNsConnection(worker: self, index: slot, tls: tls)
        if slots[slot].successorStreamCap != Int.max {
            connection.streamCap = slots[slot].successorStreamCap
            slots[slot].successorStreamCap = Int.max
        }
        slots[slot].connection = connection
        counters.connectionsOpened.add(1, ordering: .relaxed)
        connection.start(address: address)
    }

    /// Lookups that finished on the resolver thread: connect the slots that waited for them.
    private func takeResolvedAddresses() {
        let results = resolved.withLock { list in
            defer { list.removeAll() }
            return list
        }
        for (slot, result) in results {
            slots[slot].resolving = false
            guard !stopping, slots[slot].active, slots[slot].connection == nil else { continue }
            switch result {
            case .success(let found):
                slots[slot].addresses = found
                slots[slot].nextAddress = 0
                openConnection(slot)
            case .failure(let error):
                lastConnectionError = "\(error)"
                scheduleReconnect(slot)
            }
        }
    }

    private func scheduleReconnect(_ slot: Int) {
        guard !stopping, slots[slot].active, !slots[slot].reconnectScheduled else { return }
        counters.reconnectBackoffs.add(1, ordering: .relaxed)
        let minimum = configuration.reconnectBackoffMinimum.nanoseconds
        let maximum = configuration.reconnectBackoffMaximum.nanoseconds
        let doubled = slots[slot].backoff.multipliedReportingOverflow(by: 2)
        let current =
            slots[slot].backoff == 0 ? minimum : min(maximum, doubled.overflow ? maximum : doubled.partialValue)
        slots[slot].backoff = current
        let jitter = UInt64.random(in: 0...(current / 4), using: &random)
        slots[slot].reconnectScheduled = true
        let delay = current.addingReportingOverflow(jitter)
        let due = loop.now.addingReportingOverflow(delay.overflow ? UInt64.max : delay.partialValue)
        loop.schedule(
            at: due.overflow ? UInt64.max : due.partialValue, handler: handlerID, tag: TimerTag.reconnect.rawValue,
            cookie: UInt64(slot))
        // Without any usable connection, pushes that waited past their deadline still end (the sweep does it).
    }

    /// APNs answered on `connection` with something other than a 403: the connection works (its provider
    /// token, certificate and address are good), so its slot's back-off starts over.
    func connectionProvedUsable(_ connection: APNsConnection) {
        slots[connection.index].backoff = 0
        needsAdmission = true
        if slots[connection.index].provisional && slots[connection.index].connection === connection {
            slots[connection.index].provisional = false
            autoscaler?.connectionProvedUsable()
        }
    }

    func connectionBecameReady(_ connection: APNsConnection) {
        counters.connectionsEstablished.add(1, ordering: .relaxed)
        lastConnectionError = nil
        needsAdmission = true
        // This lookup did its job; the slot's next connection looks the host up again.
        if slots[connection.index].connection === connection {
            slots[connection.index].addresses = []
            slots[connection.index].nextAddress = 0
        }
    }

    func connectionHasCredits(_ connection: APNsConnection) {
        needsAdmission = true
    }

    /// A GOAWAY ended `connection`: its slot's next connection starts with at most twice the streams this one got
    /// answered (at least `minimumSuccessorStreams`), widening as its own answers come (`APNsConnection.streamCap`).
    /// A long-lived connection's successor gets the server's full limit at once.
    func connectionGotGoAway(_ connection: APNsConnection) {
        slots[connection.index].successorStreamCap = max(Self.minimumSuccessorStreams, 2 &* connection.streamsAnswered)
    }
    static let minimumSuccessorStreams = 16

    /// A draining connection takes no new streams: its successor opens at once if it was a healthy one (it
    /// proved usable and lived at least the minimum back-off), else after the back-off. APNs blocks
    /// providers that churn connections, and a server that ends every connection early (GOAWAY before
    /// any answer, ExpiredProviderToken from a skewed clock) would otherwise get a new TLS connection as
    /// fast as handshakes complete. So a slot opens at most about one connection per minimum back-off.
    func connectionStoppedAdmitting(_ connection: APNsConnection) {
        guard slots[connection.index].connection === connection else { return }
        slots[connection.index].connection = nil
        retiring.append(connection)
        counters.connectionsDraining.add(1, ordering: .relaxed)
        guard !stopping, slots[connection.index].active else { return }
        if !connection.gateLifted && releaseFailedScaleUp(connection.index) { return }
        let lived = connection.establishedAt == 0 ? 0 : loop.now &- connection.establishedAt
        if connection.gateLifted && lived >= configuration.reconnectBackoffMinimum.nanoseconds {
            openConnection(connection.index)
        } else {
            scheduleReconnect(connection.index)
        }
    }
    @exclusivity(unchecked) private var retiring: [APNsConnection] = []

    func connectionClosed(_ connection: APNsConnection, reason: TransportCloseReason, cause: String, hadConnected: Bool)
    {
        counters.connectionsClosed.add(1, ordering: .relaxed)
        if hadConnected { counters.connectionsEstablishedClosed.add(1, ordering: .relaxed) }
        if case .certificateRejected = reason {
            // A configuration error (wrong CA, wrong host): reported at once, and the slot keeps backing off.
            counters.certificateRejections.add(1, ordering: .relaxed)
            certificateRejectionBox.withLock { $0 = cause }
        }
        if let position = retiring.firstIndex(where: { $0 === connection }) {
            retiring.remove(at: position)
            counters.connectionsDraining.subtract(1, ordering: .relaxed)
            return
        }
        guard slots[connection.index].connection === connection else { return }
        let slot = connection.index
        slots[slot].connection = nil
        lastConnectionError = cause
        needsAdmission = true
        if !hadConnected && reason.isConnectFailure && slots[slot].nextAddress < slots[slot].addresses.count {
            openConnection(slot)  // the host's next address, at once
            return
        }
        slots[slot].addresses = []
        slots[slot].nextAddress = 0
        if !connection.gateLifted && releaseFailedScaleUp(slot) { return }
        if connection.gateLifted && connection.establishedAt != 0
            && loop.now &- connection.establishedAt >= configuration.reconnectBackoffMinimum.nanoseconds
        {
            openConnection(slot)  // a healthy connection that ended (e.g. the peer closed it after a while)
        } else {
            scheduleReconnect(slot)
        }
    }

    // MARK: - Pushes

    /// Moves inbox items into the pending FIFO while it has room (keeping room for resends).
    private func drainInbox() {
        let limit = configuration.pendingCapacityPerWorker
        while pending.count < limit, let job = inbox.dequeue() {
            if stopping {
                finish(job, .failed(.shutdown))
                continue
            }
            let stored = pending.pushBack(job)
            assert(stored)
            needsAdmission = true
        }
    }

    /// Gives pending pushes to connections with stream credits, round-robin so bursts spread out.
    private func admit() {
        needsAdmission = false
        guard !pending.isEmpty else { return }
        let count = slots.count
        var idleRounds = 0
        while !pending.isEmpty && idleRounds < count {
            let slot = nextConnection
            nextConnection = (nextConnection + 1) % count
            guard let connection = slots[slot].connection, connection.credits > 0 else {
                idleRounds += 1
                continue
            }
            idleRounds = 0
            // Fill this connection's free streams.
            while connection.credits > 0, let job = pending.popFront() {
                if job.deadline != 0 && loop.now >= job.deadline {
                    finish(job, .failed(.deadlineExceeded))
                    continue
                }
                if let returned = connection.submit(job) {
                    _ = pending.pushFront(returned)
                    break
                }
            }
        }
    }

    /// A connection read responses and may have free streams again: fills them now, so the new requests go
    /// out with the flush that follows this read, not at the end of the tick after every other connection's
    /// reads. Pending pushes (resends, inbox) go first, then the producer. Not from inside a session callback.
    func refill(_ connection: APNsConnection) {
        ownership.assertOwned("PushWorker")
        needsAdmission = true  // whatever is left, the tick admits
        guard !stopping, slots[connection.index].connection === connection else { return }
        while connection.credits > 0 {
            guard let job = pending.popFront() else {
                produce(into: connection)
                return
            }
            if job.deadline != 0 && loop.now >= job.deadline {
                finish(job, .failed(.deadlineExceeded))
                continue
            }
            if let returned = connection.submit(job) {
                _ = pending.pushFront(returned)
                return
            }
        }
    }

    /// Fills `connection`'s free streams from the producer, each push written straight into the stream slot it
    /// is sent from (`PushProducer.poll(now:into:)`): no copy between producer, worker and slot.
    private func produce(into connection: APNsConnection) {
        guard let producer, !producerFinished, !stopping else { return }
        let now = loop.now
        let timeout = configuration.requestTimeout
        while producerWaitUntil <= now && connection.credits > 0 {
            let job = connection.nextJob
            switch producer.poll(now: now, into: job) {
            case .produced:
                job.pointee.submittedAt = job.pointee.scheduledAt ?? now
                job.pointee.deadline = Self.deadline(now: now, timeout: job.pointee.timeout ?? timeout)
                counters.submitted.add(1, ordering: .relaxed)
                if case .channel = job.pointee.target, job.pointee.localProblem != nil {
                    // `submit` throws for these; a producer's push still ends exactly once, answered as APNs
                    // would answer it, without being sent.
                    let refused = job.move()
                    finish(refused, Self.localRejection(refused))
                    continue
                }
                if let returned = connection.submitWrittenJob() {
                    _ = pending.pushFront(returned)
                    needsAdmission = true
                    return
                }
            case .wait(let until):
                producerWaitUntil = until
                loop.schedule(at: until, handler: handlerID, tag: TimerTag.producer.rawValue, cookie: 0)
                return
            case .finished:
                producerFinished = true
                return
            }
        }
    }

    /// Fills every connection's free streams from the producer, round-robin from where admission left off.
    private func pullFromProducer() {
        let count = slots.count
        for offset in 0..<count {
            guard !producerFinished, producerWaitUntil <= loop.now else { return }
            if let connection = slots[(nextConnection + offset) % count].connection, connection.credits > 0 {
                produce(into: connection)
            }
        }
    }

    /// The answer APNs would give a broadcast that breaks `PushJob.localProblem`'s rules.
    static func localRejection(_ job: PushJob) -> PushDisposition {
        if job.priority == .powerSaving {
            return .rejected(
                status: 400, reason: .badPriority, rawReason: nil, action: APNsReason.badPriority.action, timestamp: nil
            )
        }
        return .rejected(
            status: 413, reason: .payloadTooLarge, rawReason: nil, action: APNsReason.payloadTooLarge.action,
            timestamp: nil)
    }

    /// `job` went out and its connection ended before APNs answered: APNs may have processed it. It ends
    /// as `.unconfirmed`, or is resent marked `possibleDuplicate` when the configuration asks for that.
    func unconfirmed(_ job: PushJob, cause: String) {
        guard configuration.resendUnconfirmed, !stopping else {
            finish(job, .failed(stopping ? .shutdown : .unconfirmed(cause: cause)))
            return
        }
        var job = job
        job.possibleDuplicate = true
        resend(job, cause: cause)
    }

    /// Sends `job` again on another connection (it was never processed), or gives up after `maxResends`.
    func resend(_ job: PushJob, cause: String) {
        var job = job
        job.resends += 1
        counters.resends.add(1, ordering: .relaxed)
        if stopping {
            finish(job, .failed(.shutdown))
        } else if job.resends > configuration.maxResends {
            finish(job, .failed(.resendLimitReached(lastCause: cause)))
        } else if !pending.pushFront(job) {
            finish(job, .failed(.resendLimitReached(lastCause: "pending queue full while resending after: \(cause)")))
        } else {
            needsAdmission = true
        }
    }

    /// Called after the worker's thread has exited (the caller joined it): every push still held ends as
    /// `.shutdown`, on the caller's thread.
    func finishRemainingAfterStop() {
        precondition(stopRequested.load(ordering: .acquiring), "the worker was not stopped")
        ownership.handOver()
        let now = IOLoop.monotonicNanoseconds()  // the loop is gone with its thread
        inbox.drainClosed { finish($0, .failed(.shutdown), now: now) }
        while let job = pending.popFront() { finish(job, .failed(.shutdown), now: now) }
        for connection in slots.compactMap(\.connection) + retiring {
            connection.abandonInFlight { finish($0, .failed(.shutdown), now: now) }
        }
    }

    /// The monotonic deadline of a push submitted at `now` (0 = none, for a timeout of zero or less);
    /// saturating, so a huge timeout means "no practical limit" rather than a wrapped, past deadline.
    static func deadline(now: UInt64, timeout: Duration) -> UInt64 {
        let nanoseconds = timeout.nanoseconds
        guard nanoseconds > 0 else { return 0 }
        let (sum, overflow) = now.addingReportingOverflow(nanoseconds)
        return overflow ? UInt64.max : sum
    }

    /// Every push ends here exactly once.
    func finish(_ job: PushJob, _ disposition: PushDisposition) {
        withUnsafePointer(to: job) { finish($0, disposition, now: loop.now) }
    }

    /// The same, reading the job in place (a stream slot's, freed by the caller afterwards).
    func finish(_ job: UnsafePointer<PushJob>, _ disposition: PushDisposition) {
        finish(job, disposition, now: loop.now)
    }

    private func finish(_ job: PushJob, _ disposition: PushDisposition, now: UInt64) {
        withUnsafePointer(to: job) { finish($0, disposition, now: now) }
    }

    private func finish(_ job: UnsafePointer<PushJob>, _ disposition: PushDisposition, now: UInt64) {
        switch disposition {
        case .delivered: counters.delivered.add(1, ordering: .relaxed)
        case .rejected: counters.rejected.add(1, ordering: .relaxed)
        case .failed(let failure):
            counters.failed.add(1, ordering: .relaxed)
            if case .unconfirmed = failure { counters.unconfirmed.add(1, ordering: .relaxed) }
        }
        let submittedAt = job.pointee.submittedAt
        let completion = PushCompletion(
            job: job, disposition: disposition, latencyNanoseconds: now >= submittedAt ? now - submittedAt : 0,
            worker: index)
        resultHandler.pushCompleted(inPlace: completion)
    }

    /// Asks the shared provider-token source for its token about once a second so that it re-mints on
    /// schedule (inside APNs' 20–60 minute window). Connections only read the source again when its generation
    /// changes, so without this nobody would ask and every connection would run into ExpiredProviderToken.
    /// A lock once a second per worker, never per push.
    private func checkProviderToken(now: UInt64) {
        guard let source = providerTokens, now >= nextProviderTokenCheck else { return }
        nextProviderTokenCheck = now &+ 1_000_000_000
        _ = source.current()
    }
    @exclusivity(unchecked) private var nextProviderTokenCheck: UInt64 = 0

    /// The key new connections sign with (`ProviderKeyRotation.current`, taken at each rotation).
    @exclusivity(unchecked) private(set) var providerTokens: ProviderTokenSource?
    let keys: ProviderKeyRotation
    @exclusivity(unchecked) private var keyGeneration: UInt64 = 0

    /// A rotation (or a fallback) happened: new connections take the key, and the connections of any other key
    /// stop taking streams; each gets its successor at once (`connectionStoppedAdmitting`).
    private func followKeyRotation() {
        keyGeneration = keys.generation.load(ordering: .acquiring)
        providerTokens = keys.current
        for slot in slots.indices {
            guard let connection = slots[slot].connection, connection.providerTokens !== providerTokens else {
                continue
            }
            connection.beginDraining(reason: "provider key \(providerTokens?.current().keyID ?? "-") replaces its key")
        }
    }

    private func sweepPending(now: UInt64) {
        guard !pending.isEmpty else { return }
        pending.removeAll(where: { $0.deadline != 0 && now >= $0.deadline }) { job in
            finish(job, .failed(.deadlineExceeded))
        }
    }

    private func beginStop() {
        stopping = true
        drainInbox()
        while let job = pending.popFront() { finish(job, .failed(.shutdown)) }
        for connection in slots.compactMap(\.connection) + retiring { connection.close() }
    }

    /// While the producer's lease has ended, the transports hold what they framed; once it is extended, they
    /// send it now (nothing else may come to flush it: the streams it took are not answered until it leaves).
    private func followLease(_ lease: any SendingLease) {
        let until = lease.sendsUntil
        let ended = until != .max && loop.now >= until
        if leaseEnded && !ended {
            for slot in slots.indices { slots[slot].connection?.flushHeld() }
            for connection in retiring { connection.flushHeld() }
        }
        leaseEnded = ended
    }
    @exclusivity(unchecked) private var leaseEnded = false

    // MARK: - IOHandler

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {
        // Wake-ups: new pushes are in the inbox; the tick drains it.
    }

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {
        switch TimerTag(rawValue: tag) {
        case .reconnect:
            let slot = Int(cookie)
            if slots[slot].connection == nil && slots[slot].active {
                openConnection(slot)
            } else {
                slots[slot].reconnectScheduled = false
            }
        case .autoscale:
            guard !stopping, let settings = configuration.autoscaling else { return }
            autoscale(now: loop.now)
            loop.schedule(
                at: loop.now &+ settings.decisionInterval.nanoseconds, handler: handlerID,
                tag: TimerTag.autoscale.rawValue, cookie: 0)
        case .producer:
            producerWaitUntil = 0
        case .sweep:
            sweepPending(now: loop.now)
            checkProviderToken(now: loop.now)
            if !stopping {
                loop.schedule(
                    at: loop.now &+ sweepInterval, handler: handlerID, tag: TimerTag.sweep.rawValue, cookie: 0)
            }
        case nil:
            assertionFailure("unknown worker timer")
        }
    }

    func tick(loop: IOLoop) {
        ownership.claim("PushWorker")
        if !stopping && stopRequested.load(ordering: .acquiring) { beginStop() }
        if let sendingLease { followLease(sendingLease) }
        if keys.generation.load(ordering: .relaxed) != keyGeneration { followKeyRotation() }
        if hasResolved.load(ordering: .relaxed) && hasResolved.exchange(false, ordering: .acquiring) {
            takeResolvedAddresses()
        }
        drainInbox()
        if let producer, !producerFinished, !stopping {
            if producerKicked.load(ordering: .relaxed) && producerKicked.exchange(false, ordering: .acquiring) {
                producerWaitUntil = 0
            }
            producer.service(now: loop.now)
        }
        if needsAdmission || !pending.isEmpty { admit() }
        // Pending pushes (resends) went first; the producer fills what streams are left.
        if producer != nil && !producerFinished && !stopping && pending.isEmpty { pullFromProducer() }
        counters.pending.store(pending.count + inbox.approximateCount, ordering: .relaxed)
        var inFlight = 0
        var credits = 0
        for slot in slots.indices {
            guard let connection = slots[slot].connection else { continue }
            inFlight += connection.inFlight
            credits += connection.credits
        }
        for connection in retiring { inFlight += connection.inFlight }
        counters.inFlight.store(inFlight, ordering: .relaxed)
        if inFlight > measurement.peakInFlight {
            measurement.peakInFlight = inFlight
            if inFlight > counters.inFlightPeak.load(ordering: .relaxed) {
                counters.inFlightPeak.store(inFlight, ordering: .relaxed)
            }
        }
        if autoscaler != nil {
            // Work waits while no connection has a free stream: the credits are the limit (until the next tick).
            let producerHasMore = producer != nil && !producerFinished && producerWaitUntil <= loop.now
            measurement.advance(
                now: loop.now, inFlight: inFlight, creditBound: credits == 0 && (!pending.isEmpty || producerHasMore))
        }
        if stopping && isIdle && retiring.isEmpty && !stoppedFlag.load(ordering: .relaxed) {
            assert(pending.isEmpty)
            stoppedFlag.store(true, ordering: .releasing)
        }
    }

}

/// Counters a worker publishes for progress displays (relaxed atomics, written by the worker only).
final class WorkerCounters: Sendable {
    let submitted = Atomic<Int>(0)
    let delivered = Atomic<Int>(0)
    let rejected = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let resends = Atomic<Int>(0)
    let pending = Atomic<Int>(0)
    let inFlight = Atomic<Int>(0)
    let connectionsOpened = Atomic<Int>(0)
    let connectionsClosed = Atomic<Int>(0)
    /// Connections whose TLS and HTTP/2 came up, and those of them that have closed since.
    let connectionsEstablished = Atomic<Int>(0)
    let connectionsEstablishedClosed = Atomic<Int>(0)
    /// Connections that stopped taking pushes and finish their streams before closing (a gauge).
    let connectionsDraining = Atomic<Int>(0)
    let certificateRejections = Atomic<Int>(0)
    let reconnectBackoffs = Atomic<Int>(0)
    let unconfirmed = Atomic<Int>(0)
    /// The connections the worker keeps (fixed, or the autoscaler's target).
    let connectionsTarget = Atomic<Int>(0)
    let scaleUps = Atomic<Int>(0)
    let scaleDowns = Atomic<Int>(0)
    /// Connections a scale-up opened that failed before they proved usable.
    let scaleUpFailures = Atomic<Int>(0)
    /// The most pushes in flight at once (a high-water mark).
    let inFlightPeak = Atomic<Int>(0)
}

/// What a worker keeps per connection it may open: the connection, how the next one is dialled, and whether
/// the slot is in use.
struct ConnectionSlot {
    var connection: APNsConnection?
    /// The back-off before the next reconnection (ns; 0 after a connection proved usable).
    var backoff: UInt64 = 0
    /// The stream cap the next connection starts with (`connectionGotGoAway`; `Int.max`: none).
    var successorStreamCap = Int.max
    var reconnectScheduled = false
    /// The worker keeps a connection here (all slots without autoscaling). An inactive slot opens nothing;
    /// its connection, if any, drains.
    var active: Bool
    /// A scale-up opened it and its connection has not proved usable yet: if it fails, the slot goes back and
    /// scale-ups back off (APNs' etiquette: no churn).
    var provisional = false
    /// The addresses of the latest lookup, tried in order until one connects (a connection that got through
    /// clears them: the next one looks the host up afresh, as APNs asks).
    var addresses: [SocketAddress] = []
    var nextAddress = 0
    var resolving = false

    init(active: Bool) { self.active = active }
}

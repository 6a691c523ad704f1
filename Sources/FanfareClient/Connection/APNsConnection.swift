import FanfareCore
import FanfareHTTP2
import FanfareIO
import FanfareTLS
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/2 connection to APNs: TLS over an io_uring socket, Fanfare's client HTTP/2 session, and a fixed
/// pool of stream slots. Owned by one `PushWorker` and touched only on its thread.
///
/// Life: connecting → ready (admits pushes while it has stream credits) → draining (GOAWAY, rotation or a
/// stale provider token: no new streams, in-flight ones finish) → closed. Every push it accepted ends in
/// `PushWorker.finish` or goes back to the worker; none is dropped. Only pushes that provably never reached
/// APNs go back for a resend (never written, REFUSED_STREAM, above a GOAWAY's last-stream-id, or answered
/// ExpiredProviderToken); one that went out and got no answer is *unconfirmed* (`PushWorker.unconfirmed`).
final class APNsConnection: HTTP2ClientSessionDelegate, SecureTransportDelegate, IOHandler {
    enum State: Equatable { case connecting, ready, draining, closed }
    private enum TimerTag: UInt8 { case keepAlive = 1, sweep }

    unowned(unsafe) let worker: PushWorker  // the worker owns its connections and outlives them
    let index: Int
    let transport: SecureTransport
    @exclusivity(unchecked) private(set) var state: State = .connecting
    @exclusivity(unchecked) private var session: HTTP2ClientSession?
    /// Debug check that the connection is driven by its worker's thread only (until that thread is joined).
    @exclusivity(unchecked) private var ownership = ThreadOwnership()
    @exclusivity(unchecked) private var slots: RequestSlots
    @exclusivity(unchecked) private var handlerID: IOHandlerID?

    /// The server's live SETTINGS_MAX_CONCURRENT_STREAMS (APNs starts token-auth connections at 1).
    @exclusivity(unchecked) private(set) var remoteMaxStreams = 1
    /// True once APNs answered 200 here.
    @exclusivity(unchecked) private(set) var hasSucceeded = false
    /// A fresh token-auth connection sends one request until an answer shows the provider token is good:
    /// anything but a 403 (a 410 or 400 for a stale device token proves the JWT was accepted).
    @exclusivity(unchecked) private(set) var gateLifted = false
    /// When the TLS handshake finished (0 before): the worker tells short-lived connections by it.
    @exclusivity(unchecked) private(set) var establishedAt: UInt64 = 0
    /// Why the connection ended, for the pushes it leaves unanswered.
    @exclusivity(unchecked) private var closeCause = ""
    @exclusivity(unchecked) private(set) var streamsOpened = 0
    /// Streams APNs answered here (any status).
    @exclusivity(unchecked) private(set) var streamsAnswered = 0
    /// At most this many streams at once (`Int.max`: the server's limit). The successor of a connection that a
    /// GOAWAY ended early starts at twice what its predecessor got answered and doubles as its own answers come
    /// (`PushWorker.successorStreamCap`): a server that ends every connection after a few streams would otherwise
    /// get the whole backlog on each new one and refuse nearly all of it, and on a saturated machine that resent
    /// work (framed, encrypted, sent, parsed, refused) starves the successors' handshakes.
    @exclusivity(unchecked) var streamCap = Int.max
    @exclusivity(unchecked) private(set) var goAwayReason: String?

    @exclusivity(unchecked) private var lastReceiveAt: UInt64 = 0
    @exclusivity(unchecked) private var pingSentAt: UInt64 = 0
    @exclusivity(unchecked) private var authorizationGeneration: UInt64 = 0
    @exclusivity(unchecked) private var hasAuthorization = false
    /// Read on every push: kept here rather than reached through `worker.configuration` (a struct full of
    /// references, whose copies cost retains).
    /// The key this connection signs with, for its whole life (APNs binds a connection to its first key).
    let providerTokens: ProviderTokenSource?
    /// The same source, for the per-push generation check without a retain (`providerTokens` keeps it alive).
    private let providerTokensReference: Unmanaged<ProviderTokenSource>?
    private let sendsFirstRequestAlone: Bool
    private let rotateAfterStreams: Int

    /// Fields that repeat on every request (registered with the session when it starts).
    @exclusivity(unchecked) private var repeated: APNsRequestHeaders.RepeatedFields?

    init(worker: PushWorker, index: Int, tls: TLSConnection) {
        self.worker = worker
        self.index = index
        let configuration = worker.configuration
        transport = SecureTransport(loop: worker.loop, tls: tls, buffers: configuration.buffers)
        transport.sendingLease = worker.sendingLease
        slots = RequestSlots(capacity: configuration.maxConcurrentStreamsPerConnection)
        providerTokens = worker.providerTokens
        providerTokensReference = worker.providerTokens.map { Unmanaged.passUnretained($0) }
        sendsFirstRequestAlone = configuration.firstRequestAlone && worker.providerTokens != nil
        rotateAfterStreams = configuration.rotateAfterStreams
        super.init()
        transport.delegate = self
    }

    /// Sends what the transport held while the worker's lease had ended (`PushWorker.followLease`).
    func flushHeld() { transport.flushNow() }

    func start(address: SocketAddress) {
        ownership.claim("APNsConnection")
        let id = worker.loop.register(self)
        handlerID = id
        lastReceiveAt = worker.loop.now
        transport.connect(
            to: address, handshakeTimeout: worker.configuration.connectTimeout.nanoseconds, through: worker.tunnel)
    }

    // MARK: - Admission

    /// Streams this connection can open now.
    var credits: Int {
        guard state == .ready, session != nil else { return 0 }
        var limit = min(remoteMaxStreams, slots.capacity, streamCap)
        if sendsFirstRequestAlone && !gateLifted {
            limit = 1
        }
        return max(0, limit - slots.inUseCount)
    }

    var inFlight: Int { slots.inUseCount }

    /// Where the next push is written in place (uninitialized job storage of the stream slot it will use);
    /// `submitWrittenJob()` then sends it. Only while `credits > 0`.
    var nextJob: UnsafeMutablePointer<PushJob> {
        assert(credits > 0)
        return slots.nextFreeJob()
    }

    /// The stream limit this connection works under once past the one-stream gate.
    var streamLimit: Int { min(remoteMaxStreams, slots.capacity) }

    /// Ready and past the one-stream gate: its credits are the server's stream limit (the autoscaler waits
    /// for this before it opens more).
    var isFannedOut: Bool { state == .ready && session != nil && (gateLifted || !sendsFirstRequestAlone) }

    /// Queues `job` on a new stream. The caller checked `credits > 0`. On failure the job comes back.
    func submit(_ job: consuming PushJob) -> PushJob? {
        ownership.assertOwned("APNsConnection")
        nextJob.initialize(to: job)
        return submitWrittenJob()
    }

    /// Queues the job written at `nextJob` on a new stream. On failure the job comes back (moved out).
    func submitWrittenJob() -> PushJob? {
        assert(credits > 0)
        let job = slots.nextFreeJob()
        guard let session else { return job.move() }
        refreshAuthorizationIfNeeded()
        if job.pointee.apnsID == nil {
            var identifier = PushIdentifier()
            identifier.withUnsafeMutableBytes { worker.identifiers.write(to: $0.baseAddress!) }
            job.pointee.apnsID = identifier
        }
        // A broadcast's answer names its request id (in `apns-request-id` or `apns-id`): its headers are read.
        let isBroadcast: Bool
        if case .channel = job.pointee.target { isBroadcast = true } else { isBroadcast = false }
        let slotIndex = slots.acquireWritten(tokenGeneration: authorizationGeneration)
        guard session.submit(request: slotIndex, reportsHeaders: isBroadcast) else {
            let returned = slots.release(slotIndex)!
            // Out of stream ids or GOAWAY already received: stop admitting here and let the worker resend.
            beginDraining(reason: session.goAwayReceived ? (goAwayReason ?? "GOAWAY") : "stream ids exhausted")
            return returned
        }
        streamsOpened += 1
        if streamsOpened >= rotateAfterStreams {
            beginDraining(reason: "rotating after \(streamsOpened) streams")
        }
        return nil
    }

    private func refreshAuthorizationIfNeeded() {
        guard let reference = providerTokensReference else { return }
        if hasAuthorization && reference._withUnsafeGuaranteedRef({ $0.generation }) == authorizationGeneration {
            return
        }
        guard let source = providerTokens, let session, let field = repeated?.authorization else { return }
        // Token and generation read together, so a re-mint in between cannot pair them wrongly.
        let (token, generation) = source.snapshot()
        session.updateRepeatedField(field, value: token.authorizationHeaderValue)
        authorizationGeneration = generation
        hasAuthorization = true
    }

    // MARK: - Request headers (HTTP2ClientSessionDelegate)

    override func http2WriteRequestHeaders(request: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter)
    {
        guard let repeated else { preconditionFailure("headers requested before the session started") }
        APNsRequestHeaders.write(slots.job(request), fields: repeated, table: &table, writer: &writer)
    }

    override func http2RequestBody(request: Int) -> UnsafeRawBufferPointer {
        slots[request].pointee.requestBody
    }

    // MARK: - Draining and closing

    func beginDraining(reason: String) {
        guard state == .ready || state == .connecting else { return }
        if goAwayReason == nil { goAwayReason = reason }
        state = .draining
        worker.connectionStoppedAdmitting(self)
        closeIfDrained()
    }

    private func closeIfDrained() {
        guard state == .draining, slots.inUseCount == 0 else { return }
        session?.terminate()
        transport.close()
    }

    func close() {
        if state == .closed { return }
        if state != .draining {
            state = .draining
            worker.connectionStoppedAdmitting(self)
        }
        transport.close()
    }

    // MARK: - SecureTransportDelegate

    func transportEstablished(_ transport: SecureTransport) {
        assert(session == nil)
        let configuration = worker.configuration
        var settings = HTTP2ClientSession.LocalSettings()
        settings.reportsOnlyStatus = true  // the outcome needs :status and the body, nothing else
        let newSession = HTTP2ClientSession(
            transport: transport, delegate: self, capacity: slots.capacity, settings: settings)
        let authority = configuration.port == 443 ? configuration.host : "\(configuration.host):\(configuration.port)"
        repeated = APNsRequestHeaders.RepeatedFields(
            authority: authority, usesProviderTokens: providerTokens != nil,
            pushType: configuration.pushType,
            topic: configuration.topic, broadcastBundleID: configuration.broadcastBundleID,
            broadcastRequestIDHeader: configuration.broadcastRequestIDHeader,
            register: { newSession.registerRepeatedField(nameIndex: $0, name: $1, value: $2) })
        session = newSession
        hasAuthorization = false
        newSession.start()
        lastReceiveAt = worker.loop.now
        establishedAt = worker.loop.now
        if state == .connecting { state = .ready }
        scheduleKeepAlive()
        scheduleSweep()
        worker.connectionBecameReady(self)
    }

    func transportReceived(_ transport: SecureTransport, plaintext: UnsafeRawBufferPointer) -> Bool {
        ownership.assertOwned("APNsConnection")
        guard let session else { return false }
        lastReceiveAt = worker.loop.now
        pingSentAt = 0
        do {
            try session.receive(plaintext)
        } catch {
            // The session queued a GOAWAY naming the error; a local close sends it before the socket closes
            // (in-flight pushes end unconfirmed with this reason; unsent ones are resent elsewhere).
            goAwayReason = "HTTP/2 error: \(error)"
            close()
            return true
        }
        // Streams that just closed are refilled now, so their successors leave with this read's flush.
        worker.refill(self)
        return true
    }

    func transportProduce(_ transport: SecureTransport) {
        guard let session else { return }
        session.produce()
        if state == .draining && slots.inUseCount == 0 && !session.wantsWrite {
            transport.close()
        }
    }

    func transportClosed(_ transport: SecureTransport, reason: TransportCloseReason) {
        let wasReady = session != nil
        state = .closed
        if let handlerID {
            self.handlerID = nil
            worker.loop.unregister(handlerID)
        }
        // Every push still here got no answer: the session reports each one (never written → resent;
        // written → unconfirmed), through http2StreamClosed.
        let cause = goAwayReason ?? reason.description
        closeCause = cause
        session?.connectionLost()
        assert(slots.inUseCount == 0, "a slot outlived its connection")
        session = nil
        worker.connectionClosed(self, reason: reason, cause: cause, hadConnected: wasReady)
    }

    // MARK: - Responses (HTTP2ClientSessionDelegate)

    private static let statusName: StaticString = ":status"

    private static let requestIDName: StaticString = "apns-request-id"
    private static let apnsIDName: StaticString = "apns-id"

    override func http2ResponseHeader(request: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        // ":status" is the only field a token push's outcome needs (the body carries the reason). A broadcast
        // also takes its answer's request id, from whichever header carries one.
        guard name.count == 7, memcmp(name.baseAddress!, Self.statusName.utf8Start, 7) == 0 else {
            if Self.names(name, Self.requestIDName) {
                takeAnsweredID(request, value, isRequestID: true)
            } else if Self.names(name, Self.apnsIDName) {
                takeAnsweredID(request, value, isRequestID: false)
            }
            return
        }
        // Three digits (RFC 9110 §15); anything else is the server's garbage, not an answer (-1: malformed).
        var status = -1
        if value.count == 3, let base = value.baseAddress {
            status = HTTP2.parseDecimal(base.assumingMemoryBound(to: UInt8.self), 3)
        }
        slots[request].pointee.status = status >= 100 ? Int32(status) : -1
    }

    @inline(__always)
    private static func names(_ name: UnsafeRawBufferPointer, _ expected: StaticString) -> Bool {
        name.count == expected.utf8CodeUnitCount && memcmp(name.baseAddress!, expected.utf8Start, name.count) == 0
    }

    /// A broadcast's answered request id replaces the one sent (they match unless the server made its own):
    /// `apns-request-id` when the answer has it (apns-spec.md §7.5), else `apns-id`. A value that is not a
    /// UUID is ignored (the request's own id stays).
    private func takeAnsweredID(_ request: Int, _ value: UnsafeRawBufferPointer, isRequestID: Bool) {
        guard slots.isInUse(request), slots[request].pointee.hasJob, value.count == PushIdentifier.byteCount,
            APNsIDGenerator.isValidAPNsID(value)
        else { return }
        if !isRequestID && slots[request].pointee.answeredRequestID { return }
        if isRequestID { slots[request].pointee.answeredRequestID = true }
        let job = slots.job(request)
        guard case .channel = job.pointee.target else { return }
        var identifier = PushIdentifier()
        identifier.withUnsafeMutableBytes { $0.copyMemory(from: value) }
        identifier.lowercase()
        job.pointee.apnsID = identifier
    }

    override func http2ResponseData(request: Int, bytes: UnsafeRawBufferPointer) {
        let slot = slots[request]
        let used = Int(slot.pointee.bodyCount)
        let count = min(bytes.count, RequestSlots.bodyCapacity - used)
        guard count > 0 else { return }
        (slots.body(request) + used).copyMemory(from: bytes.baseAddress!, byteCount: count)
        slot.pointee.bodyCount = Int32(used + count)
    }

    override func http2StreamClosed(request slotIndex: Int, errorCode: UInt32, processed: Bool) {
        let slot = slots[slotIndex]
        let status = Int(slot.pointee.status)
        let generation = slot.pointee.tokenGeneration
        defer { closeIfDrained() }
        guard !slot.pointee.abandoned, slot.pointee.hasJob else {
            slots.releaseDiscardingJob(slotIndex)  // already reported (its deadline passed)
            return
        }
        guard status > 0 else {
            // No answer. (Rare: building the cause text here is not steady-state work.)
            let job = slots.release(slotIndex)!
            if !processed {
                // Provably never reached APNs (never written, REFUSED_STREAM, above GOAWAY's last-stream-id):
                // it goes to another connection.
                let why = state == .closed ? closeCause : goAwayReason ?? HTTP2ErrorCode.name(errorCode)
                worker.resend(job, cause: "\(why) (stream not processed)")
            } else if status < 0 {
                worker.unconfirmed(job, cause: "the server's answer had a malformed :status")
            } else if state == .closed {
                worker.unconfirmed(job, cause: "connection ended: \(closeCause)")
            } else {
                worker.unconfirmed(job, cause: "stream reset by the server (\(HTTP2ErrorCode.name(errorCode)))")
            }
            return
        }
        streamsAnswered += 1
        if streamCap != Int.max { widenStreamCap() }
        let body = UnsafeRawBufferPointer(start: slots.body(slotIndex), count: Int(slot.pointee.bodyCount))
        let disposition = Self.disposition(status: status, body: body)
        if status != 403 && !gateLifted {
            gateLifted = true
            if let providerTokens { worker.keys.proved(providerTokens) }
            worker.connectionProvedUsable(self)
        }
        switch disposition {
        case .delivered:
            hasSucceeded = true
        case .rejected(403, let reason, let rawReason, _, _)
        where !gateLifted && reason != .expiredProviderToken && keyRefused(reason?.rawValue ?? rawReason):
            // A new key APNs refuses: the previous one takes over and this push goes again on its connection.
            let job = slots.release(slotIndex)!
            beginDraining(reason: "provider key refused (\(reason?.rawValue ?? rawReason ?? "403"))")
            worker.resend(job, cause: "the new provider key was refused")
            return
        case .rejected(_, .expiredProviderToken, _, _, _):
            // The token went stale: mint a new one (once per generation) and resend on a fresh connection.
            let job = slots.release(slotIndex)!
            providerTokens?.forceRefresh(ifGeneration: generation)
            beginDraining(reason: "ExpiredProviderToken")
            worker.resend(job, cause: "ExpiredProviderToken")
            return
        default:
            break
        }
        // The result is read from the slot in place; the job ends with the slot.
        worker.finish(slots.job(slotIndex), disposition)
        slots.releaseDiscardingJob(slotIndex)
    }

    /// A 403 on this connection's first request: whether its key was a new one that an older key now replaces.
    private func keyRefused(_ reason: String?) -> Bool {
        guard let providerTokens else { return false }
        return worker.keys.refused(providerTokens, reason: reason ?? "403")
    }

    override func http2RemoteSettingsChanged(maxConcurrentStreams: Int?) {
        remoteMaxStreams = min(maxConcurrentStreams ?? Int(Int32.max), Int(Int32.max))
        worker.connectionHasCredits(self)
    }

    override func http2GoAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: UnsafeRawBufferPointer) {
        var reason = "GOAWAY \(HTTP2ErrorCode.name(errorCode))"
        if !debugData.isEmpty {
            reason += " " + PrintableText.escaping(debugData, limit: 256)  // the server's bytes, made printable
        }
        goAwayReason = reason
        worker.connectionGotGoAway(self)
        beginDraining(reason: reason)
    }

    /// Twice the streams answered so far, and no cap once that reaches the server's limit.
    private func widenStreamCap() {
        streamCap = max(streamCap, 2 &* streamsAnswered)
        if streamCap >= streamLimit { streamCap = Int.max }
    }

    static func disposition(status: Int, body: UnsafeRawBufferPointer) -> PushDisposition {
        if status == 200 { return .delivered }
        let parsed = APNsErrorBody.parse(body)
        switch PushOutcome.classify(status: status, body: parsed) {
        case .delivered:
            return .delivered
        case .failed(let status, let reason, let rawReason, let action, let timestamp):
            // An unknown reason is the server's text: kept printable, since callers log and print it.
            return .rejected(
                status: status, reason: reason,
                rawReason: reason == nil && !rawReason.isEmpty ? PrintableText.escaping(rawReason) : nil,
                action: action, timestamp: timestamp)
        }
    }

    // MARK: - Timers: keep-alive PING and deadlines

    /// How soon a timeout that could not be judged yet (unread bytes may be waiting) looks again: the next tick
    /// reads them first.
    static let recheckDelay: UInt64 = 1_000_000

    /// The next keep-alive check: half the shorter of the PING interval and timeout from now, or at `time`.
    private func scheduleKeepAlive(at time: UInt64? = nil) {
        guard let handlerID else { return }
        let interval = min(worker.configuration.pingInterval.nanoseconds, worker.configuration.pingTimeout.nanoseconds)
        let due = time ?? worker.loop.now &+ max(interval / 2, 1_000_000)
        worker.loop.schedule(at: due, handler: handlerID, tag: TimerTag.keepAlive.rawValue, cookie: 0)
    }

    /// The next deadline sweep: one sweep interval from now, or at `time`.
    private func scheduleSweep(at time: UInt64? = nil) {
        guard let handlerID else { return }
        let due = time ?? worker.loop.now &+ worker.sweepInterval
        worker.loop.schedule(at: due, handler: handlerID, tag: TimerTag.sweep.rawValue, cookie: 0)
    }

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {
        assertionFailure("APNsConnection submits no I/O of its own")
    }

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {
        guard state == .ready || state == .draining, let session else { return }
        let now = loop.now
        switch TimerTag(rawValue: tag) {
        case .keepAlive:
            let configuration = worker.configuration
            if transport.isWithholdingSends {
                // A leased shard past its lease sends nothing, a PING included: its clock starts when it leaves.
                if pingSentAt != 0 { pingSentAt = now }
                scheduleKeepAlive()
                return
            }
            let timeout = configuration.pingTimeout.nanoseconds
            if pingSentAt != 0 && now &- pingSentAt > timeout {
                // Silence is judged on what was read: dead only if the socket was empty at a moment past the PING's
                // deadline. A late timer (this thread starved, or one long tick) looks again after the next read.
                guard let read = transport.readThrough, read > pingSentAt, read - pingSentAt > timeout else {
                    scheduleKeepAlive(at: now &+ Self.recheckDelay)
                    return
                }
                goAwayReason = "no answer to PING within \(configuration.pingTimeout)"
                close()
                return
            }
            if pingSentAt == 0 && now &- lastReceiveAt > configuration.pingInterval.nanoseconds {
                session.sendPing()
                pingSentAt = now
                transport.setNeedsFlush()
            }
            scheduleKeepAlive()
        case .sweep:
            let waiting = expireDeadlines(now: now)
            scheduleSweep(at: waiting ? now &+ Self.recheckDelay : nil)
        case nil:
            assertionFailure("unknown timer tag")
        }
    }

    /// The worker's thread exited before this connection closed: hands every unanswered push to `body`, once.
    func abandonInFlight(_ body: (PushJob) -> Void) {
        ownership.handOver()
        for index in 0..<slots.capacity where slots.isInUse(index) {
            let slot = slots[index]
            guard !slot.pointee.abandoned, slot.pointee.hasJob else { continue }
            slot.pointee.abandoned = true
            body(slots.job(index).pointee)
        }
    }

    /// Reports pushes past their deadline and cancels their streams (RST_STREAM CANCEL if already sent); the slot
    /// frees as the session closes the stream. A deadline is judged on what was read: a push expires only if the
    /// socket was empty at a moment past its deadline (its answer did not come in time). Returns true if a push past
    /// its deadline waits for the next read to be judged.
    private func expireDeadlines(now: UInt64) -> Bool {
        guard let session else { return false }
        let read = transport.readThrough
        var waiting = false
        // Cancelling releases the slot (in http2StreamClosed), so no closure may be reading `slots` meanwhile.
        for slotIndex in 0..<slots.capacity where slots.isInUse(slotIndex) {
            let slot = slots[slotIndex]
            guard !slot.pointee.abandoned, slot.pointee.hasJob, slot.pointee.deadline != 0, now >= slot.pointee.deadline
            else { continue }
            guard let read, read >= slot.pointee.deadline else {
                waiting = true
                continue
            }
            slot.pointee.abandoned = true
            worker.finish(slots.job(slotIndex), .failed(.deadlineExceeded))
            session.cancel(request: slotIndex)
        }
        return waiting
    }
}

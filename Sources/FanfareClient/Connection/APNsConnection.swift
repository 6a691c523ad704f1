import CNghttp2
import FanfareCore
import FanfareHTTP2
import FanfareIO
import FanfareTLS

/// One HTTP/2 connection to APNs: TLS over an io_uring socket, an nghttp2 client session, and a fixed pool
/// of stream slots. Owned by one `PushWorker` and touched only on its thread.
///
/// Life: connecting → ready (admits pushes while it has stream credits) → draining (GOAWAY, rotation or a
/// stale provider token: no new streams, in-flight ones finish) → closed. Every push it accepted ends in
/// `PushWorker.finish` or goes back to the worker for a resend; none is dropped.
final class APNsConnection: SecureTransportDelegate, IOHandler {
    enum State: Equatable { case connecting, ready, draining, closed }
    private enum TimerTag: UInt8 { case keepAlive = 1, sweep }

    unowned(unsafe) let worker: PushWorker  // the worker owns its connections and outlives them
    /// Held strongly: the session's memory lives in it, so it must outlive the session.
    private let memoryPool: HTTP2MemoryPool
    let index: Int
    let transport: SecureTransport
    private(set) var state: State = .connecting
    private var session: OpaquePointer?
    private var slots: StreamSlots
    private var handlerID: IOHandlerID?

    /// The server's live SETTINGS_MAX_CONCURRENT_STREAMS (APNs starts token-auth connections at 1).
    private(set) var remoteMaxStreams = 1
    /// False until the first 200: a fresh token-auth connection sends one request, then fans out.
    private(set) var hasSucceeded = false
    private(set) var streamsOpened = 0
    private(set) var goAwayReason: String?

    private var lastReceiveAt: UInt64 = 0
    private var pingSentAt: UInt64 = 0
    private var authorization: StableBytes?
    private var previousAuthorization: StableBytes?  // frames queued before a refresh may still point at it
    private var authorizationGeneration: UInt64 = 0
    private let authority: StableBytes
    private let topic: StableBytes
    private let pushType: StableBytes
    private var headerScratch: UnsafeMutablePointer<nghttp2_nv>
    private static let headerScratchCapacity = 12

    init(worker: PushWorker, index: Int, tls: TLSConnection) {
        self.worker = worker
        self.memoryPool = worker.http2Pool
        self.index = index
        let configuration = worker.configuration
        transport = SecureTransport(loop: worker.loop, tls: tls, buffers: configuration.buffers)
        slots = StreamSlots(capacity: configuration.maxConcurrentStreamsPerConnection)
        authority = StableBytes(configuration.port == 443 ? configuration.host : "\(configuration.host):\(configuration.port)")
        topic = StableBytes(configuration.topic)
        pushType = StableBytes(configuration.pushType)
        headerScratch = .allocate(capacity: Self.headerScratchCapacity)
        transport.delegate = self
    }

    deinit {
        if let session { nghttp2_session_del(session) }
        headerScratch.deallocate()
    }

    func start(address: SocketAddress) {
        let id = worker.loop.register(self)
        handlerID = id
        lastReceiveAt = worker.loop.now
        transport.connect(to: address, handshakeTimeout: worker.configuration.connectTimeout.nanoseconds)
    }

    // MARK: - Admission

    /// Streams this connection can open now.
    var credits: Int {
        guard state == .ready, session != nil else { return 0 }
        var limit = min(remoteMaxStreams, slots.capacity)
        if worker.configuration.firstRequestAlone && worker.configuration.providerTokens != nil && !hasSucceeded {
            limit = 1
        }
        return max(0, limit - slots.inUseCount)
    }

    var inFlight: Int { slots.inUseCount }

    /// Opens a stream for `job`. The caller checked `credits > 0`. On failure the job comes back.
    func submit(_ job: consuming PushJob) -> PushJob? {
        assert(credits > 0)
        guard let session, let slotIndex = slots.acquire() else { return job }
        let slot = slots[slotIndex]
        refreshAuthorizationIfNeeded()

        // :path = /3/device/<lowercase hex token>
        let path = slots.bytes(slotIndex, offset: 0)
        let prefix: StaticString = "/3/device/"
        path.copyMemory(from: prefix.utf8Start, byteCount: prefix.utf8CodeUnitCount)
        let hexCount = job.token.writeLowercaseHex(to: path + prefix.utf8CodeUnitCount)
        slot.pointee.pathCount = Int32(prefix.utf8CodeUnitCount + hexCount)

        let apnsID = slots.bytes(slotIndex, offset: StreamSlots.apnsIDOffset)
        if job.apnsID == nil {
            var identifier = PushIdentifier()
            identifier.withUnsafeMutableBytes { worker.identifiers.write(to: $0.baseAddress!) }
            job.apnsID = identifier
        }
        job.apnsID!.withUnsafeBytes { apnsID.copyMemory(from: $0.baseAddress!, byteCount: PushIdentifier.byteCount) }

        var headerCount = 0
        func add(_ header: nghttp2_nv) {
            assert(headerCount < Self.headerScratchCapacity)
            headerScratch[headerCount] = header
            headerCount += 1
        }
        add(HTTP2.header(":method", "POST"))
        add(HTTP2.header(":scheme", "https"))
        add(HTTP2.header(":path", path, Int(slot.pointee.pathCount), noIndex: true))
        add(HTTP2.header(":authority", authority.pointer, authority.count))
        if let authorization { add(HTTP2.header("authorization", authorization.pointer, authorization.count)) }
        add(HTTP2.header("apns-push-type", pushType.pointer, pushType.count))
        add(HTTP2.header("apns-topic", topic.pointer, topic.count))
        switch job.priority {
        case .immediate: add(HTTP2.header("apns-priority", "10"))
        case .normal: add(HTTP2.header("apns-priority", "5"))
        case .powerSaving: add(HTTP2.header("apns-priority", "1"))
        }
        add(HTTP2.header("apns-id", apnsID, PushIdentifier.byteCount, noIndex: true))
        if let expiration = job.expiration {
            let text = slots.bytes(slotIndex, offset: StreamSlots.expirationOffset)
            let count = Self.writeDecimal(expiration, to: text)
            slot.pointee.expirationCount = Int32(count)
            add(HTTP2.header("apns-expiration", text, count, noIndex: true))
        }
        if let collapseID = job.collapseID {
            let text = slots.bytes(slotIndex, offset: StreamSlots.collapseOffset)
            var count = 0
            for byte in collapseID.utf8 {
                guard count < StreamSlots.collapseCapacity else { break }
                text.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
                count += 1
            }
            slot.pointee.collapseCount = Int32(count)
            add(HTTP2.header("apns-collapse-id", text, count, noIndex: true))
        }

        var provider = nghttp2_data_provider()
        provider.source.ptr = UnsafeMutableRawPointer(bitPattern: slotIndex + 1)
        provider.read_callback = apnsReadPayload
        let streamID = nghttp2_submit_request(
            session, nil, headerScratch, headerCount, &provider, UnsafeMutableRawPointer(bitPattern: slotIndex + 1))
        if streamID < 0 {
            slots.release(slotIndex)
            // Out of stream ids or GOAWAY already received: stop admitting here and let the worker resend.
            if streamID == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue { beginDraining(reason: "stream ids exhausted") }
            else { beginDraining(reason: HTTP2.describe(streamID)) }
            return job
        }
        slot.pointee.streamID = streamID
        slot.pointee.tokenGeneration = authorizationGeneration
        slot.pointee.job = job
        streamsOpened += 1
        if streamsOpened >= worker.configuration.rotateAfterStreams {
            beginDraining(reason: "rotating after \(streamsOpened) streams")
        }
        transport.setNeedsFlush()
        return nil
    }

    private func refreshAuthorizationIfNeeded() {
        guard let source = worker.configuration.providerTokens else { return }
        guard authorization == nil || source.generation != authorizationGeneration else { return }
        // Token and generation read together, so a re-mint in between cannot pair them wrongly.
        let (token, generation) = source.snapshot()
        previousAuthorization = authorization
        authorization = StableBytes(token.authorizationHeaderValue)
        authorizationGeneration = generation
    }

    static func writeDecimal(_ value: Int64, to destination: UnsafeMutableRawPointer) -> Int {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes of scratch, reversed digits
        var remaining = UInt64(max(0, value))
        var count = 0
        withUnsafeMutableBytes(of: &digits) { scratch in
            repeat {
                scratch[count] = UInt8(48 + remaining % 10)
                remaining /= 10
                count += 1
            } while remaining > 0
            for index in 0..<count {
                destination.storeBytes(of: scratch[count - 1 - index], toByteOffset: index, as: UInt8.self)
            }
        }
        return count
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
        if let session {
            nghttp2_session_terminate_session(session, UInt32(NGHTTP2_NO_ERROR.rawValue))
            transport.setNeedsFlush()
        }
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
        var newSession: OpaquePointer?
        let userData = Unmanaged.passUnretained(self).toOpaque()
        // nghttp2's per-stream allocations come from the worker's pool (no malloc per push in steady state).
        let result = nghttp2_session_client_new3(
            &newSession, ClientCallbacks.shared.pointer, userData, ClientCallbacks.shared.option, memoryPool.allocator)
        guard result == 0, let newSession else {
            transport.close()
            return
        }
        session = newSession
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: 100),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: 1 << 20),
        ]
        nghttp2_submit_settings(newSession, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        nghttp2_session_set_local_window_size(newSession, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, 1 << 24)
        lastReceiveAt = worker.loop.now
        if state == .connecting { state = .ready }
        scheduleKeepAlive()
        scheduleSweep()
        worker.connectionBecameReady(self)
    }

    func transportReceived(_ transport: SecureTransport, plaintext: UnsafeRawBufferPointer) -> Bool {
        guard let session else { return false }
        lastReceiveAt = worker.loop.now
        pingSentAt = 0
        let consumed = nghttp2_session_mem_recv(session, plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), plaintext.count)
        if consumed < 0 {
            goAwayReason = "HTTP/2 error: \(HTTP2.describe(Int32(consumed)))"
            return false
        }
        transport.setNeedsFlush()
        // Streams that just closed are refilled now, so their successors leave with this read's flush.
        worker.refill(self)
        return true
    }

    func transportProduce(_ transport: SecureTransport) {
        guard let session else { return }
        let result = nghttp2_session_send(session)
        if result != 0 {
            goAwayReason = "HTTP/2 send error: \(HTTP2.describe(result))"
            transport.close()
        }
        if state == .draining && slots.inUseCount == 0 && nghttp2_session_want_write(session) == 0 {
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
        // Every push still here was not answered: hand it back for a resend on another connection.
        let cause = goAwayReason ?? reason.description
        for index in 0..<slots.capacity where slots.isInUse(index) {
            let slot = slots[index]
            if let job = slot.pointee.job, !slot.pointee.abandoned {
                worker.resend(job, cause: cause)
            }
            slots.release(index)
        }
        if let session {
            nghttp2_session_del(session)
            self.session = nil
        }
        worker.connectionClosed(self, reason: cause, hadConnected: wasReady)
    }

    // MARK: - nghttp2 callbacks (via the global C functions below)

    /// Writes frames into the TLS staging buffer; WOULDBLOCK pushes back into nghttp2 when it is full.
    func sendCallback(_ data: UnsafePointer<UInt8>, _ length: Int) -> Int {
        if transport.isBackedUp { return Int(NGHTTP2_ERR_WOULDBLOCK.rawValue) }
        guard transport.writePlaintext(UnsafeRawBufferPointer(start: data, count: length)) else {
            return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
        }
        return length
    }

    func readPayload(slotIndex: Int, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        let slot = slots[slotIndex]
        guard let job = slot.pointee.job else {
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            return 0
        }
        let bytes = job.payload.bytes
        let offset = Int(slot.pointee.payloadOffset)
        let count = min(length, bytes.count - offset)
        UnsafeMutableRawPointer(buffer).copyMemory(from: bytes.baseAddress! + offset, byteCount: count)
        slot.pointee.payloadOffset = Int32(offset + count)
        if offset + count == bytes.count { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return count
    }

    func responseHeader(streamID: Int32, name: UnsafePointer<UInt8>, nameLength: Int, value: UnsafePointer<UInt8>, valueLength: Int) {
        guard let slotIndex = slotIndex(for: streamID) else { return }
        if HTTP2.equals(name, nameLength, ":status") {
            slots[slotIndex].pointee.status = Int32(HTTP2.parseDecimal(value, valueLength))
        }
    }

    func responseData(streamID: Int32, data: UnsafePointer<UInt8>, length: Int) {
        guard let slotIndex = slotIndex(for: streamID) else { return }
        let slot = slots[slotIndex]
        let used = Int(slot.pointee.bodyCount)
        let count = min(length, StreamSlots.bodyCapacity - used)
        guard count > 0 else { return }
        (slots.bytes(slotIndex, offset: StreamSlots.bodyOffset) + used).copyMemory(from: data, byteCount: count)
        slot.pointee.bodyCount = Int32(used + count)
    }

    func streamClosed(streamID: Int32, errorCode: UInt32) {
        guard let slotIndex = slotIndex(for: streamID) else { return }
        let slot = slots[slotIndex]
        let status = Int(slot.pointee.status)
        let abandoned = slot.pointee.abandoned
        let job = slot.pointee.job
        let generation = slot.pointee.tokenGeneration
        let body = UnsafeRawBufferPointer(start: slots.bytes(slotIndex, offset: StreamSlots.bodyOffset), count: Int(slot.pointee.bodyCount))
        var disposition: PushDisposition?
        if !abandoned, status > 0 {
            disposition = Self.disposition(status: status, body: body)
        }
        slots.release(slotIndex)
        if let session { nghttp2_session_set_stream_user_data(session, streamID, nil) }
        defer { closeIfDrained() }
        guard !abandoned, let job else { return }
        guard let disposition else {
            // No response: refused (GOAWAY above last-stream-id, REFUSED_STREAM) or reset. APNs never
            // processed it, so it goes to another connection.
            // (Resends are rare: building the cause text here is not steady-state work.)
            if let goAwayReason {
                worker.resend(job, cause: "\(goAwayReason) (stream not processed)")
            } else {
                worker.resend(job, cause: "stream closed unanswered (\(HTTP2.describeErrorCode(errorCode)))")
            }
            return
        }
        switch disposition {
        case .delivered:
            hasSucceeded = true
            worker.resetBackoff()
        case .rejected(_, .expiredProviderToken, _, _, _):
            // The token went stale: mint a new one (once per generation) and resend on a fresh connection.
            worker.configuration.providerTokens?.forceRefresh(ifGeneration: generation)
            beginDraining(reason: "ExpiredProviderToken")
            worker.resend(job, cause: "ExpiredProviderToken")
            return
        default:
            break
        }
        worker.finish(job, disposition)
    }

    func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        guard let session else { return }
        let type = UInt32(frame.pointee.hd.type)
        if type == NGHTTP2_SETTINGS.rawValue && (frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue)) == 0 {
            let value = nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
            remoteMaxStreams = Int(min(value, UInt32(Int32.max)))
            worker.connectionHasCredits(self)
        } else if type == NGHTTP2_GOAWAY.rawValue {
            let goaway = frame.pointee.goaway
            var reason = "GOAWAY \(HTTP2.describeErrorCode(goaway.error_code))"
            if goaway.opaque_data_len > 0, let data = goaway.opaque_data {
                reason += " " + String(decoding: UnsafeRawBufferPointer(start: data, count: min(goaway.opaque_data_len, 256)), as: UTF8.self)
            }
            goAwayReason = reason
            beginDraining(reason: reason)
        }
    }

    private func slotIndex(for streamID: Int32) -> Int? {
        guard let session, let raw = nghttp2_session_get_stream_user_data(session, streamID) else { return nil }
        let index = Int(bitPattern: raw) - 1
        assert(index >= 0 && index < slots.capacity)
        return index
    }

    static func disposition(status: Int, body: UnsafeRawBufferPointer) -> PushDisposition {
        if status == 200 { return .delivered }
        let parsed = APNsErrorBody.parse(body)
        switch PushOutcome.classify(status: status, body: parsed) {
        case .delivered:
            return .delivered
        case .failed(let status, let reason, let rawReason, let action, let timestamp):
            return .rejected(status: status, reason: reason, rawReason: reason == nil && !rawReason.isEmpty ? rawReason : nil, action: action, timestamp: timestamp)
        }
    }

    // MARK: - Timers: keep-alive PING and deadlines

    private func scheduleKeepAlive() {
        guard let handlerID else { return }
        let interval = min(worker.configuration.pingInterval.nanoseconds, worker.configuration.pingTimeout.nanoseconds)
        worker.loop.schedule(at: worker.loop.now &+ max(interval / 2, 1_000_000), handler: handlerID, tag: TimerTag.keepAlive.rawValue, cookie: 0)
    }

    private func scheduleSweep() {
        guard let handlerID else { return }
        worker.loop.schedule(at: worker.loop.now &+ worker.sweepInterval, handler: handlerID, tag: TimerTag.sweep.rawValue, cookie: 0)
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
            if pingSentAt != 0 && now &- pingSentAt > configuration.pingTimeout.nanoseconds {
                goAwayReason = "no answer to PING within \(configuration.pingTimeout)"
                close()
                return
            }
            if pingSentAt == 0 && now &- lastReceiveAt > configuration.pingInterval.nanoseconds {
                nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil)
                pingSentAt = now
                transport.setNeedsFlush()
            }
            scheduleKeepAlive()
        case .sweep:
            expireDeadlines(now: now)
            scheduleSweep()
        case nil:
            assertionFailure("unknown timer tag")
        }
    }

    /// The worker's thread exited before this connection closed: hands every unanswered push to `body`, once.
    func abandonInFlight(_ body: (PushJob) -> Void) {
        slots.forEachInUse { _, slot in
            guard !slot.pointee.abandoned, let job = slot.pointee.job else { return }
            slot.pointee.abandoned = true
            body(job)
        }
    }

    /// Resets streams whose push passed its deadline and reports them; the slot frees when the stream closes.
    private func expireDeadlines(now: UInt64) {
        guard let session else { return }
        var expired = false
        slots.forEachInUse { _, slot in
            guard !slot.pointee.abandoned, let job = slot.pointee.job, job.deadline != 0, now >= job.deadline else { return }
            slot.pointee.abandoned = true
            worker.finish(job, .failed(.deadlineExceeded))
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), slot.pointee.streamID, UInt32(NGHTTP2_CANCEL.rawValue))
            expired = true
        }
        if expired { transport.setNeedsFlush() }
    }
}

// MARK: - C callbacks: plain global functions (never closures), recovering the connection from user_data.

/// Calls `body` with the connection behind `user_data` without retaining it: the session is deleted before
/// its connection, and a retain/release pair per callback (several per push) was a measurable share of CPU.
@inline(__always)
private func withConnection<R>(_ userData: UnsafeMutableRawPointer?, _ body: (APNsConnection) -> R) -> R {
    Unmanaged<APNsConnection>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
}

private func apnsSend(
    _ session: OpaquePointer?, _ data: UnsafePointer<UInt8>?, _ length: Int, _ flags: Int32, _ userData: UnsafeMutableRawPointer?
) -> Int {
    withConnection(userData) { $0.sendCallback(data!, length) }
}

private func apnsReadPayload(
    _ session: OpaquePointer?, _ streamID: Int32, _ buffer: UnsafeMutablePointer<UInt8>?, _ length: Int,
    _ flags: UnsafeMutablePointer<UInt32>?, _ source: UnsafeMutablePointer<nghttp2_data_source>?, _ userData: UnsafeMutableRawPointer?
) -> Int {
    let slotIndex = Int(bitPattern: source!.pointee.ptr) - 1
    return withConnection(userData) { $0.readPayload(slotIndex: slotIndex, into: buffer!, length: length, flags: flags!) }
}

private func apnsOnHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
    _ value: UnsafePointer<UInt8>?, _ valueLength: Int, _ flags: UInt8, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
    withConnection(userData) {
        $0.responseHeader(
            streamID: frame.pointee.hd.stream_id, name: name!, nameLength: nameLength, value: value!, valueLength: valueLength)
    }
    return 0
}

private func apnsOnData(
    _ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32, _ data: UnsafePointer<UInt8>?, _ length: Int,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withConnection(userData) { $0.responseData(streamID: streamID, data: data!, length: length) }
    return 0
}

private func apnsOnStreamClose(
    _ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withConnection(userData) { $0.streamClosed(streamID: streamID, errorCode: errorCode) }
    return 0
}

private func apnsOnFrameReceived(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withConnection(userData) { $0.frameReceived(frame!) }
    return 0
}

/// The callback table and options, built once per process and shared by every client session.
struct ClientCallbacks: @unchecked Sendable {
    let pointer: OpaquePointer
    let option: OpaquePointer

    static let shared: ClientCallbacks = {
        var callbacks: OpaquePointer?
        nghttp2_session_callbacks_new(&callbacks)
        nghttp2_session_callbacks_set_send_callback(callbacks, apnsSend)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, apnsOnHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, apnsOnData)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, apnsOnStreamClose)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, apnsOnFrameReceived)
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        // APNs starts token connections at one stream; assume that until its SETTINGS say otherwise.
        nghttp2_option_set_peer_max_concurrent_streams(option, 1)
        nghttp2_option_set_no_closed_streams(option, 1)
        return ClientCallbacks(pointer: callbacks!, option: option!)
    }()
}

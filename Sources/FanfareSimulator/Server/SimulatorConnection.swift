import CNghttp2
import FanfareCore
import FanfareHTTP2
import FanfareIO
import FanfareTLS

/// One client connection to the simulator: TLS over io_uring, an nghttp2 server session, APNs' behaviour.
///
/// Requests are collected into pooled `RequestHead`s (no allocation per request), decided by the
/// `RequestValidator` when the stream ends, then answered at once or after the latency model's delay.
final class SimulatorConnection: SecureTransportDelegate, IOHandler {
    unowned(unsafe) let worker: SimulatorWorker  // the worker owns its connections and outlives them
    /// The worker and its pool again, for the per-request paths: calls through these take no retain/release
    /// (which `unowned(unsafe)` does not guarantee, and which cost several atomics per request).
    private let workerRef: Unmanaged<SimulatorWorker>
    private let headPool: Unmanaged<RequestHeadPool>
    /// Held strongly: the session's memory lives in it, so it must outlive the session.
    private let memoryPool: HTTP2MemoryPool
    let serial: UInt32
    let transport: SecureTransport
    let auth: ConnectionAuthState
    @exclusivity(unchecked) private var session: OpaquePointer?
    @exclusivity(unchecked) private var handlerID: IOHandlerID?
    @exclusivity(unchecked) private var delayed: DelayHeap
    @exclusivity(unchecked) private var timerDue: UInt64 = .max
    @exclusivity(unchecked) private var timer: IOTimerID?
    @exclusivity(unchecked) private var openStreams = 0
    /// Most streams open at once on this connection, overall and before its first 200 was sent (a client
    /// that honours APNs' one-stream start keeps the latter at 1).
    @exclusivity(unchecked) private var maxOpenStreams = 0
    @exclusivity(unchecked) private var maxOpenStreamsBeforeFirstAccept = 0
    @exclusivity(unchecked) private var hasSentAccept = false
    @exclusivity(unchecked) private var streamPolicy: ConnectionStreamPolicy
    @exclusivity(unchecked) private var goAwaySent = false
    /// The last-stream-id of the GOAWAY sent: streams above it are not processed (RFC 9113 §6.8).
    @exclusivity(unchecked) private var goAwayLastStreamID = Int32.max
    /// The highest stream id decided so far (a GOAWAY must not disown a stream already decided).
    @exclusivity(unchecked) private var highestDecidedStreamID: Int32 = 0
    @exclusivity(unchecked) private(set) var closed = false
    /// Injected fault: reset (TCP RST) once this many requests are decided; nil = never.
    private let resetAfterRequests: Int?
    /// The reset is due: nothing more is decided, and the socket is aborted once nghttp2 returns.
    @exclusivity(unchecked) private var resetDue = false

    init(worker: SimulatorWorker, serial: UInt32, tls: TLSConnection) {
        self.worker = worker
        self.workerRef = Unmanaged.passUnretained(worker)
        self.headPool = Unmanaged.passUnretained(worker.headPool)
        self.memoryPool = worker.http2Pool
        self.serial = serial
        transport = SecureTransport(loop: worker.loop, tls: tls, buffers: worker.bufferSizes)
        auth = worker.makeAuthState()
        // A connection never has more streams open than the most it advertises (nghttp2 refuses the rest).
        delayed = DelayHeap(capacity: max(1, worker.configuration.maxConcurrentStreams))
        streamPolicy = ConnectionStreamPolicy(configuration: worker.configuration)
        resetAfterRequests = worker.drawConnectionReset()
        transport.delegate = self
    }

    deinit {
        if let session { nghttp2_session_del(session) }
    }

    func start(fd: Int32, remote: String) {
        handlerID = worker.loop.register(self)
        transport.adopt(acceptedFD: fd, remote: remote, handshakeTimeout: 10_000_000_000)
    }

    // MARK: - SecureTransportDelegate

    func transportEstablished(_ transport: SecureTransport) {
        var newSession: OpaquePointer?
        let userData = Unmanaged.passUnretained(self).toOpaque()
        guard nghttp2_session_server_new3(
            &newSession, ServerCallbacks.shared.pointer, userData, ServerCallbacks.shared.option, memoryPool.allocator) == 0,
            let newSession
        else {
            transport.close()
            return
        }
        session = newSession
        let configuration = worker.configuration
        // APNs' observed initial SETTINGS (apns-spec.md §1.3, §10): one stream until a valid push succeeds.
        var settings = [
            entry(NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, UInt32(configuration.headerTableSize)),
            entry(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, UInt32(configuration.initialMaxConcurrentStreams)),
            entry(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 65535),
            entry(NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 16384),
            entry(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, UInt32(configuration.maxHeaderListSize)),
        ]
        nghttp2_submit_settings(newSession, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        worker.stats.connectionsOpened += 1
    }

    private func entry(_ id: nghttp2_settings_id, _ value: UInt32) -> nghttp2_settings_entry {
        nghttp2_settings_entry(settings_id: Int32(id.rawValue), value: value)
    }

    func transportReceived(_ transport: SecureTransport, plaintext: UnsafeRawBufferPointer) -> Bool {
        guard let session else { return false }
        if resetDue { return true }  // bytes after the reset was decided: dropped with the connection
        let consumed = nghttp2_session_mem_recv(session, plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), plaintext.count)
        if resetDue {
            // Out of nghttp2 now: abort. Responses submitted during this read never leave.
            worker.stats.connectionsReset += 1
            transport.reset()
            return true
        }
        transport.setNeedsFlush()
        return consumed >= 0
    }

    func transportProduce(_ transport: SecureTransport) {
        guard let session else { return }
        // Accepted pushes reach the log file before any of their 200s can leave (AcceptedPushLog).
        workerRef._withUnsafeGuaranteedRef { $0.flushAcceptedLog() }
        // Channel changes are durable before their answers leave (management port; a flag check otherwise).
        guard workerRef._withUnsafeGuaranteedRef({ $0.role == .push || $0.persistChannels() }) else { return }
        if nghttp2_session_send(session) != 0 {
            transport.close()
            return
        }
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 {
            transport.close()  // GOAWAY exchanged and every stream answered
        }
    }

    func transportClosed(_ transport: SecureTransport, reason: TransportCloseReason) {
        closed = true
        if let session {
            // Release every pooled head still attached to a stream.
            worker.releaseAllStreams(of: self, session: session)
            nghttp2_session_del(session)
            self.session = nil
        }
        delayed.removeAll()
        if let handlerID {
            self.handlerID = nil
            worker.loop.unregister(handlerID)
        }
        worker.stats.connectionsClosed += 1
        worker.connectionClosed(self)
    }

    // MARK: - Requests

    func beginRequest(streamID: Int32) {
        guard let session, !resetDue else { return }
        guard !goAwaySent, !workerRef._withUnsafeGuaranteedRef({ $0.drawRefusedStream() }),
            let slot = workerRef._withUnsafeGuaranteedRef({ $0.acquireStream(connection: self, streamID: streamID) }) else {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, UInt32(NGHTTP2_REFUSED_STREAM.rawValue))
            return
        }
        openStreams += 1
        if openStreams > maxOpenStreams {
            maxOpenStreams = openStreams
            if !hasSentAccept { maxOpenStreamsBeforeFirstAccept = openStreams }
            worker.noteStreamConcurrency(open: maxOpenStreams, beforeFirstAccept: maxOpenStreamsBeforeFirstAccept)
        }
        nghttp2_session_set_stream_user_data(session, streamID, UnsafeMutableRawPointer(bitPattern: slot + 1))
    }

    /// A request header from nghttp2 (one call per header: kept free of reference counting).
    func addHeader(streamID: Int32, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        guard let slot = slot(for: streamID) else { return }
        headPool._withUnsafeGuaranteedRef { $0.head(at: slot) }.pointee.add(name: name, value: value)
    }

    func appendBody(streamID: Int32, _ data: UnsafeRawBufferPointer) {
        guard let slot = slot(for: streamID) else { return }
        headPool._withUnsafeGuaranteedRef { $0.head(at: slot) }.pointee.appendBody(data)
    }

    func slot(for streamID: Int32) -> Int? {
        guard let session, let raw = nghttp2_session_get_stream_user_data(session, streamID) else { return nil }
        return Int(bitPattern: raw) - 1
    }

    /// The request's last frame arrived: decide like APNs, then answer now or after the modelled latency.
    func requestComplete(streamID: Int32, slot: Int) {
        guard let session, !resetDue else { return }
        // A stream above the GOAWAY's last-stream-id was not processed: the client sends it again on another
        // connection, so deciding (counting, logging) it here as well would accept the push twice.
        if streamID > goAwayLastStreamID {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, UInt32(NGHTTP2_REFUSED_STREAM.rawValue))
            transport.setNeedsFlush()
            return
        }
        let (now, decision) = workerRef._withUnsafeGuaranteedRef { ($0.loop.now, $0.decide(slot: slot, connection: self)) }
        highestDecidedStreamID = max(highestDecidedStreamID, streamID)
        // APNs raises the stream limit after the first valid push (and optionally drops it after a rejection).
        if let limit = streamPolicy.record(decision) {
            var settings = [entry(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, UInt32(limit))]
            nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, 1)
            transport.setNeedsFlush()
        }
        if streamPolicy.shouldGoAway && !goAwaySent {
            // Streams decided out of order may have higher ids than this one: keep them all on this side.
            sendGoAway(lastStreamID: highestDecidedStreamID, reason: nil)
        }
        if let resetAfterRequests, streamPolicy.streamsDecided >= resetAfterRequests {
            resetDue = true  // this request stays unanswered; transportReceived aborts the connection
            return
        }
        let delay = workerRef._withUnsafeGuaranteedRef { $0.responseDelay() }
        if delay == 0 {
            respond(streamID: streamID, slot: slot)
        } else {
            let due = now &+ delay
            if delayed.push(.init(due: due, streamID: streamID, slot: Int32(slot))) {
                armTimer(due)
            } else {
                respond(streamID: streamID, slot: slot)
            }
        }
    }

    private func respond(streamID: Int32, slot: Int) {
        guard let session else { return }
        let state = workerRef._withUnsafeGuaranteedRef { $0.streamState(slot) }
        guard state.pointee.owner == serial, state.pointee.streamID == streamID else { return }  // stream reset meanwhile
        let (headers, count) = workerRef._withUnsafeGuaranteedRef { $0.responseHeaders(slot: slot) }
        let hasBody = state.pointee.bodyCount > 0
        var provider = nghttp2_data_provider()
        provider.source.ptr = UnsafeMutableRawPointer(bitPattern: slot + 1)
        provider.read_callback = simulatorReadBody
        let result = hasBody
            ? nghttp2_submit_response(session, streamID, headers, count, &provider)
            : nghttp2_submit_response(session, streamID, headers, count, nil)
        assert(result == 0 || result == NGHTTP2_ERR_INVALID_ARGUMENT.rawValue)
        if result == 0 && state.pointee.accepted { hasSentAccept = true }
        transport.setNeedsFlush()
    }

    func readBody(slot: Int, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        let state = worker.streamState(slot)
        let remaining = Int(state.pointee.bodyCount) - Int(state.pointee.bodySent)
        let count = min(remaining, length)
        if count > 0 {
            UnsafeMutableRawPointer(buffer).copyMemory(from: worker.responseBody(slot) + Int(state.pointee.bodySent), byteCount: count)
            state.pointee.bodySent += Int32(count)
        }
        if Int(state.pointee.bodySent) == Int(state.pointee.bodyCount) { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return count
    }

    func streamClosed(streamID: Int32) {
        guard let slot = slot(for: streamID) else { return }
        openStreams -= 1
        if let session { nghttp2_session_set_stream_user_data(session, streamID, nil) }
        workerRef._withUnsafeGuaranteedRef { $0.releaseStream(slot) }
    }

    /// The simulator is stopping: GOAWAY `Shutdown`, written out before the socket closes (a GOAWAY only
    /// queued in the session would never leave, and clients would see a bare disconnect). Not called from
    /// inside an nghttp2 callback, so the session may send here.
    func shutDown() {
        sendGoAway(reason: .shutdown)
        worker.flushAcceptedLog()
        guard worker.role == .push || worker.persistChannels() else { return }
        if let session, transport.state == .established { _ = nghttp2_session_send(session) }
        transport.close()
    }

    /// Sends GOAWAY: streams above `lastStreamID` are refused (clients resend them elsewhere).
    func sendGoAway(lastStreamID: Int32? = nil, reason: APNsReason?) {
        guard let session, !goAwaySent else { return }
        goAwaySent = true
        worker.stats.goAwaysSent += 1
        let last = lastStreamID ?? nghttp2_session_get_last_proc_stream_id(session)
        goAwayLastStreamID = last
        var debug: [UInt8] = []
        if let reason { debug = Array("{\"reason\":\"\(reason.rawValue)\"}".utf8) }
        nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), last, UInt32(NGHTTP2_NO_ERROR.rawValue), debug, debug.count)
        transport.setNeedsFlush()
    }

    // MARK: - Delayed responses

    private func armTimer(_ due: UInt64) {
        guard due < timerDue, let handlerID else { return }
        if let timer { worker.loop.cancelTimer(timer) }
        timerDue = due
        timer = worker.loop.schedule(at: due, handler: handlerID, tag: 1, cookie: 0)
    }

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {}

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {
        timer = nil
        timerDue = .max
        let now = loop.now
        var responded = false
        while let entry = delayed.popDue(now: now) {
            respond(streamID: entry.streamID, slot: Int(entry.slot))
            responded = true
        }
        if let next = delayed.earliest { armTimer(next) }
        // Send them now, not after every other connection's timers and the tick handlers.
        if responded { transport.flushNow() }
    }
}

// MARK: - C callbacks (global functions; the connection comes back from user_data, unretained)

/// Calls `body` with the connection behind `user_data` without retaining it: the session is deleted before
/// its connection, and a retain/release pair per callback (one per header) was a measurable share of CPU.
@inline(__always)
private func withConnection<R>(_ userData: UnsafeMutableRawPointer?, _ body: (SimulatorConnection) -> R) -> R {
    Unmanaged<SimulatorConnection>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
}

private func simulatorSend(
    _ session: OpaquePointer?, _ data: UnsafePointer<UInt8>?, _ length: Int, _ flags: Int32, _ userData: UnsafeMutableRawPointer?
) -> Int {
    withConnection(userData) { connection in
        if connection.transport.isBackedUp { return Int(NGHTTP2_ERR_WOULDBLOCK.rawValue) }
        guard connection.transport.writePlaintext(UnsafeRawBufferPointer(start: data, count: length)) else {
            return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
        }
        return length
    }
}

private func simulatorBeginHeaders(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
        frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST
    else { return 0 }
    withConnection(userData) { $0.beginRequest(streamID: frame.pointee.hd.stream_id) }
    return 0
}

private func simulatorOnHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
    _ value: UnsafePointer<UInt8>?, _ valueLength: Int, _ flags: UInt8, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let frame else { return 0 }
    withConnection(userData) {
        $0.addHeader(
            streamID: frame.pointee.hd.stream_id, name: UnsafeRawBufferPointer(start: name, count: nameLength),
            value: UnsafeRawBufferPointer(start: value, count: valueLength))
    }
    return 0
}

private func simulatorOnData(
    _ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32, _ data: UnsafePointer<UInt8>?, _ length: Int,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withConnection(userData) { $0.appendBody(streamID: streamID, UnsafeRawBufferPointer(start: data, count: length)) }
    return 0
}

private func simulatorOnFrame(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let frame else { return 0 }
    let type = UInt32(frame.pointee.hd.type)
    guard type == NGHTTP2_HEADERS.rawValue || type == NGHTTP2_DATA.rawValue,
        frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
    else { return 0 }
    let streamID = frame.pointee.hd.stream_id
    withConnection(userData) { connection in
        guard let slot = connection.slot(for: streamID) else { return }
        connection.requestComplete(streamID: streamID, slot: slot)
    }
    return 0
}

private func simulatorOnStreamClose(
    _ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withConnection(userData) { $0.streamClosed(streamID: streamID) }
    return 0
}

private func simulatorReadBody(
    _ session: OpaquePointer?, _ streamID: Int32, _ buffer: UnsafeMutablePointer<UInt8>?, _ length: Int,
    _ flags: UnsafeMutablePointer<UInt32>?, _ source: UnsafeMutablePointer<nghttp2_data_source>?, _ userData: UnsafeMutableRawPointer?
) -> Int {
    let slot = Int(bitPattern: source!.pointee.ptr) - 1
    return withConnection(userData) { $0.readBody(slot: slot, into: buffer!, length: length, flags: flags!) }
}

/// Counts every REFUSED_STREAM reset that leaves, ours and the ones nghttp2 sends by itself for streams above
/// a SETTINGS limit the client has not acknowledged yet (those never reach on_begin_headers).
private func simulatorOnFrameSent(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_RST_STREAM.rawValue),
        frame.pointee.rst_stream.error_code == UInt32(NGHTTP2_REFUSED_STREAM.rawValue)
    else { return 0 }
    withConnection(userData) { $0.worker.stats.streamsRefused += 1 }
    return 0
}

/// nghttp2's server callback table and options, built once per process.
struct ServerCallbacks: @unchecked Sendable {
    let pointer: OpaquePointer
    let option: OpaquePointer

    static let shared: ServerCallbacks = {
        var callbacks: OpaquePointer?
        nghttp2_session_callbacks_new(&callbacks)
        nghttp2_session_callbacks_set_send_callback(callbacks, simulatorSend)
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, simulatorBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, simulatorOnHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, simulatorOnData)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, simulatorOnFrame)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, simulatorOnStreamClose)
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, simulatorOnFrameSent)
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        nghttp2_option_set_no_closed_streams(option, 1)
        return ServerCallbacks(pointer: callbacks!, option: option!)
    }()
}

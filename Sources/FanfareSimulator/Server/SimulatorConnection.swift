import FanfareCore
import FanfareHTTP2
import FanfareIO
import FanfareTLS

/// One client connection to the simulator: TLS over io_uring, an `HTTP2ServerSession`, APNs' behaviour.
///
/// Requests are collected into pooled `RequestHead`s (no allocation per request), decided by the
/// `RequestValidator` when the stream ends, then answered at once or after the latency model's delay.
/// The connection is its session's delegate: streams are the session's numbers, mapped to the worker's
/// slots in `slotOfStream`.
final class SimulatorConnection: HTTP2ServerSessionDelegate, SecureTransportDelegate, IOHandler {
    unowned(unsafe) let worker: SimulatorWorker  // the worker owns its connections and outlives them
    /// The worker and its pool again, for the per-request paths: calls through these take no retain/release
    /// (which `unowned(unsafe)` does not guarantee, and which cost several atomics per request).
    private let workerRef: Unmanaged<SimulatorWorker>
    private let headPool: Unmanaged<RequestHeadPool>
    let serial: UInt32
    let transport: SecureTransport
    let auth: ConnectionAuthState
    @exclusivity(unchecked) private var session: HTTP2ServerSession?
    /// The worker slot (request head and response) of each of the session's stream numbers; -1 = none.
    private let slotOfStream: UnsafeMutablePointer<Int32>
    private let streamCapacity: Int
    @exclusivity(unchecked) private var contentTypeField = HPACKCachedField?.none
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
    /// The reset is due: nothing more is decided, and the socket is aborted once the session returns.
    @exclusivity(unchecked) private var resetDue = false

    init(worker: SimulatorWorker, serial: UInt32, tls: TLSConnection) {
        self.worker = worker
        self.workerRef = Unmanaged.passUnretained(worker)
        self.headPool = Unmanaged.passUnretained(worker.headPool)
        self.serial = serial
        transport = SecureTransport(loop: worker.loop, tls: tls, buffers: worker.bufferSizes)
        auth = worker.makeAuthState()
        // A connection never has more streams open than the most it advertises (the session refuses the rest).
        streamCapacity = max(
            1, worker.configuration.maxConcurrentStreams, worker.configuration.initialMaxConcurrentStreams)
        delayed = DelayHeap(capacity: streamCapacity)
        slotOfStream = .allocate(capacity: streamCapacity)
        slotOfStream.initialize(repeating: -1, count: streamCapacity)
        streamPolicy = ConnectionStreamPolicy(configuration: worker.configuration)
        resetAfterRequests = worker.drawConnectionReset()
        super.init()
        transport.delegate = self
    }

    deinit {
        slotOfStream.deallocate()
    }

    func start(fd: Int32, remote: String) {
        handlerID = worker.loop.register(self)
        transport.adopt(acceptedFD: fd, remote: remote, handshakeTimeout: 10_000_000_000)
    }

    // MARK: - SecureTransportDelegate

    func transportEstablished(_ transport: SecureTransport) {
        let configuration = worker.configuration
        // APNs' observed initial SETTINGS (apns-spec.md §1.3, §10): one stream until a valid push succeeds.
        var settings = HTTP2ServerSession.LocalSettings()
        settings.maxConcurrentStreams = configuration.initialMaxConcurrentStreams
        settings.headerTableSize = configuration.headerTableSize
        settings.maxHeaderListSize = configuration.maxHeaderListSize
        let newSession = HTTP2ServerSession(
            transport: transport, delegate: self, capacity: streamCapacity, settings: settings)
        contentTypeField = newSession.registerRepeatedField(
            nameIndex: 31, name: "content-type", value: "application/json")
        session = newSession
        newSession.start()
        worker.stats.connectionsOpened += 1
    }

    func transportReceived(_ transport: SecureTransport, plaintext: UnsafeRawBufferPointer) -> Bool {
        guard let session else { return false }
        if resetDue { return true }  // bytes after the reset was decided: dropped with the connection
        do {
            try session.receive(plaintext)
        } catch {
            // The session wrote GOAWAY with the error's code: it leaves before the socket closes.
            if !resetDue {
                transport.close()
                return true
            }
        }
        if resetDue {
            // Out of the session now: abort. Responses queued during this read never leave.
            worker.stats.connectionsReset += 1
            transport.reset()
            return true
        }
        transport.setNeedsFlush()
        return true
    }

    func transportProduce(_ transport: SecureTransport) {
        guard let session else { return }
        // Accepted pushes reach the log file before any of their 200s can leave (AcceptedPushLog).
        workerRef._withUnsafeGuaranteedRef { $0.flushAcceptedLog() }
        // Channel changes are durable before their answers leave (management port; a flag check otherwise).
        guard workerRef._withUnsafeGuaranteedRef({ $0.role == .push || $0.persistChannels() }) else { return }
        session.produce()
        if session.isFinished {
            transport.close()  // GOAWAY exchanged and every stream answered
        }
    }

    func transportClosed(_ transport: SecureTransport, reason: TransportCloseReason) {
        closed = true
        // Every stream still open ends now and its pooled head goes back (http2StreamClosed).
        session?.connectionLost()
        delayed.removeAll()
        if let handlerID {
            self.handlerID = nil
            worker.loop.unregister(handlerID)
        }
        worker.stats.connectionsClosed += 1
        worker.connectionClosed(self)
    }

    // MARK: - HTTP2ServerSessionDelegate (per request: kept free of reference counting)

    override func http2StreamOpened(stream: Int, streamID: Int32) -> Bool {
        guard !resetDue, !goAwaySent, !workerRef._withUnsafeGuaranteedRef({ $0.drawRefusedStream() }),
            let slot = workerRef._withUnsafeGuaranteedRef({ $0.acquireStream(connection: self, streamID: streamID) })
        else { return false }  // refused: REFUSED_STREAM, counted in http2ResetSent
        slotOfStream[stream] = Int32(slot)
        openStreams += 1
        if openStreams > maxOpenStreams {
            maxOpenStreams = openStreams
            if !hasSentAccept { maxOpenStreamsBeforeFirstAccept = openStreams }
            worker.noteStreamConcurrency(open: maxOpenStreams, beforeFirstAccept: maxOpenStreamsBeforeFirstAccept)
        }
        return true
    }

    override func http2RequestHeader(stream: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        let slot = Int(slotOfStream[stream])
        headPool._withUnsafeGuaranteedRef { $0.head(at: slot) }.pointee.add(name: name, value: value)
    }

    override func http2RequestData(stream: Int, bytes: UnsafeRawBufferPointer) {
        let slot = Int(slotOfStream[stream])
        headPool._withUnsafeGuaranteedRef { $0.head(at: slot) }.pointee.appendBody(bytes)
    }

    override func http2RequestEnded(stream: Int) {
        requestComplete(stream: stream, slot: Int(slotOfStream[stream]))
    }

    override func http2WriteResponseHeaders(stream: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter)
    {
        let slot = Int(slotOfStream[stream])
        workerRef._withUnsafeGuaranteedRef {
            $0.writeResponseHeaders(slot: slot, contentType: contentTypeField!, table: &table, writer: &writer)
        }
    }

    override func http2ResponseBody(stream: Int) -> UnsafeRawBufferPointer {
        let slot = Int(slotOfStream[stream])
        return workerRef._withUnsafeGuaranteedRef { $0.responseBody(slot: slot) }
    }

    override func http2StreamClosed(stream: Int, errorCode: UInt32) {
        let slot = Int(slotOfStream[stream])
        slotOfStream[stream] = -1
        openStreams -= 1
        workerRef._withUnsafeGuaranteedRef { $0.releaseStream(slot) }
    }

    /// Counts every REFUSED_STREAM reset that leaves: ours and the session's, for streams above the limit.
    override func http2ResetSent(streamID: Int32, errorCode: UInt32) {
        if errorCode == HTTP2ErrorCode.refusedStream && !resetDue { worker.stats.streamsRefused += 1 }
    }

    /// The session reset a malformed request (RFC 9113 §8.1.1) with PROTOCOL_ERROR, as nghttp2 did.
    override func http2MalformedRequest(streamID: Int32, problem: StaticString) {
        worker.stats.streamsMalformed += 1
    }

    // MARK: - Requests

    /// The request's last frame arrived: decide like APNs, then answer now or after the modelled latency.
    private func requestComplete(stream: Int, slot: Int) {
        guard let session, !resetDue else { return }
        let streamID = workerRef._withUnsafeGuaranteedRef { $0.streamState(slot) }.pointee.streamID
        // A stream above the GOAWAY's last-stream-id was not processed: the client sends it again on another
        // connection, so deciding (counting, logging) it here as well would accept the push twice.
        if streamID > goAwayLastStreamID {
            session.reset(stream: stream, streamID: streamID, errorCode: HTTP2ErrorCode.refusedStream)
            transport.setNeedsFlush()
            return
        }
        let (now, decision) = workerRef._withUnsafeGuaranteedRef {
            ($0.loop.now, $0.decide(slot: slot, connection: self))
        }
        highestDecidedStreamID = max(highestDecidedStreamID, streamID)
        // APNs raises the stream limit after the first valid push (and optionally drops it after a rejection).
        if let limit = streamPolicy.record(decision) {
            session.advertise(maxConcurrentStreams: min(limit, streamCapacity))
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
            respond(streamID: streamID, stream: stream)
        } else {
            let due = now &+ delay
            if delayed.push(.init(due: due, streamID: streamID, stream: Int32(stream))) {
                armTimer(due)
            } else {
                respond(streamID: streamID, stream: stream)
            }
        }
    }

    /// Queues the stream's response (it leaves in `transportProduce`, after the accepted-push log is written).
    private func respond(streamID: Int32, stream: Int) {
        guard let session, session.streamID(of: stream) == streamID else { return }  // stream reset meanwhile
        let slot = Int(slotOfStream[stream])
        let accepted = workerRef._withUnsafeGuaranteedRef { $0.streamState(slot) }.pointee.accepted
        if session.respond(stream: stream, streamID: streamID) && accepted { hasSentAccept = true }
    }

    /// The simulator is stopping: GOAWAY `Shutdown`, written out with every response already queued before
    /// the socket closes (clients would otherwise see a bare disconnect).
    func shutDown() {
        sendGoAway(reason: .shutdown)
        worker.flushAcceptedLog()
        guard worker.role == .push || worker.persistChannels() else { return }
        if let session, transport.state == .established { session.produce() }
        transport.close()
    }

    /// Sends GOAWAY: streams above `lastStreamID` are refused (clients resend them elsewhere).
    func sendGoAway(lastStreamID: Int32? = nil, reason: APNsReason?) {
        guard let session, !goAwaySent else { return }
        goAwaySent = true
        worker.stats.goAwaysSent += 1
        let last = lastStreamID ?? session.lastClientStreamID
        goAwayLastStreamID = last
        var debug: [UInt8] = []
        if let reason { debug = Array("{\"reason\":\"\(reason.rawValue)\"}".utf8) }
        debug.withUnsafeBytes { session.goAway(lastStreamID: last, debug: $0) }
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
            respond(streamID: entry.streamID, stream: Int(entry.stream))
            responded = true
        }
        if let next = delayed.earliest { armTimer(next) }
        // Send them now, not after every other connection's timers and the tick handlers.
        if responded { transport.flushNow() }
    }
}

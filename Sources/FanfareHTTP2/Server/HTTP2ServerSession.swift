/// The server side of one HTTP/2 connection (RFC 9113) over an `HTTP2FrameSink`, shaped like
/// `HTTP2ClientSession` and sharing its connection core (`HTTP2Connection`: the order of frames, the client
/// preface, SETTINGS, PING, WINDOW_UPDATE, GOAWAY, flow control, the flood guard): requests arrive as delegate
/// calls per header field, body bytes and end; responses leave in `produce` (the transport's flush) with header
/// blocks written by the owner through `HPACKBlockWriter`. Per-stream state lives in fixed arrays sized at
/// connection open; in the steady state a request costs no allocation, no lock and no system call here.
/// Confined to its loop's thread.
///
/// Stream limit: the session counts a stream as open from its HEADERS until its response's END_STREAM is
/// written into the transport's staging buffer (or it is reset), and refuses (REFUSED_STREAM) a new one only
/// above every limit the client may still be keeping to: the last one it acknowledged and any sent since. A
/// client that keeps to what it was told is never refused.
///
/// Network input is handled as nghttp2 does: anything a client may not send ends the connection with GOAWAY
/// and the RFC's error code (`receive` throws), a malformed request is a stream error (RST_STREAM
/// PROTOCOL_ERROR, the connection goes on), and floods (control frames owed to a peer that does not read,
/// resets outrunning answers, empty frames, endless header blocks) end it with ENHANCE_YOUR_CALM. Nothing a
/// client sends traps.
public final class HTTP2ServerSession {
    /// What this side announces.
    public struct LocalSettings: Sendable {
        /// SETTINGS_MAX_CONCURRENT_STREAMS in the first SETTINGS (`advertise` changes it later).
        public var maxConcurrentStreams = 100
        /// Each request stream may carry this much before we open its window again.
        public var initialWindowSize = HTTP2Limits.defaultWindowSize
        /// The connection's receive window (opened after the SETTINGS when larger than the default).
        public var connectionWindowSize = HTTP2Limits.defaultWindowSize
        public var headerTableSize = 4096
        public var maxHeaderListSize = 64 * 1024
        /// Frames we owe the client written while the transport is backed up (see `HTTP2ControlFrames`).
        public var maxQueuedControlFrames = 1000
        /// RST_STREAMs from the client beyond the responses we wrote (a "rapid reset" flood: streams opened
        /// and cancelled at once make us work without bound) before ENHANCE_YOUR_CALM.
        public var maxResetsBeyondAnswers = 1000
        /// Frames in a row that carry nothing (empty DATA without END_STREAM, empty CONTINUATION, unknown
        /// types) before ENHANCE_YOUR_CALM.
        public var maxEmptyFrames = 1000
        public init() {}
    }

    /// Upper bound of one response header block; the owner's fields must fit (checked).
    public static let maxResponseHeaderBlock = 2048
    /// Request header blocks split over CONTINUATION frames are gathered up to this size.
    static let maxRequestHeaderBlock = 64 * 1024

    private let local: LocalSettings
    private let delegate: HTTP2Unretained<HTTP2ServerSessionDelegate>
    @exclusivity(unchecked) private var connection: HTTP2Connection
    @exclusivity(unchecked) private var encoderTable: HPACKEncoderTable
    @exclusivity(unchecked) private var decoder: HPACKDecoder
    @exclusivity(unchecked) private var streams: ServerStreamTable
    /// Stream numbers not in use (a stack).
    private let freeNumbers: UnsafeMutablePointer<Int32>
    @exclusivity(unchecked) private var freeCount: Int
    /// Responses waiting for `produce`, and bodies waiting for send window.
    @exclusivity(unchecked) private var responseQueue = StreamList()
    @exclusivity(unchecked) private var blocked = StreamList()

    /// SETTINGS_MAX_CONCURRENT_STREAMS: the last value the client acknowledged (0 before its first ACK), the
    /// largest value among those it has not acknowledged yet, and the last one sent.
    @exclusivity(unchecked) private var acknowledgedStreamLimit = 0
    @exclusivity(unchecked) private var unacknowledgedStreamLimitMaximum = 0
    @exclusivity(unchecked) public private(set) var advertisedStreamLimit: Int
    /// The last stream id of our GOAWAY: streams above it are refused.
    @exclusivity(unchecked) private var goAwayLastStreamID = Int32.max

    /// `capacity` streams at most may be open at once (the most the owner will ever advertise).
    public init(
        transport: HTTP2FrameSink, delegate: HTTP2ServerSessionDelegate, capacity: Int,
        settings: LocalSettings = LocalSettings()
    ) {
        precondition(capacity > 0 && settings.maxConcurrentStreams <= capacity)
        self.delegate = HTTP2Unretained(delegate)
        local = settings
        let floodGuard = HTTP2FloodGuard(
            maxEmptyFrames: settings.maxEmptyFrames, maxResetsBeyondAnswers: settings.maxResetsBeyondAnswers)
        connection = HTTP2Connection(
            role: .server, transport: transport, streamWindow: settings.initialWindowSize,
            connectionWindow: settings.connectionWindowSize, maxHeaderBlock: Self.maxRequestHeaderBlock,
            maxQueuedControlFrames: settings.maxQueuedControlFrames, floodGuard: floodGuard)
        streams = ServerStreamTable(capacity: capacity)
        freeNumbers = .allocate(capacity: capacity)
        for position in 0..<capacity { freeNumbers[position] = Int32(capacity - 1 - position) }
        freeCount = capacity
        encoderTable = HPACKEncoderTable(maximumSize: 4096)
        decoder = HPACKDecoder(
            maximumTableSize: settings.headerTableSize, maximumHeaderListSize: settings.maxHeaderListSize)
        advertisedStreamLimit = settings.maxConcurrentStreams
    }

    deinit {
        freeNumbers.deallocate()
    }

    /// Registers a response field that repeats (sent indexed once the client has it).
    public func registerRepeatedField(nameIndex: Int?, name: String, value: String) -> HPACKCachedField {
        assert(connection.isOnOwnerThread(), "HTTP2ServerSession used off its thread")
        return encoderTable.register(nameIndex: nameIndex, name: name, value: value)
    }

    // MARK: - Starting, settings and stopping

    /// Writes the server preface: our SETTINGS (and the connection window when larger than the default).
    public func start() {
        assert(connection.isOnOwnerThread(), "HTTP2ServerSession used off its thread")
        connection.start(settings: [
            (HTTP2SettingID.headerTableSize, UInt32(local.headerTableSize)),
            (HTTP2SettingID.maxConcurrentStreams, UInt32(local.maxConcurrentStreams)),
            (HTTP2SettingID.initialWindowSize, UInt32(local.initialWindowSize)),
            (HTTP2SettingID.maxFrameSize, UInt32(HTTP2Limits.defaultMaxFrameSize)),
            (HTTP2SettingID.maxHeaderListSize, UInt32(local.maxHeaderListSize)),
        ])
        streamLimitSent(local.maxConcurrentStreams)
    }

    /// Announces a new SETTINGS_MAX_CONCURRENT_STREAMS (at most the capacity). Streams the client opens under
    /// the previous limit stay welcome until it acknowledges this one.
    public func advertise(maxConcurrentStreams limit: Int) {
        assert(connection.isOnOwnerThread(), "HTTP2ServerSession used off its thread")
        guard connection.isOpen else { return }
        precondition(limit >= 0 && limit <= streams.capacity, "a stream limit above the session's capacity")
        connection.writeSetting(HTTP2SettingID.maxConcurrentStreams, UInt32(limit))
        streamLimitSent(limit)
    }

    private func streamLimitSent(_ limit: Int) {
        advertisedStreamLimit = limit
        unacknowledgedStreamLimitMaximum = max(unacknowledgedStreamLimitMaximum, limit)
    }

    /// The most streams the client may have open now without breaking a limit it may still be keeping to.
    private var streamLimit: Int {
        guard connection.unacknowledgedSettings > 0 else { return acknowledgedStreamLimit }
        return max(acknowledgedStreamLimit, unacknowledgedStreamLimitMaximum)
    }

    /// Graceful GOAWAY (NO_ERROR): streams above `lastStreamID` (by default the last one opened) are refused;
    /// the others are answered. `debug` is sent as GOAWAY's debug data.
    public func goAway(
        lastStreamID: Int32? = nil, errorCode: UInt32 = HTTP2ErrorCode.noError,
        debug: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)
    ) {
        assert(connection.isOnOwnerThread(), "HTTP2ServerSession used off its thread")
        guard !connection.goAwaySent && connection.isOpen else { return }
        let last = min(lastStreamID ?? connection.lastStreamID, connection.lastStreamID)
        goAwayLastStreamID = last
        connection.sendGoAway(lastStreamID: last, errorCode: errorCode, debug: debug)
    }

    // MARK: - State

    /// The highest stream id the client opened (streams at or below it that we do not track are closed).
    public var lastClientStreamID: Int32 { connection.lastStreamID }
    public var goAwaySent: Bool { connection.goAwaySent }
    public var goAwayReceived: Bool { connection.goAwayReceived }
    /// A connection error was found (and answered with GOAWAY): nothing more is read or written.
    public var failed: Bool { connection.failed }
    public var lost: Bool { connection.lost }
    /// Streams open (HEADERS received, response END_STREAM not yet written).
    public var openStreamCount: Int { streams.openCount }
    /// True while responses or bodies wait for `produce`.
    public var wantsWrite: Bool {
        !responseQueue.isEmpty || (!blocked.isEmpty && connection.connectionSendWindow > 0)
    }
    /// Nothing more will happen here: an error, or GOAWAY either way with every stream answered (the owner
    /// closes the connection once what was written has left).
    public var isFinished: Bool {
        !connection.isOpen || ((connection.goAwaySent || connection.goAwayReceived) && streams.openCount == 0)
    }

    /// The stream number's stream id, if `stream` is open.
    public func streamID(of stream: Int) -> Int32? {
        guard stream >= 0 && stream < streams.capacity else { return nil }
        let entry = streams[stream]
        return entry.pointee.phase == .idle ? nil : entry.pointee.streamID
    }

    // MARK: - Responding

    /// Answers stream `stream` (which must still be stream `streamID`: false if it was reset meanwhile). The
    /// response leaves in the next `produce`: headers from `http2WriteResponseHeaders`, then the body.
    @discardableResult
    public func respond(stream: Int, streamID: Int32) -> Bool {
        assert(connection.isOnOwnerThread(), "HTTP2ServerSession used off its thread")
        guard connection.isOpen, stream >= 0 && stream < streams.capacity else { return false }
        let entry = streams[stream]
        guard entry.pointee.streamID == streamID,
            entry.pointee.phase == .receiving || entry.pointee.phase == .awaitingResponse
        else { return false }
        entry.pointee.phase = .queued
        responseQueue.append(stream, in: streams)
        connection.setNeedsFlush()
        return true
    }

    /// Resets stream `stream` (if it is still `streamID`) with `errorCode`; its `http2StreamClosed` comes
    /// before this returns.
    public func reset(stream: Int, streamID: Int32, errorCode: UInt32) {
        assert(connection.isOnOwnerThread(), "HTTP2ServerSession used off its thread")
        guard connection.isOpen, stream >= 0 && stream < streams.capacity else { return }
        let entry = streams[stream]
        guard entry.pointee.phase != .idle && entry.pointee.streamID == streamID else { return }
        writeReset(streamID: streamID, errorCode: errorCode)
        closeStream(stream, errorCode: errorCode)
    }

    /// Writes queued responses and bodies whose windows opened. Called from the transport's flush; stops
    /// when the transport is backed up (the rest waits, and its streams stay open).
    public func produce() {
        assert(connection.isOnOwnerThread(), "HTTP2ServerSession used off its thread")
        guard connection.beginProduce() else { return }
        if !blocked.isEmpty { resumeBlocked() }
        let room = HTTP2Limits.frameHeaderSize + Self.maxResponseHeaderBlock
        while !responseQueue.isEmpty && !connection.withTransport({ $0.isBackedUp }) {
            guard let base = connection.withTransport({ $0.reservePlaintext(room) }),
                let stream = responseQueue.popFirst(in: streams)
            else { break }
            writeResponse(stream, into: base)
        }
    }

    private func writeResponse(_ stream: Int, into base: UnsafeMutableRawPointer) {
        let entry = streams[stream]
        assert(entry.pointee.phase == .queued)
        entry.pointee.phase = .writing  // popped from the queue
        let body = delegate.with({ $0.http2ResponseBody(stream: stream) })
        connection.writeHeaders(
            at: base, capacity: Self.maxResponseHeaderBlock, streamID: entry.pointee.streamID, endsStream: body.isEmpty
        ) { writer in
            encoderTable.beginBlock(&writer)
            delegate.with({ $0.http2WriteResponseHeaders(stream: stream, table: &encoderTable, writer: &writer) })
        }
        // A response went out: the client may reset one more stream, and empty frames count from zero again.
        connection.floodGuard.answered()
        if body.count == 0 {
            finishResponse(stream)
        } else {
            entry.pointee.phase = .blocked
            entry.pointee.bodySent = 0
            blocked.append(stream, in: streams)
            sendBody(stream, body)
        }
    }

    /// Sends as much of the body as the windows allow; the rest waits in the blocked list.
    private func sendBody(_ stream: Int, _ body: UnsafeRawBufferPointer) {
        let entry = streams[stream]
        let sent = connection.writeData(
            body, from: Int(entry.pointee.bodySent), streamID: entry.pointee.streamID,
            streamWindow: &entry.pointee.sendWindow)
        entry.pointee.bodySent = Int32(sent)
        if sent == body.count { finishResponse(stream) }  // leaves the blocked list as it closes
    }

    private func resumeBlocked() {
        var cursor = blocked.head
        while let stream = connection.nextSendable(&cursor, in: streams) {
            sendBody(stream, delegate.with({ $0.http2ResponseBody(stream: stream) }))
        }
    }

    /// The response's END_STREAM is written: the stream is over (if the request was still coming, the client
    /// is told to stop sending it: RST_STREAM NO_ERROR, §8.1).
    private func finishResponse(_ stream: Int) {
        let entry = streams[stream]
        if !entry.pointee.requestEnded {
            writeReset(streamID: entry.pointee.streamID, errorCode: HTTP2ErrorCode.noError)
        }
        closeStream(stream, errorCode: HTTP2ErrorCode.noError)
    }

    private func closeStream(_ stream: Int, errorCode: UInt32) {
        let entry = streams[stream]
        assert(entry.pointee.phase != .idle)
        switch entry.pointee.phase {
        case .queued: responseQueue.remove(stream, in: streams)
        case .blocked: blocked.remove(stream, in: streams)
        default: break
        }
        streams.unbind(entry.pointee.streamID)
        entry.pointee = ServerStreamEntry()
        freeNumbers[freeCount] = Int32(stream)
        freeCount += 1
        delegate.with({ $0.http2StreamClosed(stream: stream, errorCode: errorCode) })
    }

    private func writeReset(streamID: Int32, errorCode: UInt32) {
        connection.control.writeReset(streamID: streamID, errorCode: errorCode)
        delegate.with({ $0.http2ResetSent(streamID: streamID, errorCode: errorCode) })
    }

    /// The connection is gone: every open stream ends now through `http2StreamClosed` with `errorCode`.
    public func connectionLost(errorCode: UInt32 = HTTP2ErrorCode.cancel) {
        assert(connection.isOnOwnerThread(), "HTTP2ServerSession used off its thread")
        guard connection.markLost() else { return }
        for stream in streams.numbers(ofStreamsAbove: 0) { closeStream(Int(stream), errorCode: errorCode) }
    }

    // MARK: - Receiving

    /// Processes decrypted bytes from the client (any split). On a connection error the session writes
    /// GOAWAY with its code, stops, and throws; the owner then closes the connection (after the GOAWAY left).
    public func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2ConnectionError) {
        assert(connection.isOnOwnerThread(), "HTTP2ServerSession used off its thread")
        do {
            var rest = try connection.beginReceiving(bytes)
            while let frame = try connection.nextFrame(&rest, streams: streams, encoderTable: &encoderTable) {
                switch frame {
                case .data(let stream, let streamID, let data, let received, let endsStream):
                    try receiveData(
                        data, received: received, stream: stream, streamID: streamID, endsStream: endsStream)
                case .headers(let stream, let streamID, let block, let endsStream):
                    try receiveHeaderBlock(block, stream: stream, streamID: streamID, endsStream: endsStream)
                case .reset(let stream, let errorCode):
                    try connection.floodGuard.countReset()
                    closeStream(stream, errorCode: errorCode)
                case .settings(let streamWindowsGrew):
                    if streamWindowsGrew && !blocked.isEmpty { connection.setNeedsFlush() }
                case .settingsAcknowledged:
                    settingsAcknowledged()
                case .windowOpened:
                    if !blocked.isEmpty { connection.setNeedsFlush() }
                case .goAway:
                    break  // the client opens no more streams; those it opened are still answered (we push none)
                }
            }
        } catch {
            throw connection.fail(error)
        }
    }

    /// Our SETTINGS were acknowledged in order (§6.5.3): once all are, the client keeps to the last limit.
    private func settingsAcknowledged() {
        guard connection.unacknowledgedSettings == 0 else { return }
        acknowledgedStreamLimit = advertisedStreamLimit
        unacknowledgedStreamLimitMaximum = 0
    }

    private func receiveData(
        _ data: UnsafeRawBufferPointer, received: Int, stream: Int, streamID: Int32, endsStream: Bool
    ) throws(HTTP2ConnectionError) {
        let entry = streams[stream]
        guard !entry.pointee.requestEnded else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.streamClosed, "DATA on stream \(streamID) after its END_STREAM")
        }
        try connection.receiveStreamData(received, on: entry, streamID: streamID, endsStream: endsStream)
        entry.pointee.bodyReceived += Int64(data.count)
        if entry.pointee.contentLength >= 0 && entry.pointee.bodyReceived > entry.pointee.contentLength {
            return resetMalformed(stream, "more DATA than its content-length")
        }
        if data.count > 0 { delegate.with({ $0.http2RequestData(stream: stream, bytes: data) }) }
        if endsStream { endRequest(stream) }
    }

    /// A whole header block: a new request, trailers, or one to decode and drop (refused, or on a stream we
    /// reset). Every block is decoded: the HPACK table must stay in step.
    private func receiveHeaderBlock(
        _ block: UnsafeRawBufferPointer, stream: Int?, streamID: Int32, endsStream: Bool
    ) throws(HTTP2ConnectionError) {
        if let stream { return try receiveTrailers(block, stream: stream, streamID: streamID, endsStream: endsStream) }
        guard streamID & 1 == 1 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "HEADERS on even stream \(streamID)")
        }
        guard streamID > connection.lastStreamID else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.streamClosed, "HEADERS on closed stream \(streamID)")
        }
        connection.lastStreamID = streamID
        guard let stream = openStream(streamID) else {
            try decode(block) { _, _ in }  // refused: decoded only to keep the HPACK table in step
            return
        }
        var check = HTTP2RequestFieldCheck()
        try decode(block) { name, value in
            check.check(name: name, value: value)
            // A malformed request reaches the delegate only up to its first bad field; then it is reset.
            guard check.problem == nil else { return }
            delegate.with({ $0.http2RequestHeader(stream: stream, name: name, value: value) })
        }
        if let problem = check.finish() { return resetMalformed(stream, problem) }
        streams[stream].pointee.contentLength = check.contentLength
        if endsStream { endRequest(stream) }
    }

    /// Trailers: they must end the request (§8.1).
    private func receiveTrailers(
        _ block: UnsafeRawBufferPointer, stream: Int, streamID: Int32, endsStream: Bool
    ) throws(HTTP2ConnectionError) {
        guard !streams[stream].pointee.requestEnded else {
            throw HTTP2ConnectionError(
                HTTP2ErrorCode.streamClosed, "HEADERS on stream \(streamID) after its END_STREAM")
        }
        guard endsStream else {
            throw HTTP2ConnectionError(
                HTTP2ErrorCode.protocolError, "trailers on stream \(streamID) without END_STREAM")
        }
        var check = HTTP2RequestFieldCheck(trailers: true)
        try decode(block) { name, value in check.check(name: name, value: value) }
        if let problem = check.finish() { return resetMalformed(stream, problem) }
        endRequest(stream)
    }

    /// Opens the client's new stream, or refuses it (REFUSED_STREAM) and returns nil.
    private func openStream(_ streamID: Int32) -> Int? {
        let refused =
            connection.goAwaySent && streamID > goAwayLastStreamID || streams.openCount >= streamLimit
            || freeCount == 0
        if refused {
            writeReset(streamID: streamID, errorCode: HTTP2ErrorCode.refusedStream)
            return nil
        }
        freeCount -= 1
        let stream = Int(freeNumbers[freeCount])
        let entry = streams[stream]
        entry.pointee.phase = .receiving
        entry.pointee.streamID = streamID
        entry.pointee.sendWindow = Int32(connection.peerInitialWindow)
        streams.bind(streamID, to: stream)
        guard delegate.with({ $0.http2StreamOpened(stream: stream, streamID: streamID) }) else {
            streams.unbind(streamID)
            entry.pointee = ServerStreamEntry()
            freeNumbers[freeCount] = Int32(stream)
            freeCount += 1
            writeReset(streamID: streamID, errorCode: HTTP2ErrorCode.refusedStream)
            return nil
        }
        return stream
    }

    private func decode(
        _ block: UnsafeRawBufferPointer, _ field: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Void
    ) throws(HTTP2ConnectionError) {
        do {
            try decoder.decode(block) { name, value in field(name, value) }
        } catch {
            throw HTTP2ConnectionError(HTTP2ErrorCode.compressionError, error.description)
        }
    }

    /// A malformed request (§8.1.1): a stream error, PROTOCOL_ERROR; the connection goes on.
    private func resetMalformed(_ stream: Int, _ problem: StaticString) {
        let streamID = streams[stream].pointee.streamID
        writeReset(streamID: streamID, errorCode: HTTP2ErrorCode.protocolError)
        delegate.with({ $0.http2MalformedRequest(streamID: streamID, problem: problem) })
        closeStream(stream, errorCode: HTTP2ErrorCode.protocolError)
    }

    private func endRequest(_ stream: Int) {
        let entry = streams[stream]
        if entry.pointee.contentLength >= 0 && entry.pointee.bodyReceived != entry.pointee.contentLength {
            return resetMalformed(stream, "less DATA than its content-length")
        }
        entry.pointee.requestEnded = true
        if entry.pointee.phase == .receiving {
            entry.pointee.phase = .awaitingResponse
            delegate.with({ $0.http2RequestEnded(stream: stream) })
        }
    }
}

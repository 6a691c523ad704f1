#if canImport(Glibc)
import Glibc
#endif

/// The server side of one HTTP/2 connection (RFC 9113) over an `HTTP2FrameSink`, shaped like
/// `HTTP2ClientSession` and reading through the same frame layer (`HTTP2FrameReader`, `HTTP2ControlFrames`,
/// `HTTP2FramePayload`, HPACK): requests arrive as delegate calls per header field, body bytes and end;
/// responses leave in `produce` (the transport's flush) with header blocks written by the owner through
/// `HPACKBlockWriter`. Per-stream state lives in fixed arrays sized at connection open; in the steady state a
/// request costs no allocation, no lock and no system call here.
///
/// Stream limit: the session counts a stream as open from its HEADERS until its response's END_STREAM is
/// written into the transport's staging buffer (or it is reset), and refuses (REFUSED_STREAM) a new one only
/// above every limit the client may still be keeping to: the last one it acknowledged and any sent since. A
/// client that keeps to what it was told is never refused.
///
/// Network input is handled as nghttp2 does: anything a client may not send ends the connection with GOAWAY
/// and the RFC's error code (`receive` throws), and floods (control frames owed to a peer that does not read,
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

    private let transportReference: Unmanaged<HTTP2FrameSink>
    private let delegateReference: Unmanaged<HTTP2ServerSessionDelegate>
    private let local: LocalSettings
    @exclusivity(unchecked) private var streams: ServerStreamTable
    /// Stream numbers not in use (a stack).
    private let freeNumbers: UnsafeMutablePointer<Int32>
    @exclusivity(unchecked) private var freeCount: Int
    @exclusivity(unchecked) private var responseQueue = StreamList()
    @exclusivity(unchecked) private var blocked = StreamList()
    @exclusivity(unchecked) private var encoderTable: HPACKEncoderTable
    @exclusivity(unchecked) private var decoder: HPACKDecoder
    @exclusivity(unchecked) private var control: HTTP2ControlFrames
    @exclusivity(unchecked) private var frames = HTTP2FrameReader()
    @exclusivity(unchecked) private var headerBlock = HTTP2HeaderBlockBuffer(capacity: maxRequestHeaderBlock)

    /// Bytes of the client preface still expected (24 at first); then its first frame must be SETTINGS.
    @exclusivity(unchecked) private var prefaceRemaining = HTTP2Limits.clientPreface.utf8CodeUnitCount
    @exclusivity(unchecked) private var clientSettingsSeen = false
    /// The highest stream id the client opened (streams at or below it that we do not track are closed).
    @exclusivity(unchecked) public private(set) var lastClientStreamID: Int32 = 0
    @exclusivity(unchecked) private var connectionSendWindow = HTTP2Limits.defaultWindowSize
    @exclusivity(unchecked) private var peerInitialWindow = HTTP2Limits.defaultWindowSize
    @exclusivity(unchecked) private var peerMaxFrameSize = HTTP2Limits.defaultMaxFrameSize
    @exclusivity(unchecked) private var connectionReceivedUnacknowledged = 0
    /// Our first SETTINGS were acknowledged: the client keeps to our initial stream window from now on.
    @exclusivity(unchecked) private var initialSettingsAcknowledged = false

    /// SETTINGS_MAX_CONCURRENT_STREAMS: the last value the client acknowledged (0 before its first ACK),
    /// the SETTINGS frames it has not acknowledged yet, the largest value among them and the last one sent.
    @exclusivity(unchecked) private var acknowledgedStreamLimit = 0
    @exclusivity(unchecked) private var unacknowledgedSettings = 0
    @exclusivity(unchecked) private var unacknowledgedStreamLimitMaximum = 0
    @exclusivity(unchecked) public private(set) var advertisedStreamLimit: Int

    @exclusivity(unchecked) public private(set) var goAwaySent = false
    @exclusivity(unchecked) public private(set) var goAwayReceived = false
    /// The last stream id of our GOAWAY: streams above it are refused.
    @exclusivity(unchecked) private var goAwayLastStreamID = Int32.max
    /// A connection error was found (and answered with GOAWAY): nothing more is read or written.
    @exclusivity(unchecked) public private(set) var failed = false
    @exclusivity(unchecked) public private(set) var lost = false
    /// Flood counters (see `LocalSettings`).
    @exclusivity(unchecked) private var resetCredit: Int
    @exclusivity(unchecked) private var emptyFrames = 0
    /// Streams to close when the connection ends (gathered first: the map cannot change while it is walked).
    private let closeScratch: UnsafeMutablePointer<Int32>

    /// `capacity` streams at most may be open at once (the most the owner will ever advertise).
    public init(transport: HTTP2FrameSink, delegate: HTTP2ServerSessionDelegate, capacity: Int, settings: LocalSettings = LocalSettings()) {
        precondition(capacity > 0 && settings.maxConcurrentStreams <= capacity)
        precondition(settings.initialWindowSize > 0 && settings.initialWindowSize <= HTTP2Limits.maxWindowSize)
        precondition(settings.connectionWindowSize >= HTTP2Limits.defaultWindowSize && settings.connectionWindowSize <= HTTP2Limits.maxWindowSize)
        transportReference = Unmanaged.passUnretained(transport)
        delegateReference = Unmanaged.passUnretained(delegate)
        local = settings
        streams = ServerStreamTable(capacity: capacity)
        freeNumbers = .allocate(capacity: capacity)
        for position in 0..<capacity { freeNumbers[position] = Int32(capacity - 1 - position) }
        freeCount = capacity
        encoderTable = HPACKEncoderTable(maximumSize: 4096)
        decoder = HPACKDecoder(maximumTableSize: settings.headerTableSize, maximumHeaderListSize: settings.maxHeaderListSize)
        control = HTTP2ControlFrames(sink: transport, maxQueued: settings.maxQueuedControlFrames)
        advertisedStreamLimit = settings.maxConcurrentStreams
        resetCredit = settings.maxResetsBeyondAnswers
        closeScratch = .allocate(capacity: capacity)
    }

    deinit {
        freeNumbers.deallocate()
        closeScratch.deallocate()
    }

    @inline(__always)
    private func withTransport<R>(_ body: (HTTP2FrameSink) -> R) -> R {
        transportReference._withUnsafeGuaranteedRef(body)
    }

    @inline(__always)
    private func withDelegate<R>(_ body: (HTTP2ServerSessionDelegate) -> R) -> R {
        delegateReference._withUnsafeGuaranteedRef(body)
    }

    /// Registers a response field that repeats (sent indexed once the client has it).
    public func registerRepeatedField(nameIndex: Int?, name: String, value: String) -> HPACKCachedField {
        encoderTable.register(nameIndex: nameIndex, name: name, value: value)
    }

    // MARK: - Starting, settings and stopping

    /// Writes the server preface: our SETTINGS (and the connection window when larger than the default).
    public func start() {
        control.writeSettings([
            (HTTP2SettingID.headerTableSize, UInt32(local.headerTableSize)),
            (HTTP2SettingID.maxConcurrentStreams, UInt32(local.maxConcurrentStreams)),
            (HTTP2SettingID.initialWindowSize, UInt32(local.initialWindowSize)),
            (HTTP2SettingID.maxFrameSize, UInt32(HTTP2Limits.defaultMaxFrameSize)),
            (HTTP2SettingID.maxHeaderListSize, UInt32(local.maxHeaderListSize)),
        ])
        settingsSent(streamLimit: local.maxConcurrentStreams)
        let windowIncrement = local.connectionWindowSize - HTTP2Limits.defaultWindowSize
        if windowIncrement > 0 { control.writeWindowUpdate(streamID: 0, increment: windowIncrement) }
        withTransport({ $0.setNeedsFlush() })
    }

    /// Announces a new SETTINGS_MAX_CONCURRENT_STREAMS (at most the capacity). Streams the client opens under
    /// the previous limit stay welcome until it acknowledges this one.
    public func advertise(maxConcurrentStreams limit: Int) {
        guard !failed && !lost else { return }
        precondition(limit >= 0 && limit <= streams.capacity, "a stream limit above the session's capacity")
        control.writeSetting(HTTP2SettingID.maxConcurrentStreams, UInt32(limit))
        settingsSent(streamLimit: limit)
        withTransport({ $0.setNeedsFlush() })
    }

    private func settingsSent(streamLimit: Int) {
        advertisedStreamLimit = streamLimit
        unacknowledgedSettings += 1
        unacknowledgedStreamLimitMaximum = max(unacknowledgedStreamLimitMaximum, streamLimit)
    }

    /// The most streams the client may have open now without breaking a limit it may still be keeping to.
    private var streamLimit: Int {
        unacknowledgedSettings > 0 ? max(acknowledgedStreamLimit, unacknowledgedStreamLimitMaximum) : acknowledgedStreamLimit
    }

    /// Graceful GOAWAY (NO_ERROR): streams above `lastStreamID` (by default the last one opened) are refused;
    /// the others are answered. `debug` is sent as GOAWAY's debug data.
    public func goAway(lastStreamID: Int32? = nil, errorCode: UInt32 = HTTP2ErrorCode.noError, debug: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)) {
        guard !goAwaySent && !failed && !lost else { return }
        goAwaySent = true
        let last = min(lastStreamID ?? lastClientStreamID, lastClientStreamID)
        goAwayLastStreamID = last
        control.writeGoAway(lastStreamID: last, errorCode: errorCode, debug: debug)
        withTransport({ $0.setNeedsFlush() })
    }

    // MARK: - State

    /// Streams open (HEADERS received, response END_STREAM not yet written).
    public var openStreamCount: Int { streams.openCount }
    /// True while responses or bodies wait for `produce`.
    public var wantsWrite: Bool { !responseQueue.isEmpty || (!blocked.isEmpty && connectionSendWindow > 0) }
    /// Nothing more will happen here: an error, or GOAWAY either way with every stream answered (the owner
    /// closes the connection once what was written has left).
    public var isFinished: Bool {
        failed || lost || ((goAwaySent || goAwayReceived) && streams.openCount == 0)
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
        guard !failed && !lost, stream >= 0 && stream < streams.capacity else { return false }
        let entry = streams[stream]
        guard entry.pointee.streamID == streamID,
            entry.pointee.phase == .receiving || entry.pointee.phase == .awaitingResponse
        else { return false }
        entry.pointee.phase = .queued
        responseQueue.append(stream, in: streams)
        withTransport({ $0.setNeedsFlush() })
        return true
    }

    /// Resets stream `stream` (if it is still `streamID`) with `errorCode`; its `http2StreamClosed` comes
    /// before this returns.
    public func reset(stream: Int, streamID: Int32, errorCode: UInt32) {
        guard !failed && !lost, stream >= 0 && stream < streams.capacity else { return }
        let entry = streams[stream]
        guard entry.pointee.phase != .idle && entry.pointee.streamID == streamID else { return }
        writeReset(streamID: streamID, errorCode: errorCode)
        closeStream(stream, errorCode: errorCode)
    }

    /// Writes queued responses and bodies whose windows opened. Called from the transport's flush; stops
    /// when the transport is backed up (the rest waits, and its streams stay open).
    public func produce() {
        guard !failed && !lost else { return }
        control.transportDrained()
        if !blocked.isEmpty && connectionSendWindow > 0 { resumeBlocked() }
        while !responseQueue.isEmpty && !withTransport({ $0.isBackedUp }) {
            guard let base = withTransport({ $0.reservePlaintext(HTTP2Limits.frameHeaderSize + Self.maxResponseHeaderBlock) }),
                let stream = responseQueue.popFirst(in: streams)
            else { break }
            writeResponse(stream, into: base)
        }
    }

    private func writeResponse(_ stream: Int, into base: UnsafeMutableRawPointer) {
        let entry = streams[stream]
        assert(entry.pointee.phase == .queued)
        entry.pointee.phase = .writing  // popped from the queue
        let body = withDelegate({ $0.http2ResponseBody(stream: stream) })
        var writer = HPACKBlockWriter(destination: base + HTTP2Limits.frameHeaderSize, capacity: Self.maxResponseHeaderBlock)
        encoderTable.beginBlock(&writer)
        withDelegate({ $0.http2WriteResponseHeaders(stream: stream, table: &encoderTable, writer: &writer) })
        let blockLength = writer.count
        precondition(blockLength <= Self.maxResponseHeaderBlock, "response header block too large")
        let flags = HTTP2FrameFlag.endHeaders | (body.count == 0 ? HTTP2FrameFlag.endStream : 0)
        HTTP2FrameHeader.write(to: base, length: blockLength, type: .headers, flags: flags, streamID: entry.pointee.streamID)
        withTransport({ $0.commitPlaintext(HTTP2Limits.frameHeaderSize + blockLength) })
        answered()
        if body.count == 0 {
            finishResponse(stream)
        } else {
            entry.pointee.phase = .blocked
            entry.pointee.bodySent = 0
            blocked.append(stream, in: streams)
            sendBody(stream, body)
        }
    }

    /// A response went out: the client may reset one more stream without being a flood.
    @inline(__always)
    private func answered() {
        if resetCredit < local.maxResetsBeyondAnswers { resetCredit += 1 }
        emptyFrames = 0
    }

    /// Sends as much of the body as the windows allow; the rest waits in the blocked list.
    private func sendBody(_ stream: Int, _ body: UnsafeRawBufferPointer) {
        let entry = streams[stream]
        var sent = Int(entry.pointee.bodySent)
        let largestChunk = min(peerMaxFrameSize, withTransport({ $0.plaintextCapacity }) - HTTP2Limits.frameHeaderSize)
        while sent < body.count {
            let chunk = min(body.count - sent, connectionSendWindow, Int(entry.pointee.sendWindow), largestChunk)
            if chunk <= 0 { break }
            guard let base = withTransport({ $0.reservePlaintext(HTTP2Limits.frameHeaderSize + chunk) }) else { break }
            let last = sent + chunk == body.count
            HTTP2FrameHeader.write(to: base, length: chunk, type: .data, flags: last ? HTTP2FrameFlag.endStream : 0, streamID: entry.pointee.streamID)
            (base + HTTP2Limits.frameHeaderSize).copyMemory(from: body.baseAddress! + sent, byteCount: chunk)
            withTransport({ $0.commitPlaintext(HTTP2Limits.frameHeaderSize + chunk) })
            sent += chunk
            connectionSendWindow -= chunk
            entry.pointee.sendWindow -= Int32(chunk)
        }
        entry.pointee.bodySent = Int32(sent)
        if sent == body.count { finishResponse(stream) }  // leaves the blocked list as it closes
    }

    private func resumeBlocked() {
        var cursor = blocked.head
        while cursor >= 0 && connectionSendWindow > 0 && !withTransport({ $0.isBackedUp }) {
            let stream = Int(cursor)
            cursor = streams[stream].pointee.next
            guard streams[stream].pointee.sendWindow > 0 else { continue }
            sendBody(stream, withDelegate({ $0.http2ResponseBody(stream: stream) }))
        }
    }

    /// The response's END_STREAM is written: the stream is over (if the request was still coming, the client
    /// is told to stop sending it: RST_STREAM NO_ERROR, §8.1).
    private func finishResponse(_ stream: Int) {
        let entry = streams[stream]
        if !entry.pointee.requestEnded { writeReset(streamID: entry.pointee.streamID, errorCode: HTTP2ErrorCode.noError) }
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
        withDelegate({ $0.http2StreamClosed(stream: stream, errorCode: errorCode) })
    }

    private func writeReset(streamID: Int32, errorCode: UInt32) {
        control.writeReset(streamID: streamID, errorCode: errorCode)
        withDelegate({ $0.http2ResetSent(streamID: streamID, errorCode: errorCode) })
    }

    /// The connection is gone: every open stream ends now through `http2StreamClosed` with `errorCode`.
    public func connectionLost(errorCode: UInt32 = HTTP2ErrorCode.cancel) {
        guard !lost else { return }
        lost = true
        var count = 0
        streams.forEachStream { stream, _ in
            closeScratch[count] = Int32(stream)
            count += 1
        }
        for index in 0..<count { closeStream(Int(closeScratch[index]), errorCode: errorCode) }
    }

    // MARK: - Receiving

    /// Processes decrypted bytes from the client (any split). On a connection error the session writes
    /// GOAWAY with its code, stops, and throws; the owner then closes the connection (after the GOAWAY left).
    public func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2ConnectionError) {
        guard !failed && !lost else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "the session already failed") }
        do {
            var rest = bytes
            if prefaceRemaining > 0 { rest = try receivePreface(bytes) }
            try frames.read(rest) { (frame) throws(HTTP2ConnectionError) in try processFrame(frame) }
        } catch {
            failed = true
            goAwaySent = true
            control.writeGoAway(lastStreamID: lastClientStreamID, errorCode: error.code, debug: error.message)
            withTransport({ $0.setNeedsFlush() })
            throw error
        }
    }

    /// Checks the client preface (§3.4) across reads; returns what follows it.
    private func receivePreface(_ bytes: UnsafeRawBufferPointer) throws(HTTP2ConnectionError) -> UnsafeRawBufferPointer {
        let preface = HTTP2Limits.clientPreface
        let offset = preface.utf8CodeUnitCount - prefaceRemaining
        let take = min(prefaceRemaining, bytes.count)
        guard take > 0 else { return bytes }
        guard memcmp(bytes.baseAddress!, preface.utf8Start + offset, take) == 0 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "not the HTTP/2 client preface")
        }
        prefaceRemaining -= take
        return UnsafeRawBufferPointer(rebasing: bytes[take...])
    }

    private func processFrame(_ frame: UnsafeRawPointer) throws(HTTP2ConnectionError) {
        let (length, typeByte, flags, streamID) = HTTP2FrameHeader.read(frame)
        let payload = UnsafeRawBufferPointer(start: frame + HTTP2Limits.frameHeaderSize, count: length)
        let type = HTTP2FrameType(rawValue: typeByte)
        if !clientSettingsSeen {
            // The preface's second half is a SETTINGS frame (§3.4).
            guard type == .settings && flags & HTTP2FrameFlag.ack == 0 else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "the client preface is not followed by SETTINGS")
            }
            clientSettingsSeen = true
        }
        if headerBlock.isOpen && (type != .continuation || streamID != headerBlock.stream) {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "expected CONTINUATION for stream \(headerBlock.stream)")
        }
        switch type {
        case .data: try receiveData(payload, flags: flags, streamID: streamID)
        case .headers: try receiveHeaders(payload, flags: flags, streamID: streamID)
        case .continuation: try receiveContinuation(payload, flags: flags, streamID: streamID)
        case .rstStream: try receiveReset(payload, streamID: streamID)
        case .settings: try receiveSettings(payload, flags: flags, streamID: streamID)
        case .ping: try receivePing(payload, flags: flags, streamID: streamID)
        case .goAway: try receiveGoAway(payload, streamID: streamID)
        case .windowUpdate: try receiveWindowUpdate(payload, streamID: streamID)
        case .priority:
            guard streamID != 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "PRIORITY on stream 0") }
            guard length == 5 else { throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "PRIORITY of \(length) bytes") }
        case .pushPromise:
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "PUSH_PROMISE from a client")
        case nil:
            try countEmptyFrame()  // unknown types are ignored (§5.5), but not without end
        }
        try control.checkBound()
    }

    @inline(__always)
    private func countEmptyFrame() throws(HTTP2ConnectionError) {
        emptyFrames += 1
        if emptyFrames > local.maxEmptyFrames {
            throw HTTP2ConnectionError(HTTP2ErrorCode.enhanceYourCalm, "over \(local.maxEmptyFrames) frames in a row that carry nothing")
        }
    }

    /// A frame on a stream we do not track: one the client never opened is a PROTOCOL_ERROR (§5.1: idle).
    private func checkNotIdle(_ streamID: Int32, _ what: StaticString) throws(HTTP2ConnectionError) {
        if streamID & 1 == 0 || streamID > lastClientStreamID {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "\(what) on idle stream \(streamID)")
        }
    }

    private func receiveData(_ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32) throws(HTTP2ConnectionError) {
        guard streamID != 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "DATA on stream 0") }
        // Flow control counts the whole payload, padding included (§6.9.1), on closed streams too.
        let connectionIncrement = try HTTP2ReceiveWindow.receive(
            payload.count, window: local.connectionWindowSize, unacknowledged: &connectionReceivedUnacknowledged, "the connection")
        if connectionIncrement > 0 { control.writeWindowUpdate(streamID: 0, increment: connectionIncrement) }
        let data = try HTTP2FramePayload.unpadded(payload, flags: flags, priorityBytes: 0)
        let endsStream = flags & HTTP2FrameFlag.endStream != 0
        if payload.count == 0 && !endsStream { try countEmptyFrame() }
        guard let stream = streams.request(for: streamID) else {
            // A stream we reset or refused: its DATA may still be on the way (ignored, as nghttp2 does).
            try checkNotIdle(streamID, "DATA")
            return
        }
        let entry = streams[stream]
        guard !entry.pointee.requestEnded else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.streamClosed, "DATA on stream \(streamID) after its END_STREAM")
        }
        // Until our SETTINGS are acknowledged the client may still count from the default window.
        let streamWindow = initialSettingsAcknowledged ? local.initialWindowSize : max(local.initialWindowSize, HTTP2Limits.defaultWindowSize)
        var streamUnacknowledged = Int(entry.pointee.receivedUnacknowledged)
        let streamIncrement = try HTTP2ReceiveWindow.receive(
            payload.count, window: streamWindow, unacknowledged: &streamUnacknowledged, sendsUpdate: !endsStream, "stream \(streamID)")
        entry.pointee.receivedUnacknowledged = Int32(streamUnacknowledged)
        if streamIncrement > 0 { control.writeWindowUpdate(streamID: streamID, increment: streamIncrement) }
        entry.pointee.bodyReceived += Int64(data.count)
        if entry.pointee.contentLength >= 0 && entry.pointee.bodyReceived > entry.pointee.contentLength {
            return resetMalformed(stream, "more DATA than its content-length")
        }
        if data.count > 0 { withDelegate({ $0.http2RequestData(stream: stream, bytes: data) }) }
        if endsStream { endRequest(stream) }
    }

    private func receiveHeaders(_ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32) throws(HTTP2ConnectionError) {
        guard streamID != 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "HEADERS on stream 0") }
        let fragment = try HTTP2FramePayload.unpadded(payload, flags: flags, priorityBytes: flags & HTTP2FrameFlag.priority != 0 ? 5 : 0)
        if flags & HTTP2FrameFlag.priority != 0 {
            let dependency = Int32(bitPattern: HTTP2FrameHeader.readUInt32(payload.baseAddress! + (flags & HTTP2FrameFlag.padded != 0 ? 1 : 0)) & 0x7fff_ffff)
            guard dependency != streamID else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "stream \(streamID) depends on itself") }
        }
        let endsStream = flags & HTTP2FrameFlag.endStream != 0
        if flags & HTTP2FrameFlag.endHeaders != 0 {
            try headerBlockComplete(fragment, streamID: streamID, endsStream: endsStream)
            return
        }
        if fragment.isEmpty { try countEmptyFrame() }
        try headerBlock.begin(stream: streamID, endsStream: endsStream, fragment: fragment)
    }

    private func receiveContinuation(_ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32) throws(HTTP2ConnectionError) {
        guard headerBlock.isOpen else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "CONTINUATION without HEADERS") }
        try headerBlock.append(payload)
        guard flags & HTTP2FrameFlag.endHeaders != 0 else {
            if payload.isEmpty { try countEmptyFrame() }
            return
        }
        let stream = headerBlock.stream
        let endsStream = headerBlock.endsStream
        try headerBlockComplete(headerBlock.finish(), streamID: stream, endsStream: endsStream)
    }

    /// A whole header block: a new request, trailers, or one to decode and drop (refused, or on a stream we
    /// reset). Every block is decoded: the HPACK table must stay in step.
    private func headerBlockComplete(_ block: UnsafeRawBufferPointer, streamID: Int32, endsStream: Bool) throws(HTTP2ConnectionError) {
        if let stream = streams.request(for: streamID) {
            // Trailers: they must end the request (§8.1).
            let entry = streams[stream]
            guard !entry.pointee.requestEnded else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.streamClosed, "HEADERS on stream \(streamID) after its END_STREAM")
            }
            guard endsStream else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "trailers on stream \(streamID) without END_STREAM") }
            var check = HTTP2RequestFieldCheck(trailers: true)
            try decode(block) { name, value in check.check(name: name, value: value) }
            if let problem = check.finish() { return resetMalformed(stream, problem) }
            endRequest(stream)
            return
        }
        guard streamID & 1 == 1 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "HEADERS on even stream \(streamID)") }
        guard streamID > lastClientStreamID else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.streamClosed, "HEADERS on closed stream \(streamID)")
        }
        lastClientStreamID = streamID
        guard let stream = openStream(streamID) else {
            try decode(block) { _, _ in }  // refused: decoded only to keep the HPACK table in step
            return
        }
        var check = HTTP2RequestFieldCheck()
        try decode(block) { name, value in
            check.check(name: name, value: value)
            // A malformed request reaches the delegate only up to its first bad field; then it is reset.
            if check.problem == nil { withDelegate({ $0.http2RequestHeader(stream: stream, name: name, value: value) }) }
        }
        if let problem = check.finish() { return resetMalformed(stream, problem) }
        streams[stream].pointee.contentLength = check.contentLength
        if endsStream { endRequest(stream) }
    }

    /// Opens the client's new stream, or refuses it (REFUSED_STREAM) and returns nil.
    private func openStream(_ streamID: Int32) -> Int? {
        let refused = goAwaySent && streamID > goAwayLastStreamID || streams.openCount >= streamLimit || freeCount == 0
        if refused {
            writeReset(streamID: streamID, errorCode: HTTP2ErrorCode.refusedStream)
            return nil
        }
        freeCount -= 1
        let stream = Int(freeNumbers[freeCount])
        let entry = streams[stream]
        entry.pointee.phase = .receiving
        entry.pointee.streamID = streamID
        entry.pointee.sendWindow = Int32(peerInitialWindow)
        streams.bind(streamID, to: stream)
        guard withDelegate({ $0.http2StreamOpened(stream: stream, streamID: streamID) }) else {
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
        withDelegate({ $0.http2MalformedRequest(streamID: streamID, problem: problem) })
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
            withDelegate({ $0.http2RequestEnded(stream: stream) })
        }
    }

    private func receiveReset(_ payload: UnsafeRawBufferPointer, streamID: Int32) throws(HTTP2ConnectionError) {
        guard streamID != 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "RST_STREAM on stream 0") }
        guard payload.count == 4 else { throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "RST_STREAM of \(payload.count) bytes") }
        guard let stream = streams.request(for: streamID) else {
            try checkNotIdle(streamID, "RST_STREAM")
            return
        }
        resetCredit -= 1
        guard resetCredit >= 0 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.enhanceYourCalm, "over \(local.maxResetsBeyondAnswers) streams reset beyond those answered")
        }
        closeStream(stream, errorCode: HTTP2FrameHeader.readUInt32(payload.baseAddress!))
    }

    private func receiveSettings(_ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32) throws(HTTP2ConnectionError) {
        if flags & HTTP2FrameFlag.ack != 0 {
            guard streamID == 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "SETTINGS on stream \(streamID)") }
            guard payload.isEmpty else { throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "SETTINGS ACK with a payload") }
            settingsAcknowledged()
            return
        }
        try HTTP2FramePayload.forEachSetting(payload, flags: flags, streamID: streamID) { (identifier, value) throws(HTTP2ConnectionError) in
            switch identifier {
            case HTTP2SettingID.headerTableSize:
                encoderTable.setMaximumSize(Int(min(value, 4096)))
            case HTTP2SettingID.initialWindowSize:
                try applyInitialWindow(Int(value))
            case HTTP2SettingID.maxFrameSize:
                peerMaxFrameSize = Int(value)
            default:
                break  // ENABLE_PUSH (we never push), MAX_CONCURRENT_STREAMS (we open none), advisory or unknown
            }
        }
        control.writeSettingsAck()
    }

    /// ACKs come in the order our SETTINGS went (§6.5.3).
    private func settingsAcknowledged() {
        guard unacknowledgedSettings > 0 else { return }  // an ACK of nothing: ignored, as nghttp2 does
        unacknowledgedSettings -= 1
        initialSettingsAcknowledged = true
        if unacknowledgedSettings == 0 {
            acknowledgedStreamLimit = advertisedStreamLimit
            unacknowledgedStreamLimitMaximum = 0
        }
    }

    /// A new SETTINGS_INITIAL_WINDOW_SIZE moves every open stream's window by the difference (§6.9.2).
    private func applyInitialWindow(_ value: Int) throws(HTTP2ConnectionError) {
        let delta = value - peerInitialWindow
        peerInitialWindow = value
        try streams.shiftSendWindows(by: delta)
        if delta > 0 && !blocked.isEmpty { withTransport({ $0.setNeedsFlush() }) }
    }

    private func receivePing(_ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32) throws(HTTP2ConnectionError) {
        guard try !HTTP2FramePayload.isPingAcknowledgement(payload, flags: flags, streamID: streamID) else { return }
        control.writePing(ack: true, opaque: payload.baseAddress!)
    }

    private func receiveGoAway(_ payload: UnsafeRawBufferPointer, streamID: Int32) throws(HTTP2ConnectionError) {
        _ = try HTTP2FramePayload.goAway(payload, streamID: streamID)
        // The client opens no more streams; those it opened are still answered (we push none, so its last
        // stream id concerns nothing of ours).
        goAwayReceived = true
    }

    private func receiveWindowUpdate(_ payload: UnsafeRawBufferPointer, streamID: Int32) throws(HTTP2ConnectionError) {
        let increment = try HTTP2FramePayload.windowIncrement(payload, streamID: streamID)
        if streamID == 0 {
            try HTTP2SendWindow.widenConnection(&connectionSendWindow, by: increment)
        } else if let stream = streams.request(for: streamID) {
            try streams.widenSendWindow(stream, by: increment, streamID: streamID)
        } else {
            try checkNotIdle(streamID, "WINDOW_UPDATE")
            return
        }
        if !blocked.isEmpty { withTransport({ $0.setNeedsFlush() }) }
    }
}

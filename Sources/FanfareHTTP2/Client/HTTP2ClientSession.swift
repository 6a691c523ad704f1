#if canImport(Glibc)
import Glibc
#endif

/// What a client session reports to its owner (subclass it and override every method). Every call happens
/// on the loop thread, from inside `HTTP2ClientSession.receive`, `produce` or `cancel`.
///
/// A class rather than a protocol: the session calls it several times per request through an unretained
/// reference, and a protocol existential cannot be held that way (each call through one cost a
/// retain/release pair). Requests are identified by the owner's own small integers (its slot indices,
/// `0..<capacity`).
open class HTTP2ClientSessionDelegate {
    public init() {}

    /// Writes the request's header fields into its HEADERS block (a pending table-size update is already in).
    open func http2WriteRequestHeaders(request: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter) {
        fatalError("\(Self.self) must override http2WriteRequestHeaders")
    }

    /// The request body; it must stay unchanged until the stream closes.
    open func http2RequestBody(request: Int) -> UnsafeRawBufferPointer {
        fatalError("\(Self.self) must override http2RequestBody")
    }

    /// One field of a response header block (informational and trailer blocks included).
    open func http2ResponseHeader(request: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {}

    open func http2ResponseData(request: Int, bytes: UnsafeRawBufferPointer) {}

    /// The stream is over and the request number is free again. `errorCode` is NO_ERROR after a complete
    /// response. `processed` is false when the server certainly did not act on the request: its HEADERS
    /// were never written, it was refused (REFUSED_STREAM), or it was above the last stream id of a GOAWAY.
    /// It is true when the server answered, or when the request went out and may have been acted on
    /// (reset with another code, or the connection ended before an answer: see `connectionLost`).
    open func http2StreamClosed(request: Int, errorCode: UInt32, processed: Bool) {
        fatalError("\(Self.self) must override http2StreamClosed")
    }

    /// The server's SETTINGS arrived (and were acknowledged); nil means no stream limit.
    open func http2RemoteSettingsChanged(maxConcurrentStreams: Int?) {}

    /// A GOAWAY arrived; streams above `lastStreamID` are closed unprocessed right after this call.
    open func http2GoAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: UnsafeRawBufferPointer) {}
}

/// The client side of one HTTP/2 connection (RFC 9113) over a `SecureTransport`, specialised for sending
/// many small requests: frames are written straight into the transport's plaintext buffer, header blocks
/// come from the owner through `HPACKBlockWriter` (so repeated fields go out as one-byte table indexes and
/// the token is Huffman-coded from its bytes), and per-stream state lives in fixed arrays. In the steady
/// state a request costs no allocation, no lock and no system call here.
///
/// Requests queue with `submit` and leave in `produce` (the transport's flush), in order, while the
/// transport is not backed up and the server's stream limit and flow-control windows allow; a body the
/// windows cannot take yet waits in a blocked list for WINDOW_UPDATE.
public final class HTTP2ClientSession {
    /// What this side announces.
    public struct LocalSettings: Sendable {
        /// Each response stream may carry this much before we must open its window (responses are small).
        public var initialWindowSize = 1 << 20
        /// The connection's receive window, opened right after the preface.
        public var connectionWindowSize = 1 << 24
        public var maxConcurrentStreams = 100
        /// HPACK table size for the server's encoder (RFC 7541 default).
        public var headerTableSize = 4096
        public var maxHeaderListSize = 64 * 1024
        /// Only `:status` is reported from responses: other literal fields the server does not index are
        /// stepped over without Huffman-decoding them (an APNs client needs nothing else).
        public var reportsOnlyStatus = false
        /// Frames we owe the peer (PING and SETTINGS acknowledgements, WINDOW_UPDATE, RST_STREAM) written
        /// while the transport is backed up, i.e. the peer is not reading what we send. Beyond this the
        /// peer is flooding us (it makes us queue without bound) and the connection ends with
        /// ENHANCE_YOUR_CALM, as nghttp2 does (its default limit is 1000 too).
        public var maxQueuedControlFrames = 1000
        public init() {}
    }

    /// Upper bound of one request header block; the owner's fields must fit (checked).
    public static let maxRequestHeaderBlock = 2048
    /// Header blocks split over CONTINUATION frames are gathered up to this size.
    static let maxResponseHeaderBlock = 64 * 1024

    // Held without reference counting (a retain/release pair per call was ~20% of the client's CPU): the
    // owner keeps both alive for the session's whole life.
    private let transportReference: Unmanaged<HTTP2FrameSink>
    private let delegateReference: Unmanaged<HTTP2ClientSessionDelegate>
    private let local: LocalSettings
    @exclusivity(unchecked) private var streams: ClientStreamTable
    @exclusivity(unchecked) private var sendQueue = StreamList()
    @exclusivity(unchecked) private var blocked = StreamList()
    @exclusivity(unchecked) private var encoderTable: HPACKEncoderTable
    @exclusivity(unchecked) private var decoder: HPACKDecoder

    /// 64-bit: past the last odd id (2^31-1) it steps beyond Int32 instead of overflowing; no stream
    /// opens there (`acceptsRequests` turns false first, and the owner drains and rotates).
    @exclusivity(unchecked) private var nextStreamID = 1
    /// The highest stream id opened so far.
    @exclusivity(unchecked) public private(set) var lastStreamID: Int32 = 0
    @exclusivity(unchecked) private var connectionSendWindow = HTTP2Limits.defaultWindowSize
    @exclusivity(unchecked) private var peerInitialWindow = HTTP2Limits.defaultWindowSize
    @exclusivity(unchecked) private var peerMaxFrameSize = HTTP2Limits.defaultMaxFrameSize
    @exclusivity(unchecked) public private(set) var peerMaxConcurrentStreams: Int?
    @exclusivity(unchecked) public private(set) var goAwayReceived = false
    @exclusivity(unchecked) private var goAwaySent = false
    /// A connection error was found (and answered with GOAWAY): nothing more is read or sent.
    @exclusivity(unchecked) public private(set) var failed = false
    /// The connection is gone (`connectionLost`): every request was reported and nothing more happens.
    @exclusivity(unchecked) public private(set) var lost = false
    @exclusivity(unchecked) private var connectionReceivedUnacknowledged = 0
    /// Our SETTINGS were acknowledged: the peer must keep to our initial stream window from now on
    /// (before that it may still use the default of 65,535 bytes).
    @exclusivity(unchecked) private var localSettingsAcknowledged = false
    /// SETTINGS ACKs, PING ACKs, WINDOW_UPDATEs, RST_STREAMs and GOAWAY, with the cap on those owed to a
    /// peer that does not read (`maxQueuedControlFrames`).
    @exclusivity(unchecked) private var control: HTTP2ControlFrames
    @exclusivity(unchecked) private var frames = HTTP2FrameReader()
    /// A header block continued in CONTINUATION frames.
    @exclusivity(unchecked) private var headerBlock = HTTP2HeaderBlockBuffer(capacity: maxResponseHeaderBlock)
    /// Requests to close after a GOAWAY (gathered first: the stream map cannot change while it is walked).
    private let goAwayScratch: UnsafeMutablePointer<Int32>

    /// `capacity` requests at most (numbered `0..<capacity`) may be queued or open at once.
    /// `firstStreamID` (odd) is for tests that need to reach the end of the stream id space quickly.
    public init(
        transport: HTTP2FrameSink, delegate: HTTP2ClientSessionDelegate, capacity: Int, settings: LocalSettings = LocalSettings(),
        firstStreamID: Int32 = 1
    ) {
        precondition(settings.initialWindowSize > 0 && settings.initialWindowSize <= HTTP2Limits.maxWindowSize)
        precondition(settings.connectionWindowSize >= HTTP2Limits.defaultWindowSize && settings.connectionWindowSize <= HTTP2Limits.maxWindowSize)
        precondition(settings.maxQueuedControlFrames > 0)
        precondition(firstStreamID > 0 && firstStreamID & 1 == 1, "client stream ids are odd")
        nextStreamID = Int(firstStreamID)
        transportReference = Unmanaged.passUnretained(transport)
        delegateReference = Unmanaged.passUnretained(delegate)
        self.local = settings
        streams = ClientStreamTable(capacity: capacity)
        encoderTable = HPACKEncoderTable(maximumSize: 4096)
        decoder = HPACKDecoder(maximumTableSize: settings.headerTableSize, maximumHeaderListSize: settings.maxHeaderListSize)
        control = HTTP2ControlFrames(sink: transport, maxQueued: settings.maxQueuedControlFrames)
        goAwayScratch = .allocate(capacity: capacity)
    }

    @inline(__always)
    private func withTransport<R>(_ body: (HTTP2FrameSink) -> R) -> R {
        transportReference._withUnsafeGuaranteedRef(body)
    }

    @inline(__always)
    private func withDelegate<R>(_ body: (HTTP2ClientSessionDelegate) -> R) -> R {
        delegateReference._withUnsafeGuaranteedRef(body)
    }

    deinit {
        goAwayScratch.deallocate()
    }

    /// Registers a header field that repeats on every request (sent indexed once the server has it).
    public func registerRepeatedField(nameIndex: Int?, name: String, value: String) -> HPACKCachedField {
        encoderTable.register(nameIndex: nameIndex, name: name, value: value)
    }

    /// Changes a repeated field's value (a new provider token); the next request inserts the new value.
    public func updateRepeatedField(_ field: HPACKCachedField, value: String) {
        encoderTable.update(field, value: value)
    }

    // MARK: - Starting and stopping

    /// Writes the connection preface: the magic, our SETTINGS and (when larger than the default) the
    /// connection window.
    public func start() {
        let preface = HTTP2Limits.clientPreface
        let settings: [(UInt16, UInt32)] = [
            (HTTP2SettingID.enablePush, 0),
            (HTTP2SettingID.maxConcurrentStreams, UInt32(local.maxConcurrentStreams)),
            (HTTP2SettingID.initialWindowSize, UInt32(local.initialWindowSize)),
            (HTTP2SettingID.headerTableSize, UInt32(local.headerTableSize)),
            (HTTP2SettingID.maxHeaderListSize, UInt32(local.maxHeaderListSize)),
        ]
        // The connection window opens by the rest of its size; an increment of 0 is a PROTOCOL_ERROR (§6.9).
        let windowIncrement = local.connectionWindowSize - HTTP2Limits.defaultWindowSize
        let total = preface.utf8CodeUnitCount + 9 + 6 * settings.count + (windowIncrement > 0 ? 13 : 0)
        guard let base = withTransport({ $0.reservePlaintext(total) }) else { return }
        base.copyMemory(from: preface.utf8Start, byteCount: preface.utf8CodeUnitCount)
        var cursor = base + preface.utf8CodeUnitCount
        HTTP2FrameHeader.write(to: cursor, length: 6 * settings.count, type: .settings, flags: 0, streamID: 0)
        cursor += 9
        for (identifier, value) in settings {
            HTTP2FrameHeader.writeUInt16(identifier, to: cursor)
            HTTP2FrameHeader.writeUInt32(value, to: cursor + 2)
            cursor += 6
        }
        if windowIncrement > 0 {
            HTTP2FrameHeader.write(to: cursor, length: 4, type: .windowUpdate, flags: 0, streamID: 0)
            HTTP2FrameHeader.writeUInt32(UInt32(windowIncrement), to: cursor + 9)
            cursor += 13
        }
        assert(cursor - base == total)
        withTransport({ $0.commitPlaintext(total) })
    }

    /// Says goodbye with GOAWAY (no stream of the server's was processed: last stream id 0).
    public func terminate(errorCode: UInt32 = HTTP2ErrorCode.noError, debug: String = "") {
        guard !goAwaySent else { return }
        writeGoAway(errorCode: errorCode, debug: debug)
    }

    /// Sends a PING (keep-alive); any frame that arrives afterwards shows the connection is alive.
    public func sendPing() {
        guard !failed else { return }
        control.writePing(ack: false, opaque: nil)
    }

    // MARK: - Requests

    /// Streams that are open (HEADERS sent, not yet closed).
    public var openStreamCount: Int { streams.openCount }
    /// Requests waiting for `produce`.
    public var queuedCount: Int { sendQueue.count }
    /// True while something is waiting to be written that the windows allow.
    public var wantsWrite: Bool { !sendQueue.isEmpty || (!blocked.isEmpty && connectionSendWindow > 0) }
    /// False once no new stream can be opened here (GOAWAY either way, an error, or stream ids used up).
    public var acceptsRequests: Bool {
        !goAwayReceived && !goAwaySent && !failed && !lost && nextStreamID + 2 * sendQueue.count <= Int(HTTP2Limits.maxStreamID)
    }

    /// Queues request `request`; it leaves in the next `produce`. Returns false (nothing queued) when the
    /// session no longer accepts requests. `reportsHeaders` asks for every field of its response even when
    /// the session reports only `:status` (`LocalSettings.reportsOnlyStatus`).
    public func submit(request: Int, reportsHeaders: Bool = false) -> Bool {
        guard acceptsRequests else { return false }
        let entry = streams[request]
        precondition(entry.pointee.phase == .idle, "request \(request) is already in use")
        entry.pointee.phase = .queued
        entry.pointee.reportsHeaders = reportsHeaders
        sendQueue.append(request, in: streams)
        withTransport({ $0.setNeedsFlush() })
        return true
    }

    /// Gives up on a request: a queued one leaves the queue, a sent one is reset with `errorCode`. Its
    /// `http2StreamClosed` (processed: false) comes before this returns.
    public func cancel(request: Int, errorCode: UInt32 = HTTP2ErrorCode.cancel) {
        let entry = streams[request]
        switch entry.pointee.phase {
        case .idle:
            return
        case .queued:
            sendQueue.remove(request, in: streams)
            entry.pointee = ClientStreamEntry()
            withDelegate({ $0.http2StreamClosed(request: request, errorCode: errorCode, processed: false) })
        case .blocked, .open:
            let streamID = entry.pointee.streamID
            control.writeReset(streamID: streamID, errorCode: errorCode)
            closeStream(request, errorCode: errorCode, processed: false)
        }
    }

    /// Writes what is waiting: bodies whose windows opened, then new requests. Called from the transport's
    /// flush (`transportProduce`); stops when the transport is backed up.
    public func produce() {
        guard !failed && !lost else { return }
        control.transportDrained()
        if !blocked.isEmpty && connectionSendWindow > 0 { resumeBlocked() }
        var opened = false
        while !sendQueue.isEmpty && connectionSendWindow > 0 && !withTransport({ $0.isBackedUp }) {
            if let limit = peerMaxConcurrentStreams, streams.openCount >= limit { break }
            guard nextStreamID <= Int(HTTP2Limits.maxStreamID) else { break }
            // Room first: a request leaves the queue only once its HEADERS are certainly written, so "never
            // written" (provably unprocessed) and "open" never disagree.
            guard let base = withTransport({ $0.reservePlaintext(HTTP2Limits.frameHeaderSize + Self.maxRequestHeaderBlock) }),
                let request = sendQueue.popFirst(in: streams)
            else { break }
            writeRequestHeaders(request, into: base)
            opened = true
        }
        // The batch's bodies follow all of its HEADERS (as nghttp2 orders them too): every stream of the batch
        // is open at the server before the first of them completes, so a server that lowers its stream limit
        // on an answer (APNs may drop it to 1 after an error) does not refuse the rest of the batch.
        if opened { resumeBlocked() }
    }

    /// Opens the request's stream with its HEADERS; its body waits in the blocked list for `resumeBlocked`.
    private func writeRequestHeaders(_ request: Int, into base: UnsafeMutableRawPointer) {
        let entry = streams[request]
        assert(entry.pointee.phase == .queued)
        let streamID = Int32(truncatingIfNeeded: nextStreamID)
        nextStreamID += 2
        lastStreamID = streamID
        entry.pointee.streamID = streamID
        entry.pointee.sendWindow = Int32(peerInitialWindow)
        entry.pointee.payloadSent = 0
        entry.pointee.phase = .open
        streams.bind(streamID, to: request)

        let body = withDelegate({ $0.http2RequestBody(request: request) })
        var writer = HPACKBlockWriter(destination: base + HTTP2Limits.frameHeaderSize, capacity: Self.maxRequestHeaderBlock)
        encoderTable.beginBlock(&writer)
        withDelegate({ $0.http2WriteRequestHeaders(request: request, table: &encoderTable, writer: &writer) })
        let blockLength = writer.count
        precondition(blockLength <= min(peerMaxFrameSize, Self.maxRequestHeaderBlock), "request header block too large")
        let flags = HTTP2FrameFlag.endHeaders | (body.count == 0 ? HTTP2FrameFlag.endStream : 0)
        HTTP2FrameHeader.write(to: base, length: blockLength, type: .headers, flags: flags, streamID: streamID)
        withTransport({ $0.commitPlaintext(HTTP2Limits.frameHeaderSize + blockLength) })
        if body.count > 0 {
            entry.pointee.phase = .blocked
            blocked.append(request, in: streams)
        }
    }

    /// Sends as much of the body as the windows allow; parks the rest in the blocked list.
    private func sendBody(_ request: Int, _ body: UnsafeRawBufferPointer) {
        let entry = streams[request]
        var sent = Int(entry.pointee.payloadSent)
        let largestChunk = min(peerMaxFrameSize, withTransport({ $0.plaintextCapacity }) - HTTP2Limits.frameHeaderSize)
        while sent < body.count {
            let chunk = min(body.count - sent, connectionSendWindow, Int(entry.pointee.sendWindow), largestChunk)
            if chunk <= 0 {
                if entry.pointee.phase != .blocked {
                    entry.pointee.phase = .blocked
                    blocked.append(request, in: streams)
                }
                entry.pointee.payloadSent = Int32(sent)
                return
            }
            guard let base = withTransport({ $0.reservePlaintext(HTTP2Limits.frameHeaderSize + chunk) }) else { return }
            let last = sent + chunk == body.count
            HTTP2FrameHeader.write(
                to: base, length: chunk, type: .data, flags: last ? HTTP2FrameFlag.endStream : 0, streamID: entry.pointee.streamID)
            (base + HTTP2Limits.frameHeaderSize).copyMemory(from: body.baseAddress! + sent, byteCount: chunk)
            withTransport({ $0.commitPlaintext(HTTP2Limits.frameHeaderSize + chunk) })
            sent += chunk
            connectionSendWindow -= chunk
            entry.pointee.sendWindow -= Int32(chunk)
        }
        entry.pointee.payloadSent = Int32(sent)
        if entry.pointee.phase == .blocked {
            blocked.remove(request, in: streams)
            entry.pointee.phase = .open
        }
    }

    private func resumeBlocked() {
        var cursor = blocked.head
        while cursor >= 0 && connectionSendWindow > 0 && !withTransport({ $0.isBackedUp }) {
            let request = Int(cursor)
            cursor = streams[request].pointee.next
            guard streams[request].pointee.sendWindow > 0 else { continue }
            sendBody(request, withDelegate({ $0.http2RequestBody(request: request) }))
        }
    }

    /// The connection ended (closed, failed or broken): every request still here ends now, through
    /// `http2StreamClosed`. Queued requests were never written (processed: false); requests whose HEADERS
    /// went out got no answer and may have been acted on (processed: true, `errorCode`).
    public func connectionLost(errorCode: UInt32 = HTTP2ErrorCode.cancel) {
        guard !lost else { return }
        lost = true
        var count = 0
        streams.forEachStream { request, _ in
            goAwayScratch[count] = Int32(request)
            count += 1
        }
        for index in 0..<count {
            closeStream(Int(goAwayScratch[index]), errorCode: errorCode, processed: true)
        }
        while let request = sendQueue.popFirst(in: streams) {
            streams[request].pointee = ClientStreamEntry()
            withDelegate({ $0.http2StreamClosed(request: request, errorCode: errorCode, processed: false) })
        }
    }

    private func closeStream(_ request: Int, errorCode: UInt32, processed: Bool) {
        let entry = streams[request]
        assert(entry.pointee.phase == .open || entry.pointee.phase == .blocked)
        if entry.pointee.phase == .blocked { blocked.remove(request, in: streams) }
        streams.unbind(entry.pointee.streamID)
        entry.pointee = ClientStreamEntry()
        withDelegate({ $0.http2StreamClosed(request: request, errorCode: errorCode, processed: processed) })
    }

    // MARK: - Receiving

    /// Processes decrypted bytes from the server (any split). On a connection error the session sends
    /// GOAWAY, stops, and throws; the owner then closes the connection.
    public func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2ConnectionError) {
        guard !failed && !lost else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "the session already failed") }
        do {
            try receiveFrames(bytes)
        } catch {
            failed = true
            writeGoAway(errorCode: error.code, debug: error.message)
            throw error
        }
    }

    private func receiveFrames(_ bytes: UnsafeRawBufferPointer) throws(HTTP2ConnectionError) {
        try frames.read(bytes) { (frame) throws(HTTP2ConnectionError) in try processFrame(frame) }
    }

    private func processFrame(_ frame: UnsafeRawPointer) throws(HTTP2ConnectionError) {
        let (length, typeByte, flags, streamID) = HTTP2FrameHeader.read(frame)
        let payload = UnsafeRawBufferPointer(start: frame + HTTP2Limits.frameHeaderSize, count: length)
        let type = HTTP2FrameType(rawValue: typeByte)
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
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "PUSH_PROMISE although SETTINGS_ENABLE_PUSH is 0")
        case nil:
            break  // unknown frame types are ignored (RFC 9113 §5.5)
        }
        try control.checkBound()
    }

    /// A frame on a stream we do not track: fine for one we closed (reset or answered), an error for one
    /// never opened (the server cannot open streams: push is off).
    private func checkClosedStream(_ streamID: Int32, _ what: StaticString) throws(HTTP2ConnectionError) {
        if streamID & 1 == 0 || streamID > lastStreamID {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "\(what) on idle stream \(streamID)")
        }
    }

    private func receiveData(_ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32) throws(HTTP2ConnectionError) {
        guard streamID != 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "DATA on stream 0") }
        // Flow control counts the whole payload, padding included (§6.9.1). What we have not yet given
        // back with WINDOW_UPDATE is what the peer has used of the window we announced.
        let connectionIncrement = try HTTP2ReceiveWindow.receive(
            payload.count, window: local.connectionWindowSize, unacknowledged: &connectionReceivedUnacknowledged, "the connection")
        if connectionIncrement > 0 { control.writeWindowUpdate(streamID: 0, increment: connectionIncrement) }
        let data = try HTTP2FramePayload.unpadded(payload, flags: flags, priorityBytes: 0)
        guard let request = streams.request(for: streamID) else {
            try checkClosedStream(streamID, "DATA")
            return
        }
        let entry = streams[request]
        // Until our SETTINGS are acknowledged the peer may still count from the default window.
        let streamWindow = localSettingsAcknowledged ? local.initialWindowSize : max(local.initialWindowSize, HTTP2Limits.defaultWindowSize)
        var streamUnacknowledged = Int(entry.pointee.receivedUnacknowledged)
        let streamIncrement = try HTTP2ReceiveWindow.receive(
            payload.count, window: streamWindow, unacknowledged: &streamUnacknowledged,
            sendsUpdate: flags & HTTP2FrameFlag.endStream == 0, "stream \(streamID)")
        entry.pointee.receivedUnacknowledged = Int32(streamUnacknowledged)
        if streamIncrement > 0 { control.writeWindowUpdate(streamID: streamID, increment: streamIncrement) }
        if data.count > 0 { withDelegate({ $0.http2ResponseData(request: request, bytes: data) }) }
        if flags & HTTP2FrameFlag.endStream != 0 { endResponse(request) }
    }

    private func receiveHeaders(_ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32) throws(HTTP2ConnectionError) {
        guard streamID != 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "HEADERS on stream 0") }
        let fragment = try HTTP2FramePayload.unpadded(payload, flags: flags, priorityBytes: flags & HTTP2FrameFlag.priority != 0 ? 5 : 0)
        let endsStream = flags & HTTP2FrameFlag.endStream != 0
        if flags & HTTP2FrameFlag.endHeaders != 0 {
            try decodeHeaderBlock(fragment, streamID: streamID, endsStream: endsStream)
            return
        }
        try headerBlock.begin(stream: streamID, endsStream: endsStream, fragment: fragment)
    }

    private func receiveContinuation(_ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32) throws(HTTP2ConnectionError) {
        guard headerBlock.isOpen else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "CONTINUATION without HEADERS") }
        try headerBlock.append(payload)
        guard flags & HTTP2FrameFlag.endHeaders != 0 else { return }
        let stream = headerBlock.stream
        let endsStream = headerBlock.endsStream
        try decodeHeaderBlock(headerBlock.finish(), streamID: stream, endsStream: endsStream)
    }

    private func decodeHeaderBlock(_ block: UnsafeRawBufferPointer, streamID: Int32, endsStream: Bool) throws(HTTP2ConnectionError) {
        let request = streams.request(for: streamID)
        if request == nil { try checkClosedStream(streamID, "HEADERS") }
        // Every block is decoded, even for a stream we reset: the HPACK table must stay in step.
        let reportsOnlyStatus = local.reportsOnlyStatus && !(request.map { streams[$0].pointee.reportsHeaders } ?? false)
        do {
            try decoder.decode(block, wantsValue: { name in
                !reportsOnlyStatus || Self.isStatus(name)
            }) { name, value in
                if let request { withDelegate({ $0.http2ResponseHeader(request: request, name: name, value: value) }) }
            }
        } catch {
            throw HTTP2ConnectionError(HTTP2ErrorCode.compressionError, error.description)
        }
        if endsStream, let request { endResponse(request) }
    }

    private static let statusName: StaticString = ":status"

    @inline(__always)
    private static func isStatus(_ name: UnsafeRawBufferPointer) -> Bool {
        name.count == 7 && memcmp(name.baseAddress!, statusName.utf8Start, 7) == 0
    }

    /// The server finished its response. If our body was still owed (an early answer), stop sending it.
    private func endResponse(_ request: Int) {
        let entry = streams[request]
        if entry.pointee.phase == .blocked {
            control.writeReset(streamID: entry.pointee.streamID, errorCode: HTTP2ErrorCode.noError)
        }
        closeStream(request, errorCode: HTTP2ErrorCode.noError, processed: true)
    }

    private func receiveReset(_ payload: UnsafeRawBufferPointer, streamID: Int32) throws(HTTP2ConnectionError) {
        guard streamID != 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "RST_STREAM on stream 0") }
        guard payload.count == 4 else { throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "RST_STREAM of \(payload.count) bytes") }
        let code = HTTP2FrameHeader.readUInt32(payload.baseAddress!)
        guard let request = streams.request(for: streamID) else {
            try checkClosedStream(streamID, "RST_STREAM")
            return
        }
        closeStream(request, errorCode: code, processed: code != HTTP2ErrorCode.refusedStream)
    }

    private func receiveSettings(_ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32) throws(HTTP2ConnectionError) {
        if flags & HTTP2FrameFlag.ack != 0 {
            guard streamID == 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "SETTINGS on stream \(streamID)") }
            guard payload.isEmpty else { throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "SETTINGS ACK with a payload") }
            localSettingsAcknowledged = true
            return
        }
        try HTTP2FramePayload.forEachSetting(payload, flags: flags, streamID: streamID) { (identifier, value) throws(HTTP2ConnectionError) in
            switch identifier {
            case HTTP2SettingID.headerTableSize:
                // Our encoder only ever uses up to 4 KiB of the server's table.
                encoderTable.setMaximumSize(Int(min(value, 4096)))
            case HTTP2SettingID.enablePush:
                // A server must not send 1 (RFC 9113 §6.5.2); only 0 is valid from it.
                guard value == 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "a server sent SETTINGS_ENABLE_PUSH \(value)") }
            case HTTP2SettingID.maxConcurrentStreams:
                peerMaxConcurrentStreams = Int(value)
            case HTTP2SettingID.initialWindowSize:
                try applyInitialWindow(Int(value))
            case HTTP2SettingID.maxFrameSize:
                peerMaxFrameSize = Int(value)
            default:
                break  // SETTINGS_MAX_HEADER_LIST_SIZE is advisory; unknown settings are ignored
            }
        }
        control.writeSettingsAck()
        withDelegate({ $0.http2RemoteSettingsChanged(maxConcurrentStreams: peerMaxConcurrentStreams) })
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
        let (last, code, debug) = try HTTP2FramePayload.goAway(payload, streamID: streamID)
        goAwayReceived = true
        withDelegate({ $0.http2GoAwayReceived(lastStreamID: last, errorCode: code, debugData: debug) })
        // Streams above `last` were not processed, and queued requests never left: both go back unprocessed.
        var count = 0
        streams.forEachStream { request, entry in
            if entry.pointee.streamID > last {
                goAwayScratch[count] = Int32(request)
                count += 1
            }
        }
        for index in 0..<count {
            closeStream(Int(goAwayScratch[index]), errorCode: HTTP2ErrorCode.refusedStream, processed: false)
        }
        while let request = sendQueue.popFirst(in: streams) {
            streams[request].pointee = ClientStreamEntry()
            withDelegate({ $0.http2StreamClosed(request: request, errorCode: HTTP2ErrorCode.refusedStream, processed: false) })
        }
    }

    private func receiveWindowUpdate(_ payload: UnsafeRawBufferPointer, streamID: Int32) throws(HTTP2ConnectionError) {
        let increment = try HTTP2FramePayload.windowIncrement(payload, streamID: streamID)
        if streamID == 0 {
            try HTTP2SendWindow.widenConnection(&connectionSendWindow, by: increment)
        } else if let request = streams.request(for: streamID) {
            try streams.widenSendWindow(request, by: increment, streamID: streamID)
        } else {
            try checkClosedStream(streamID, "WINDOW_UPDATE")
            return
        }
        if !blocked.isEmpty || !sendQueue.isEmpty { withTransport({ $0.setNeedsFlush() }) }
    }

    // MARK: - Control frames

    private func writeGoAway(errorCode: UInt32, debug: String) {
        goAwaySent = true
        control.writeGoAway(lastStreamID: 0, errorCode: errorCode, debug: debug)  // we process no server-initiated streams
    }
}

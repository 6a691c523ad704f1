#if canImport(Glibc)
import Glibc
#endif

/// The client side of one HTTP/2 connection (RFC 9113) over a `SecureTransport`, specialised for sending
/// many small requests: frames are written straight into the transport's plaintext buffer, header blocks
/// come from the owner through `HPACKBlockWriter` (so repeated fields go out as one-byte table indexes and
/// the token is Huffman-coded from its bytes), and per-stream state lives in fixed arrays. In the steady
/// state a request costs no allocation, no lock and no system call here.
///
/// What the connection itself does (the order of frames, SETTINGS, PING, WINDOW_UPDATE, GOAWAY, flow control,
/// the flood guard) is `HTTP2Connection`, shared with `HTTP2ServerSession`; this type keeps requests and what
/// responses mean. Requests queue with `submit` and leave in `produce` (the transport's flush), in order, while
/// the transport is not backed up and the server's stream limit and flow-control windows allow; a body the
/// windows cannot take yet waits in a blocked list for WINDOW_UPDATE. Confined to its loop's thread.
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
        /// Frames that carry nothing (empty DATA without END_STREAM, empty header fragments, unknown types)
        /// between two responses before ENHANCE_YOUR_CALM, as on the server (`HTTP2FloodGuard`).
        public var maxEmptyFrames = 1000
        public init() {}
    }

    /// Upper bound of one request header block; the owner's fields must fit (checked).
    public static let maxRequestHeaderBlock = 2048
    /// Header blocks split over CONTINUATION frames are gathered up to this size.
    static let maxResponseHeaderBlock = 64 * 1024

    private let delegate: HTTP2Unretained<HTTP2ClientSessionDelegate>
    private let local: LocalSettings
    @exclusivity(unchecked) private var connection: HTTP2Connection
    @exclusivity(unchecked) private var streams: ClientStreamTable
    @exclusivity(unchecked) private var sendQueue = StreamList()
    @exclusivity(unchecked) private var blocked = StreamList()
    @exclusivity(unchecked) private var encoderTable: HPACKEncoderTable
    @exclusivity(unchecked) private var decoder: HPACKDecoder

    /// 64-bit: past the last odd id (2^31-1) it steps beyond Int32 instead of overflowing; no stream
    /// opens there (`acceptsRequests` turns false first, and the owner drains and rotates).
    @exclusivity(unchecked) private var nextStreamID = 1

    /// `capacity` requests at most (numbered `0..<capacity`) may be queued or open at once.
    /// `firstStreamID` (odd) is for tests that need to reach the end of the stream id space quickly.
    public init(
        transport: HTTP2FrameSink, delegate: HTTP2ClientSessionDelegate, capacity: Int,
        settings: LocalSettings = LocalSettings(), firstStreamID: Int32 = 1
    ) {
        precondition(firstStreamID > 0 && firstStreamID & 1 == 1, "client stream ids are odd")
        nextStreamID = Int(firstStreamID)
        self.delegate = HTTP2Unretained(delegate)
        self.local = settings
        // A server can only reset streams we opened: resets are no flood here (the bound is never reached).
        let floodGuard = HTTP2FloodGuard(maxEmptyFrames: settings.maxEmptyFrames, maxResetsBeyondAnswers: .max)
        connection = HTTP2Connection(
            role: .client, transport: transport, streamWindow: settings.initialWindowSize,
            connectionWindow: settings.connectionWindowSize, maxHeaderBlock: Self.maxResponseHeaderBlock,
            maxQueuedControlFrames: settings.maxQueuedControlFrames, floodGuard: floodGuard)
        streams = ClientStreamTable(capacity: capacity)
        encoderTable = HPACKEncoderTable(maximumSize: 4096)
        decoder = HPACKDecoder(
            maximumTableSize: settings.headerTableSize, maximumHeaderListSize: settings.maxHeaderListSize)
    }

    /// Registers a header field that repeats on every request (sent indexed once the server has it).
    public func registerRepeatedField(nameIndex: Int?, name: String, value: String) -> HPACKCachedField {
        assert(connection.isOnOwnerThread(), "HTTP2ClientSession used off its thread")
        return encoderTable.register(nameIndex: nameIndex, name: name, value: value)
    }

    /// Changes a repeated field's value (a new provider token); the next request inserts the new value.
    public func updateRepeatedField(_ field: HPACKCachedField, value: String) {
        assert(connection.isOnOwnerThread(), "HTTP2ClientSession used off its thread")
        encoderTable.update(field, value: value)
    }

    // MARK: - Connection state

    /// The highest stream id opened so far.
    public var lastStreamID: Int32 { connection.lastStreamID }
    public var peerMaxConcurrentStreams: Int? { connection.peerMaxConcurrentStreams }
    public var goAwayReceived: Bool { connection.goAwayReceived }
    /// A connection error was found (and answered with GOAWAY): nothing more is read or sent.
    public var failed: Bool { connection.failed }
    /// The connection is gone (`connectionLost`): every request was reported and nothing more happens.
    public var lost: Bool { connection.lost }

    // MARK: - Starting and stopping

    /// Writes the connection preface: the magic, our SETTINGS and (when larger than the default) the
    /// connection window.
    public func start() {
        assert(connection.isOnOwnerThread(), "HTTP2ClientSession used off its thread")
        connection.start(settings: [
            (HTTP2SettingID.enablePush, 0),
            (HTTP2SettingID.maxConcurrentStreams, UInt32(local.maxConcurrentStreams)),
            (HTTP2SettingID.initialWindowSize, UInt32(local.initialWindowSize)),
            (HTTP2SettingID.headerTableSize, UInt32(local.headerTableSize)),
            (HTTP2SettingID.maxHeaderListSize, UInt32(local.maxHeaderListSize)),
        ])
    }

    /// Says goodbye with GOAWAY (no stream of the server's was processed: last stream id 0).
    public func terminate(errorCode: UInt32 = HTTP2ErrorCode.noError, debug: String = "") {
        assert(connection.isOnOwnerThread(), "HTTP2ClientSession used off its thread")
        guard !connection.goAwaySent else { return }
        var text = debug
        text.withUTF8 {
            connection.sendGoAway(lastStreamID: 0, errorCode: errorCode, debug: UnsafeRawBufferPointer($0))
        }
    }

    /// Sends a PING (keep-alive); any frame that arrives afterwards shows the connection is alive.
    public func sendPing() {
        assert(connection.isOnOwnerThread(), "HTTP2ClientSession used off its thread")
        connection.sendPing()
    }

    // MARK: - Requests

    /// Streams that are open (HEADERS sent, not yet closed).
    public var openStreamCount: Int { streams.openCount }
    /// Requests waiting for `produce`.
    public var queuedCount: Int { sendQueue.count }
    /// True while something is waiting to be written that the windows allow.
    public var wantsWrite: Bool {
        !sendQueue.isEmpty || (!blocked.isEmpty && connection.connectionSendWindow > 0)
    }
    /// False once no new stream can be opened here (GOAWAY either way, an error, or stream ids used up).
    public var acceptsRequests: Bool {
        !connection.goAwayReceived && !connection.goAwaySent && connection.isOpen
            && nextStreamID + 2 * sendQueue.count <= Int(HTTP2Limits.maxStreamID)
    }

    /// Queues request `request`; it leaves in the next `produce`. Returns false (nothing queued) when the
    /// session no longer accepts requests. `reportsHeaders` asks for every field of its response even when
    /// the session reports only `:status` (`LocalSettings.reportsOnlyStatus`).
    public func submit(request: Int, reportsHeaders: Bool = false) -> Bool {
        assert(connection.isOnOwnerThread(), "HTTP2ClientSession used off its thread")
        guard acceptsRequests else { return false }
        let entry = streams[request]
        precondition(entry.pointee.phase == .idle, "request \(request) is already in use")
        entry.pointee.phase = .queued
        entry.pointee.reportsHeaders = reportsHeaders
        sendQueue.append(request, in: streams)
        connection.setNeedsFlush()
        return true
    }

    /// Gives up on a request: a queued one leaves the queue, a sent one is reset with `errorCode`. Its
    /// `http2StreamClosed` (processed: false) comes before this returns.
    public func cancel(request: Int, errorCode: UInt32 = HTTP2ErrorCode.cancel) {
        assert(connection.isOnOwnerThread(), "HTTP2ClientSession used off its thread")
        let entry = streams[request]
        switch entry.pointee.phase {
        case .idle:
            return
        case .queued:
            sendQueue.remove(request, in: streams)
            entry.pointee = ClientStreamEntry()
            delegate.with({ $0.http2StreamClosed(request: request, errorCode: errorCode, processed: false) })
        case .blocked, .open:
            connection.control.writeReset(streamID: entry.pointee.streamID, errorCode: errorCode)
            closeStream(request, errorCode: errorCode, processed: false)
        }
    }

    /// Writes what is waiting: bodies whose windows opened, then new requests. Called from the transport's
    /// flush (`transportProduce`); stops when the transport is backed up.
    public func produce() {
        assert(connection.isOnOwnerThread(), "HTTP2ClientSession used off its thread")
        guard connection.beginProduce() else { return }
        if !blocked.isEmpty { resumeBlocked() }
        var opened = false
        while !sendQueue.isEmpty && connection.connectionSendWindow > 0
            && !connection.withTransport({ $0.isBackedUp })
        {
            if let limit = connection.peerMaxConcurrentStreams, streams.openCount >= limit { break }
            guard nextStreamID <= Int(HTTP2Limits.maxStreamID) else { break }
            // Room first: a request leaves the queue only once its HEADERS are certainly written, so "never
            // written" (provably unprocessed) and "open" never disagree.
            let room = HTTP2Limits.frameHeaderSize + Self.maxRequestHeaderBlock
            guard let base = connection.withTransport({ $0.reservePlaintext(room) }),
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
        connection.lastStreamID = streamID
        entry.pointee.streamID = streamID
        entry.pointee.sendWindow = Int32(connection.peerInitialWindow)
        entry.pointee.payloadSent = 0
        entry.pointee.phase = .open
        streams.bind(streamID, to: request)

        let body = delegate.with({ $0.http2RequestBody(request: request) })
        let capacity = Self.maxRequestHeaderBlock
        connection.writeHeaders(at: base, capacity: capacity, streamID: streamID, endsStream: body.isEmpty) { writer in
            encoderTable.beginBlock(&writer)
            delegate.with({ $0.http2WriteRequestHeaders(request: request, table: &encoderTable, writer: &writer) })
        }
        if body.count > 0 {
            entry.pointee.phase = .blocked
            blocked.append(request, in: streams)
        }
    }

    /// Sends as much of the body as the windows allow; the rest stays in the blocked list.
    private func sendBody(_ request: Int, _ body: UnsafeRawBufferPointer) {
        let entry = streams[request]
        assert(entry.pointee.phase == .blocked)
        let sent = connection.writeData(
            body, from: Int(entry.pointee.payloadSent), streamID: entry.pointee.streamID,
            streamWindow: &entry.pointee.sendWindow)
        entry.pointee.payloadSent = Int32(sent)
        if sent == body.count {
            blocked.remove(request, in: streams)
            entry.pointee.phase = .open
        }
    }

    private func resumeBlocked() {
        var cursor = blocked.head
        while let request = connection.nextSendable(&cursor, in: streams) {
            sendBody(request, delegate.with({ $0.http2RequestBody(request: request) }))
        }
    }

    /// The connection ended (closed, failed or broken): every request still here ends now, through
    /// `http2StreamClosed`. Queued requests were never written (processed: false); requests whose HEADERS
    /// went out got no answer and may have been acted on (processed: true, `errorCode`).
    public func connectionLost(errorCode: UInt32 = HTTP2ErrorCode.cancel) {
        assert(connection.isOnOwnerThread(), "HTTP2ClientSession used off its thread")
        guard connection.markLost() else { return }
        for request in streams.numbers(ofStreamsAbove: 0) {
            closeStream(Int(request), errorCode: errorCode, processed: true)
        }
        closeQueued(errorCode: errorCode)
    }

    /// Requests still queued never left: each goes back unprocessed.
    private func closeQueued(errorCode: UInt32) {
        while let request = sendQueue.popFirst(in: streams) {
            streams[request].pointee = ClientStreamEntry()
            delegate.with({ $0.http2StreamClosed(request: request, errorCode: errorCode, processed: false) })
        }
    }

    private func closeStream(_ request: Int, errorCode: UInt32, processed: Bool) {
        let entry = streams[request]
        assert(entry.pointee.phase == .open || entry.pointee.phase == .blocked)
        if entry.pointee.phase == .blocked { blocked.remove(request, in: streams) }
        streams.unbind(entry.pointee.streamID)
        entry.pointee = ClientStreamEntry()
        delegate.with({ $0.http2StreamClosed(request: request, errorCode: errorCode, processed: processed) })
    }

    // MARK: - Receiving

    /// Processes decrypted bytes from the server (any split). On a connection error the session sends
    /// GOAWAY, stops, and throws; the owner then closes the connection.
    public func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2ConnectionError) {
        assert(connection.isOnOwnerThread(), "HTTP2ClientSession used off its thread")
        do {
            var rest = try connection.beginReceiving(bytes)
            while let frame = try connection.nextFrame(&rest, streams: streams, encoderTable: &encoderTable) {
                try process(frame)
            }
        } catch {
            throw connection.fail(error)
        }
    }

    /// What a response means; the connection did the rest.
    private func process(_ frame: HTTP2InboundFrame) throws(HTTP2ConnectionError) {
        switch frame {
        case .data(let request, let streamID, let data, let received, let endsStream):
            try connection.receiveStreamData(received, on: streams[request], streamID: streamID, endsStream: endsStream)
            if data.count > 0 { delegate.with({ $0.http2ResponseData(request: request, bytes: data) }) }
            if endsStream { endResponse(request) }
        case .headers(let request, let streamID, let block, let endsStream):
            try receiveHeaderBlock(block, request: request, streamID: streamID, endsStream: endsStream)
        case .reset(let request, let errorCode):
            closeStream(request, errorCode: errorCode, processed: errorCode != HTTP2ErrorCode.refusedStream)
        case .settings(let streamWindowsGrew):
            if streamWindowsGrew && !blocked.isEmpty { connection.setNeedsFlush() }
            delegate.with({ $0.http2RemoteSettingsChanged(maxConcurrentStreams: connection.peerMaxConcurrentStreams) })
        case .settingsAcknowledged:
            break
        case .goAway(let lastStreamID, let errorCode, let debug):
            receiveGoAway(lastStreamID: lastStreamID, errorCode: errorCode, debug: debug)
        case .windowOpened:
            if !blocked.isEmpty || !sendQueue.isEmpty { connection.setNeedsFlush() }
        }
    }

    /// A response's header block (informational, final or trailers). Every block is decoded, even for a stream
    /// we reset: the HPACK table must stay in step.
    private func receiveHeaderBlock(
        _ block: UnsafeRawBufferPointer, request: Int?, streamID: Int32, endsStream: Bool
    ) throws(HTTP2ConnectionError) {
        if request == nil { try connection.checkNotIdle(streamID, "HEADERS") }
        let reportsHeaders = request.map { streams[$0].pointee.reportsHeaders } ?? false
        let reportsOnlyStatus = local.reportsOnlyStatus && !reportsHeaders
        do {
            try decoder.decode(
                block,
                wantsValue: { name in
                    !reportsOnlyStatus || Self.isStatus(name)
                }
            ) { name, value in
                if let request { delegate.with({ $0.http2ResponseHeader(request: request, name: name, value: value) }) }
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
            connection.control.writeReset(streamID: entry.pointee.streamID, errorCode: HTTP2ErrorCode.noError)
        }
        connection.floodGuard.answered()
        closeStream(request, errorCode: HTTP2ErrorCode.noError, processed: true)
    }

    private func receiveGoAway(lastStreamID: Int32, errorCode: UInt32, debug: UnsafeRawBufferPointer) {
        delegate.with({ $0.http2GoAwayReceived(lastStreamID: lastStreamID, errorCode: errorCode, debugData: debug) })
        // Streams above `lastStreamID` were not processed, and queued requests never left: both go back
        // unprocessed.
        for request in streams.numbers(ofStreamsAbove: lastStreamID) {
            closeStream(Int(request), errorCode: HTTP2ErrorCode.refusedStream, processed: false)
        }
        closeQueued(errorCode: HTTP2ErrorCode.refusedStream)
    }
}

import FanfareIO
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/2 connection's own rules (RFC 9113), written once for both sessions as nghttp2 writes one session
/// for both roles: the order of frames (the client preface, CONTINUATION right after its HEADERS), SETTINGS and
/// their acknowledgements, PING, GOAWAY, PRIORITY, WINDOW_UPDATE and flow control both ways, and the flood guard.
/// Each session owns one and keeps what is its own: what HEADERS and DATA mean, its streams' lives, its HPACK
/// tables and its delegate.
///
/// The session pulls what it receives through `nextFrame`: what concerns the connection is done there, and the
/// rest comes back as an `HTTP2InboundFrame` for the session. The verdicts are nghttp2's and swift-nio-http2's:
/// a connection error is thrown (`HTTP2ConnectionError`; the session hands it to `fail`, which answers it with
/// GOAWAY), a stream error is the session's RST_STREAM (the connection goes on), and a frame for a stream that
/// already closed, or of an unknown type, is ignored here. Nothing here allocates, locks or makes a system call
/// per frame; like its session, it lives on one thread (`isOnOwnerThread`).
struct HTTP2Connection: ~Copyable {
    enum Role {
        case client
        case server
    }

    let role: Role
    /// The receive windows we announce: each stream's, and the connection's.
    let localStreamWindow: Int
    let localConnectionWindow: Int
    private let transport: HTTP2Unretained<HTTP2FrameSink>
    /// SETTINGS ACKs, PING ACKs, WINDOW_UPDATEs, RST_STREAMs and GOAWAY, with the cap on those owed to a peer that
    /// does not read.
    var control: HTTP2ControlFrames
    var floodGuard: HTTP2FloodGuard
    private var reader = HTTP2FrameReader()
    /// A header block continued in CONTINUATION frames.
    private var headerBlock: HTTP2HeaderBlockBuffer
    /// Bytes of the client preface a server still expects (24 at first); then the first frame must be SETTINGS.
    private var prefaceRemaining: Int
    private var peerSettingsSeen: Bool
    /// The frame handed out last is with the session: the control frames it makes us write are checked next.
    private var frameWithSession = false

    /// The highest stream id opened (by us as a client, by the peer as a server); above it a stream is idle.
    var lastStreamID: Int32 = 0
    private(set) var connectionSendWindow = HTTP2Limits.defaultWindowSize
    private(set) var peerInitialWindow = HTTP2Limits.defaultWindowSize
    private(set) var peerMaxFrameSize = HTTP2Limits.defaultMaxFrameSize
    /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS; nil until it sends one (no limit).
    private(set) var peerMaxConcurrentStreams: Int?
    /// What the peer sent of the connection's receive window and we have not yet given back with WINDOW_UPDATE.
    private var connectionReceivedUnacknowledged = 0
    /// Our SETTINGS frames the peer has not acknowledged yet (ACKs come in the order they went, §6.5.3).
    private(set) var unacknowledgedSettings = 0
    /// Our first SETTINGS were acknowledged: the peer keeps to our stream window from now on (before, it may
    /// still count from the default of 65,535 bytes).
    private(set) var initialSettingsAcknowledged = false
    private(set) var goAwaySent = false
    private(set) var goAwayReceived = false
    /// A connection error was found (and answered with GOAWAY): nothing more is read or written.
    private(set) var failed = false
    /// The connection is gone: the session ended every stream, and nothing more happens.
    private(set) var lost = false
    private var threadOwner = ThreadOwnership()

    /// `maxHeaderBlock` bounds a header block gathered from CONTINUATION frames (past it: ENHANCE_YOUR_CALM).
    init(
        role: Role, transport: HTTP2FrameSink, streamWindow: Int, connectionWindow: Int, maxHeaderBlock: Int,
        maxQueuedControlFrames: Int, floodGuard: HTTP2FloodGuard
    ) {
        precondition(streamWindow > 0 && streamWindow <= HTTP2Limits.maxWindowSize)
        precondition(connectionWindow >= HTTP2Limits.defaultWindowSize && connectionWindow <= HTTP2Limits.maxWindowSize)
        self.role = role
        self.transport = HTTP2Unretained(transport)
        localStreamWindow = streamWindow
        localConnectionWindow = connectionWindow
        control = HTTP2ControlFrames(sink: transport, maxQueued: maxQueuedControlFrames)
        self.floodGuard = floodGuard
        headerBlock = HTTP2HeaderBlockBuffer(capacity: maxHeaderBlock)
        // A client does not insist that the server's first frame be SETTINGS (it never has).
        prefaceRemaining = role == .server ? HTTP2Limits.clientPreface.utf8CodeUnitCount : 0
        peerSettingsSeen = role == .client
    }

    /// True on the session's thread (the first caller's); for `assert` only.
    mutating func isOnOwnerThread() -> Bool { threadOwner.claimIsCurrent() }

    @inline(__always)
    func withTransport<R>(_ body: (HTTP2FrameSink) -> R) -> R { transport.with(body) }

    @inline(__always)
    func setNeedsFlush() { transport.with { $0.setNeedsFlush() } }

    /// Neither failed nor gone.
    var isOpen: Bool { !failed && !lost }

    // MARK: - Starting and ending

    /// Writes our preface: the magic (as a client), our SETTINGS, and the rest of the connection window when it
    /// is larger than the default (an increment of 0 would be a PROTOCOL_ERROR, §6.9).
    mutating func start(settings: [(UInt16, UInt32)]) {
        if role == .client {
            let magic = HTTP2Limits.clientPreface
            withTransport { sink in
                guard let base = sink.reservePlaintext(magic.utf8CodeUnitCount) else { return }
                base.copyMemory(from: magic.utf8Start, byteCount: magic.utf8CodeUnitCount)
                sink.commitPlaintext(magic.utf8CodeUnitCount)
            }
        }
        control.writeSettings(settings)
        unacknowledgedSettings += 1
        let windowIncrement = localConnectionWindow - HTTP2Limits.defaultWindowSize
        if windowIncrement > 0 { control.writeWindowUpdate(streamID: 0, increment: windowIncrement) }
        setNeedsFlush()
    }

    /// One more SETTINGS frame with one setting (the peer acknowledges it in turn).
    mutating func writeSetting(_ identifier: UInt16, _ value: UInt32) {
        control.writeSetting(identifier, value)
        unacknowledgedSettings += 1
        setNeedsFlush()
    }

    mutating func sendPing() {
        guard !failed else { return }
        control.writePing(ack: false, opaque: nil)
    }

    /// Says goodbye: no stream above `lastStreamID` (of those the peer opened) will be processed.
    mutating func sendGoAway(lastStreamID: Int32, errorCode: UInt32, debug: UnsafeRawBufferPointer) {
        goAwaySent = true
        control.writeGoAway(lastStreamID: lastStreamID, errorCode: errorCode, debug: debug)
        setNeedsFlush()
    }

    /// Ends the connection for `error` (a connection error, §5.4.1): GOAWAY with its code and the last stream the
    /// peer opened (none as a client: we process no stream a server opens), then nothing more is read or
    /// written. Returns `error` for the session to throw; its owner then closes the connection. Once the
    /// connection failed or is gone there is nothing more to say.
    mutating func fail(_ error: HTTP2ConnectionError) -> HTTP2ConnectionError {
        guard isOpen else { return error }
        failed = true
        goAwaySent = true
        control.writeGoAway(
            lastStreamID: role == .server ? lastStreamID : 0, errorCode: error.code, debug: error.message)
        setNeedsFlush()
        return error
    }

    /// The connection is gone; false if it already was (the session ends its streams once).
    mutating func markLost() -> Bool {
        guard !lost else { return false }
        lost = true
        return true
    }

    // MARK: - Sending

    /// A flush begins (the session's `produce`): if the transport drained, the peer reads again and the count of
    /// control frames owed while it was backed up starts over. False once nothing is written any more.
    mutating func beginProduce() -> Bool {
        guard isOpen else { return false }
        control.transportDrained()
        return true
    }

    /// Writes DATA frames of `body` from `offset` on, as far as the connection's and the stream's send windows,
    /// the peer's frame size and the transport allow (the last one with END_STREAM). Returns how far it got.
    mutating func writeData(
        _ body: UnsafeRawBufferPointer, from offset: Int, streamID: Int32, streamWindow: inout Int32
    ) -> Int {
        let header = HTTP2Limits.frameHeaderSize
        let largestChunk = min(peerMaxFrameSize, withTransport({ $0.plaintextCapacity }) - header)
        var sent = offset
        while sent < body.count {
            let chunk = min(body.count - sent, connectionSendWindow, Int(streamWindow), largestChunk)
            guard chunk > 0, let base = withTransport({ $0.reservePlaintext(header + chunk) }) else { break }
            let flags = sent + chunk == body.count ? HTTP2FrameFlag.endStream : 0
            HTTP2FrameHeader.write(to: base, length: chunk, type: .data, flags: flags, streamID: streamID)
            (base + header).copyMemory(from: body.baseAddress! + sent, byteCount: chunk)
            withTransport({ $0.commitPlaintext(header + chunk) })
            sent += chunk
            connectionSendWindow -= chunk
            streamWindow -= Int32(chunk)
        }
        return sent
    }

    /// Writes a HEADERS frame with a whole header block (END_HEADERS; END_STREAM when `endsStream`) at `base`,
    /// which the session reserved for the frame header and `capacity` bytes of block. `writeBlock` writes the
    /// block (from the session's HPACK encoder table and its owner's fields, which must fit: they are ours, not
    /// the peer's).
    @inline(__always)
    func writeHeaders(
        at base: UnsafeMutableRawPointer, capacity: Int, streamID: Int32, endsStream: Bool,
        _ writeBlock: (inout HPACKBlockWriter) -> Void
    ) {
        let header = HTTP2Limits.frameHeaderSize
        var writer = HPACKBlockWriter(destination: base + header, capacity: capacity)
        writeBlock(&writer)
        let blockLength = writer.count
        precondition(blockLength <= min(peerMaxFrameSize, capacity), "header block too large")
        let flags = HTTP2FrameFlag.endHeaders | (endsStream ? HTTP2FrameFlag.endStream : 0)
        HTTP2FrameHeader.write(to: base, length: blockLength, type: .headers, flags: flags, streamID: streamID)
        withTransport({ $0.commitPlaintext(header + blockLength) })
    }

    /// Walks a list of streams whose bodies wait for send window (from `cursor`, which moves on past each stream
    /// returned, so the stream may leave the list): the next one whose window is open, or nil once the list ends,
    /// the connection window is shut or the transport is backed up.
    func nextSendable<Entry: HTTP2StreamEntry>(
        _ cursor: inout Int32, in streams: borrowing HTTP2StreamTable<Entry>
    ) -> Int? {
        while cursor >= 0 && connectionSendWindow > 0 && !withTransport({ $0.isBackedUp }) {
            let stream = Int(cursor)
            cursor = streams[stream].pointee.next
            if streams[stream].pointee.sendWindow > 0 { return stream }
        }
        return nil
    }
}

// MARK: - Receiving

extension HTTP2Connection {
    /// Starts on a read: throws once the connection failed or is gone, reads what `bytes` holds of a server's
    /// client preface; returns what follows (for `nextFrame`).
    mutating func beginReceiving(
        _ bytes: UnsafeRawBufferPointer
    ) throws(HTTP2ConnectionError) -> UnsafeRawBufferPointer {
        guard isOpen else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "the session already failed") }
        return prefaceRemaining > 0 ? try receivePreface(bytes) : bytes
    }

    /// The next frame of `bytes` (which then starts after it) for the session, or nil once `bytes` holds no more
    /// whole frames. Frames of the connection are processed on the way.
    /// `streams` are the session's (their send windows move with WINDOW_UPDATE and SETTINGS), `encoderTable` its
    /// HPACK encoder (the peer's SETTINGS_HEADER_TABLE_SIZE bounds it).
    mutating func nextFrame<Entry: HTTP2StreamEntry>(
        _ bytes: inout UnsafeRawBufferPointer, streams: borrowing HTTP2StreamTable<Entry>,
        encoderTable: inout HPACKEncoderTable
    ) throws(HTTP2ConnectionError) -> HTTP2InboundFrame? {
        if frameWithSession {
            frameWithSession = false
            try control.checkBound()
        }
        while let frame = try reader.next(&bytes) {
            if let inbound = try receive(frame, streams: streams, encoderTable: &encoderTable) {
                frameWithSession = true
                return inbound
            }
            try control.checkBound()
        }
        return nil
    }

    /// Counts DATA the session accepted on an open stream against the stream's receive window (§6.9.1), and
    /// gives it back with WINDOW_UPDATE once half of it is used (not after END_STREAM: the stream is done).
    mutating func receiveStreamData<Entry: HTTP2StreamEntry>(
        _ received: Int, on entry: UnsafeMutablePointer<Entry>, streamID: Int32, endsStream: Bool
    ) throws(HTTP2ConnectionError) {
        // Until our SETTINGS are acknowledged the peer may still count from the default window.
        let window =
            initialSettingsAcknowledged ? localStreamWindow : max(localStreamWindow, HTTP2Limits.defaultWindowSize)
        var unacknowledged = Int(entry.pointee.receivedUnacknowledged)
        let increment = try HTTP2ReceiveWindow.receive(
            received, window: window, unacknowledged: &unacknowledged, sendsUpdate: !endsStream, "stream \(streamID)")
        entry.pointee.receivedUnacknowledged = Int32(unacknowledged)
        if increment > 0 { control.writeWindowUpdate(streamID: streamID, increment: increment) }
    }

    /// A frame on a stream the session does not track: fine for one that closed (reset or answered: the frame
    /// is ignored, it may have been on its way), a PROTOCOL_ERROR for one never opened (§5.1: idle). Only odd
    /// ids are ever opened: nobody pushes.
    func checkNotIdle(_ streamID: Int32, _ what: StaticString) throws(HTTP2ConnectionError) {
        if streamID & 1 == 0 || streamID > lastStreamID {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "\(what) on idle stream \(streamID)")
        }
    }

    /// Checks the client preface (§3.4) across reads; returns what follows it.
    private mutating func receivePreface(
        _ bytes: UnsafeRawBufferPointer
    ) throws(HTTP2ConnectionError) -> UnsafeRawBufferPointer {
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

    /// One frame: done here (nil), or what the session must act on.
    private mutating func receive<Entry: HTTP2StreamEntry>(
        _ frame: UnsafeRawPointer, streams: borrowing HTTP2StreamTable<Entry>, encoderTable: inout HPACKEncoderTable
    ) throws(HTTP2ConnectionError) -> HTTP2InboundFrame? {
        let (length, typeByte, flags, streamID) = HTTP2FrameHeader.read(frame)
        let payload = UnsafeRawBufferPointer(start: frame + HTTP2Limits.frameHeaderSize, count: length)
        let type = HTTP2FrameType(rawValue: typeByte)
        try checkOrder(type, flags: flags, streamID: streamID)
        switch type {
        case .data: return try receiveData(payload, flags: flags, streamID: streamID, streams: streams)
        case .headers: return try receiveHeaders(payload, flags: flags, streamID: streamID, streams: streams)
        case .continuation: return try receiveContinuation(payload, flags: flags, streams: streams)
        case .rstStream: return try receiveReset(payload, streamID: streamID, streams: streams)
        case .settings:
            return try receiveSettings(payload, flags: flags, streamID: streamID, streams: streams, &encoderTable)
        case .ping:
            guard try !HTTP2FramePayload.isPingAcknowledgement(payload, flags: flags, streamID: streamID) else { break }
            control.writePing(ack: true, opaque: payload.baseAddress!)
        case .goAway:
            let (last, code, debug) = try HTTP2FramePayload.goAway(payload, streamID: streamID)
            goAwayReceived = true
            return .goAway(lastStreamID: last, errorCode: code, debug: debug)
        case .windowUpdate: return try receiveWindowUpdate(payload, streamID: streamID, streams: streams)
        case .priority:
            guard streamID != 0 else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "PRIORITY on stream 0")
            }
            guard length == 5 else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "PRIORITY of \(length) bytes")
            }
        case .pushPromise:
            throw HTTP2ConnectionError(
                HTTP2ErrorCode.protocolError,
                role == .client ? "PUSH_PROMISE although SETTINGS_ENABLE_PUSH is 0" : "PUSH_PROMISE from a client")
        case nil:
            try floodGuard.countEmptyFrame()  // unknown types are ignored (§5.5), but not without end
        }
        return nil
    }

    /// A server's first frame must be SETTINGS (the preface's second half, §3.4); an open header block must go on
    /// with a CONTINUATION of its stream (§6.10).
    private mutating func checkOrder(
        _ type: HTTP2FrameType?, flags: UInt8, streamID: Int32
    ) throws(HTTP2ConnectionError) {
        if !peerSettingsSeen {
            guard type == .settings && flags & HTTP2FrameFlag.ack == 0 else {
                throw HTTP2ConnectionError(
                    HTTP2ErrorCode.protocolError, "the client preface is not followed by SETTINGS")
            }
            peerSettingsSeen = true
        }
        if headerBlock.isOpen && (type != .continuation || streamID != headerBlock.stream) {
            throw HTTP2ConnectionError(
                HTTP2ErrorCode.protocolError, "expected CONTINUATION for stream \(headerBlock.stream)")
        }
    }

    private mutating func receiveData<Entry: HTTP2StreamEntry>(
        _ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32, streams: borrowing HTTP2StreamTable<Entry>
    ) throws(HTTP2ConnectionError) -> HTTP2InboundFrame? {
        guard streamID != 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "DATA on stream 0") }
        // Flow control counts the whole payload, padding included (§6.9.1), on closed streams too. What we have
        // not yet given back with WINDOW_UPDATE is what the peer has used of the window we announced.
        let increment = try HTTP2ReceiveWindow.receive(
            payload.count, window: localConnectionWindow, unacknowledged: &connectionReceivedUnacknowledged,
            "the connection")
        if increment > 0 { control.writeWindowUpdate(streamID: 0, increment: increment) }
        let data = try HTTP2FramePayload.unpadded(payload, flags: flags, priorityBytes: 0)
        let endsStream = flags & HTTP2FrameFlag.endStream != 0
        if payload.count == 0 && !endsStream { try floodGuard.countEmptyFrame() }
        guard let stream = streams.request(for: streamID) else {
            // A stream we reset, refused or finished: its DATA may still be on the way (ignored, as nghttp2 does).
            try checkNotIdle(streamID, "DATA")
            return nil
        }
        return .data(stream: stream, streamID: streamID, data: data, received: payload.count, endsStream: endsStream)
    }

    private mutating func receiveHeaders<Entry: HTTP2StreamEntry>(
        _ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32, streams: borrowing HTTP2StreamTable<Entry>
    ) throws(HTTP2ConnectionError) -> HTTP2InboundFrame? {
        guard streamID != 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "HEADERS on stream 0") }
        let hasPriority = flags & HTTP2FrameFlag.priority != 0
        let fragment = try HTTP2FramePayload.unpadded(payload, flags: flags, priorityBytes: hasPriority ? 5 : 0)
        if hasPriority && role == .server {
            // A request's stream cannot depend on itself (§5.3.1; nghttp2 checks requests only).
            let padLength = flags & HTTP2FrameFlag.padded != 0 ? 1 : 0
            let dependency = HTTP2FrameHeader.readUInt32(payload.baseAddress! + padLength) & 0x7fff_ffff
            guard Int32(bitPattern: dependency) != streamID else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "stream \(streamID) depends on itself")
            }
        }
        let endsStream = flags & HTTP2FrameFlag.endStream != 0
        if flags & HTTP2FrameFlag.endHeaders != 0 {
            return .headers(
                stream: streams.request(for: streamID), streamID: streamID, block: fragment, endsStream: endsStream)
        }
        if fragment.isEmpty { try floodGuard.countEmptyFrame() }
        try headerBlock.begin(stream: streamID, endsStream: endsStream, fragment: fragment)
        return nil
    }

    private mutating func receiveContinuation<Entry: HTTP2StreamEntry>(
        _ payload: UnsafeRawBufferPointer, flags: UInt8, streams: borrowing HTTP2StreamTable<Entry>
    ) throws(HTTP2ConnectionError) -> HTTP2InboundFrame? {
        guard headerBlock.isOpen else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "CONTINUATION without HEADERS")
        }
        try headerBlock.append(payload)
        guard flags & HTTP2FrameFlag.endHeaders != 0 else {
            if payload.isEmpty { try floodGuard.countEmptyFrame() }
            return nil
        }
        let streamID = headerBlock.stream
        let endsStream = headerBlock.endsStream
        let block = headerBlock.finish()
        let stream = streams.request(for: streamID)
        return .headers(stream: stream, streamID: streamID, block: block, endsStream: endsStream)
    }

    private func receiveReset<Entry: HTTP2StreamEntry>(
        _ payload: UnsafeRawBufferPointer, streamID: Int32, streams: borrowing HTTP2StreamTable<Entry>
    ) throws(HTTP2ConnectionError) -> HTTP2InboundFrame? {
        guard streamID != 0 else { throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "RST_STREAM on stream 0") }
        guard payload.count == 4 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "RST_STREAM of \(payload.count) bytes")
        }
        guard let stream = streams.request(for: streamID) else {
            try checkNotIdle(streamID, "RST_STREAM")
            return nil
        }
        return .reset(stream: stream, errorCode: HTTP2FrameHeader.readUInt32(payload.baseAddress!))
    }

    private mutating func receiveSettings<Entry: HTTP2StreamEntry>(
        _ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32, streams: borrowing HTTP2StreamTable<Entry>,
        _ encoderTable: inout HPACKEncoderTable
    ) throws(HTTP2ConnectionError) -> HTTP2InboundFrame? {
        if flags & HTTP2FrameFlag.ack != 0 {
            guard streamID == 0 else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "SETTINGS on stream \(streamID)")
            }
            guard payload.isEmpty else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "SETTINGS ACK with a payload")
            }
            guard unacknowledgedSettings > 0 else { return nil }  // an ACK of nothing: ignored, as nghttp2 does
            unacknowledgedSettings -= 1
            initialSettingsAcknowledged = true
            return .settingsAcknowledged
        }
        var streamWindowsGrew = false
        try HTTP2FramePayload.forEachSetting(payload, flags: flags, streamID: streamID) {
            (identifier, value) throws(HTTP2ConnectionError) in
            switch identifier {
            case HTTP2SettingID.headerTableSize:
                // Our encoder only ever uses up to 4 KiB of the peer's table.
                encoderTable.setMaximumSize(Int(min(value, 4096)))
            case HTTP2SettingID.enablePush:
                // A server must not send 1 (§6.5.2); a client may (we never push).
                guard role == .server || value == 0 else {
                    throw HTTP2ConnectionError(
                        HTTP2ErrorCode.protocolError, "a server sent SETTINGS_ENABLE_PUSH \(value)")
                }
            case HTTP2SettingID.maxConcurrentStreams:
                peerMaxConcurrentStreams = Int(value)
            case HTTP2SettingID.initialWindowSize:
                // A new value moves every open stream's window by the difference (§6.9.2).
                let delta = Int(value) - peerInitialWindow
                peerInitialWindow = Int(value)
                try streams.shiftSendWindows(by: delta)
                if delta > 0 { streamWindowsGrew = true }
            case HTTP2SettingID.maxFrameSize:
                peerMaxFrameSize = Int(value)
            default:
                break  // SETTINGS_MAX_HEADER_LIST_SIZE is advisory; unknown settings are ignored
            }
        }
        control.writeSettingsAck()
        return .settings(streamWindowsGrew: streamWindowsGrew)
    }

    private mutating func receiveWindowUpdate<Entry: HTTP2StreamEntry>(
        _ payload: UnsafeRawBufferPointer, streamID: Int32, streams: borrowing HTTP2StreamTable<Entry>
    ) throws(HTTP2ConnectionError) -> HTTP2InboundFrame? {
        let increment = try HTTP2FramePayload.windowIncrement(payload, streamID: streamID)
        if streamID == 0 {
            try HTTP2SendWindow.widenConnection(&connectionSendWindow, by: increment)
        } else if let stream = streams.request(for: streamID) {
            try streams.widenSendWindow(stream, by: increment, streamID: streamID)
        } else {
            try checkNotIdle(streamID, "WINDOW_UPDATE")
            return nil
        }
        return .windowOpened
    }
}

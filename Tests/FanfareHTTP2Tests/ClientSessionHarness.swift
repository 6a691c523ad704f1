import CNghttp2
import FanfareHTTP2

#if canImport(Glibc)
import Glibc
#endif

/// Frames the client session writes, collected in memory (the session's `HTTP2Output`).
final class MemoryOutput: HTTP2FrameSink {
    private let capacity: Int
    var backedUp = false
    /// A transport that is closing: reservations fail and nothing more is written.
    var closed = false
    override var plaintextCapacity: Int { capacity }
    override var isBackedUp: Bool { backedUp }
    private let scratch: UnsafeMutableRawPointer
    private(set) var bytes: [UInt8] = []
    var flushRequests = 0

    init(capacity: Int = 64 * 1024) {
        self.capacity = capacity
        scratch = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { scratch.deallocate() }

    override func reservePlaintext(_ count: Int) -> UnsafeMutableRawPointer? {
        precondition(count <= capacity)
        return closed ? nil : scratch
    }

    override func commitPlaintext(_ count: Int) {
        bytes.append(contentsOf: UnsafeRawBufferPointer(start: scratch, count: count))
    }

    override func setNeedsFlush() { flushRequests += 1 }

    func take() -> [UInt8] {
        defer { bytes.removeAll(keepingCapacity: true) }
        return bytes
    }
}

/// One request as the server saw it.
struct ServerRequest {
    var streamID: Int32
    var headers: [(String, String)] = []
    var body: [UInt8] = []
    var closedWith: UInt32?

    func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
}

/// What the scripted server does with a complete request.
enum ServerAnswer {
    case respond(status: Int, headers: [(String, String)] = [], body: String? = nil)
    case reset(UInt32)
    case hold
}

/// nghttp2 1.52's own server session, in memory: the other end of the client session in these tests.
final class NGHTTP2Server {
    private(set) var session: OpaquePointer!
    var requests: [Int32: ServerRequest] = [:]
    var completedOrder: [Int32] = []
    var answer: (ServerRequest) -> ServerAnswer = { _ in .respond(status: 200) }
    var outbound: [UInt8] = []
    var pingAcks = 0
    var maxOpenStreams = 0
    var openStreams = 0
    /// Pad every DATA and HEADERS frame the server sends to this many bytes (0 = none).
    var padTo = 0
    /// Response fields the server sends as "literal without indexing" (as the simulator sends apns-id).
    var noIndexFields: Set<String> = []
    private var responseBodies: [Int32: [UInt8]] = [:]
    private var responseOffsets: [Int32: Int] = [:]

    init(settings: [(nghttp2_settings_id, UInt32)] = [], options: ((OpaquePointer) -> Void)? = nil) {
        var callbacks: OpaquePointer?
        nghttp2_session_callbacks_new(&callbacks)
        nghttp2_session_callbacks_set_send_callback(callbacks, serverSend)
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, serverBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, serverOnHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, serverOnData)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, serverOnFrame)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, serverOnStreamClose)
        nghttp2_session_callbacks_set_select_padding_callback(callbacks, serverSelectPadding)
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        options?(option!)
        var created: OpaquePointer?
        let result = nghttp2_session_server_new2(&created, callbacks, Unmanaged.passUnretained(self).toOpaque(), option)
        precondition(result == 0)
        nghttp2_option_del(option)
        nghttp2_session_callbacks_del(callbacks)
        session = created
        var entries = settings.map { nghttp2_settings_entry(settings_id: Int32($0.0.rawValue), value: $0.1) }
        nghttp2_submit_settings(session, 0, &entries, entries.count)
    }

    deinit { nghttp2_session_del(session) }

    /// Feeds the client's bytes; returns nghttp2's result (negative on a protocol error it detected).
    @discardableResult
    func receive(_ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBufferPointer { nghttp2_session_mem_recv(session, $0.baseAddress, $0.count) }
    }

    /// Everything nghttp2 wants to send now.
    func send() -> [UInt8] {
        let result = nghttp2_session_send(session)
        precondition(result == 0, "nghttp2_session_send: \(result)")
        defer { outbound.removeAll(keepingCapacity: true) }
        return outbound
    }

    func respond(_ streamID: Int32, status: Int, headers: [(String, String)], body: String?) {
        var all = [(":status", String(status))] + headers
        if let body {
            all.append(("content-type", "application/json"))
            responseBodies[streamID] = Array(body.utf8)
            responseOffsets[streamID] = 0
        }
        let names = all.map { strdup($0.0)! }
        let values = all.map { strdup($0.1)! }
        defer {
            names.forEach { free($0) }
            values.forEach { free($0) }
        }
        var nva = (0..<all.count).map { index in
            nghttp2_nv(
                name: UnsafeMutableRawPointer(names[index]).assumingMemoryBound(to: UInt8.self),
                value: UnsafeMutableRawPointer(values[index]).assumingMemoryBound(to: UInt8.self),
                namelen: strlen(names[index]), valuelen: strlen(values[index]),
                flags: UInt8(
                    noIndexFields.contains(all[index].0)
                        ? NGHTTP2_NV_FLAG_NO_INDEX.rawValue : NGHTTP2_NV_FLAG_NONE.rawValue))
        }
        if body != nil {
            var provider = nghttp2_data_provider()
            provider.source.ptr = UnsafeMutableRawPointer(bitPattern: Int(streamID))
            provider.read_callback = serverReadBody
            nghttp2_submit_response(session, streamID, &nva, nva.count, &provider)
        } else {
            nghttp2_submit_response(session, streamID, &nva, nva.count, nil)
        }
    }

    func readBody(
        _ streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>
    ) -> Int {
        let body = responseBodies[streamID] ?? []
        let offset = responseOffsets[streamID] ?? 0
        let count = min(length, body.count - offset)
        body.withUnsafeBufferPointer {
            UnsafeMutableRawPointer(buffer).copyMemory(from: $0.baseAddress! + offset, byteCount: count)
        }
        responseOffsets[streamID] = offset + count
        if offset + count == body.count { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return count
    }

    fileprivate func requestComplete(_ streamID: Int32) {
        guard let request = requests[streamID] else { return }
        completedOrder.append(streamID)
        switch answer(request) {
        case .respond(let status, let headers, let body):
            respond(streamID, status: status, headers: headers, body: body)
        case .reset(let code): nghttp2_submit_rst_stream(session, 0, streamID, code)
        case .hold: break
        }
    }
}

private func server(_ userData: UnsafeMutableRawPointer?) -> NGHTTP2Server {
    Unmanaged<NGHTTP2Server>.fromOpaque(userData!).takeUnretainedValue()
}

private func serverSend(
    _ session: OpaquePointer?, _ data: UnsafePointer<UInt8>?, _ length: Int, _ flags: Int32,
    _ userData: UnsafeMutableRawPointer?
) -> Int {
    server(userData).outbound.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
    return length
}

private func serverBeginHeaders(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    let streamID = frame!.pointee.hd.stream_id
    let peer = server(userData)
    if peer.requests[streamID] == nil {
        peer.requests[streamID] = ServerRequest(streamID: streamID)
        peer.openStreams += 1
        peer.maxOpenStreams = max(peer.maxOpenStreams, peer.openStreams)
    }
    return 0
}

private func serverOnHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
    _ value: UnsafePointer<UInt8>?, _ valueLength: Int, _ flags: UInt8, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    let streamID = frame!.pointee.hd.stream_id
    let field = (
        String(decoding: UnsafeBufferPointer(start: name, count: nameLength), as: UTF8.self),
        String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self)
    )
    server(userData).requests[streamID]?.headers.append(field)
    return 0
}

private func serverOnData(
    _ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32, _ data: UnsafePointer<UInt8>?, _ length: Int,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    server(userData).requests[streamID]?.body.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
    return 0
}

private func serverOnFrame(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    let header = frame!.pointee.hd
    let peer = server(userData)
    if header.type == UInt8(NGHTTP2_PING.rawValue) && header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0 {
        peer.pingAcks += 1
    }
    let isRequestPart = header.type == UInt8(NGHTTP2_HEADERS.rawValue) || header.type == UInt8(NGHTTP2_DATA.rawValue)
    if isRequestPart && header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0 {
        peer.requestComplete(header.stream_id)
    }
    return 0
}

private func serverOnStreamClose(
    _ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    let peer = server(userData)
    peer.requests[streamID]?.closedWith = errorCode
    peer.openStreams -= 1
    return 0
}

private func serverReadBody(
    _ session: OpaquePointer?, _ streamID: Int32, _ buffer: UnsafeMutablePointer<UInt8>?, _ length: Int,
    _ flags: UnsafeMutablePointer<UInt32>?, _ source: UnsafeMutablePointer<nghttp2_data_source>?,
    _ userData: UnsafeMutableRawPointer?
) -> Int {
    server(userData).readBody(streamID, into: buffer!, length: length, flags: flags!)
}

private func serverSelectPadding(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ maxPayload: Int,
    _ userData: UnsafeMutableRawPointer?
) -> Int {
    let peer = server(userData)
    let length = frame!.pointee.hd.length
    guard peer.padTo > length else { return length }
    return min(peer.padTo, maxPayload)
}

/// The client side under test: requests with a token, a body and APNs-like headers, and what came back.
final class TestClient: HTTP2ClientSessionDelegate {
    struct Outcome: Equatable {
        var errorCode: UInt32
        var processed: Bool
        var status: Int
        var body: String
    }

    let output = MemoryOutput()
    private(set) var session: HTTP2ClientSession!
    var tokens: [Int: [UInt8]] = [:]
    var bodies: [Int: UnsafeMutableRawBufferPointer] = [:]
    var statuses: [Int: Int] = [:]
    var responseBodies: [Int: [UInt8]] = [:]
    var responseFields: [Int: [(String, String)]] = [:]
    var outcomes: [Int: Outcome] = [:]
    var closeOrder: [Int] = []
    var goAways: [(Int32, UInt32, String)] = []
    var settingsSeen: [Int?] = []
    private var authority: HPACKCachedField!
    private(set) var authorization: HPACKCachedField!
    private var topic: HPACKCachedField!
    private var pushType: HPACKCachedField!
    var extraHeaders: [Int: [(String, String)]] = [:]

    init(capacity: Int = 256, settings: HTTP2ClientSession.LocalSettings = .init(), firstStreamID: Int32 = 1) {
        super.init()
        session = HTTP2ClientSession(
            transport: output, delegate: self, capacity: capacity, settings: settings, firstStreamID: firstStreamID)
        authority = session.registerRepeatedField(
            nameIndex: HPACKStaticTable.authority, name: ":authority", value: "api.push.apple.com")
        authorization = session.registerRepeatedField(
            nameIndex: HPACKStaticTable.authorization, name: "authorization", value: "bearer first")
        topic = session.registerRepeatedField(
            nameIndex: nil, name: "apns-topic", value: "com.example.app.push-type.liveactivity")
        pushType = session.registerRepeatedField(nameIndex: nil, name: "apns-push-type", value: "liveactivity")
        session.start()
    }

    deinit { bodies.values.forEach { $0.deallocate() } }

    /// Queues request `request` with a token and a body of `bodySize` bytes (a pattern unique to it).
    @discardableResult
    func submit(_ request: Int, bodySize: Int = 64) -> Bool {
        tokens[request] = (0..<32).map { UInt8(truncatingIfNeeded: request &* 31 &+ $0 &* 7) }
        bodies[request]?.deallocate()
        let body = UnsafeMutableRawBufferPointer.allocate(byteCount: bodySize, alignment: 1)
        for index in 0..<bodySize { body[index] = UInt8(truncatingIfNeeded: request &+ index) }
        bodies[request] = body
        outcomes[request] = nil
        statuses[request] = nil
        responseBodies[request] = nil
        responseFields[request] = nil
        return session.submit(request: request)
    }

    func expectedPath(_ request: Int) -> String {
        "/3/device/"
            + tokens[request]!.map {
                String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16)
            }.joined()
    }

    func expectedBody(_ request: Int) -> [UInt8] { Array(bodies[request]!) }

    override func http2WriteRequestHeaders(request: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter)
    {
        writer.writeIndexed(HPACKStaticTable.methodPOST)
        writer.writeIndexed(HPACKStaticTable.schemeHTTPS)
        let prefix: StaticString = "/3/device/"
        tokens[request]!.withUnsafeBytes { token in
            writer.writeLiteralWithoutIndexing(
                nameIndex: HPACKStaticTable.path,
                valuePrefix: UnsafeRawBufferPointer(start: prefix.utf8Start, count: prefix.utf8CodeUnitCount),
                hexOf: token)
        }
        table.write(authority, into: &writer)
        table.write(authorization, into: &writer)
        table.write(pushType, into: &writer)
        table.write(topic, into: &writer)
        for (name, value) in extraHeaders[request] ?? [] {
            Array(name.utf8).withUnsafeBytes { nameBytes in
                Array(value.utf8).withUnsafeBytes { valueBytes in
                    writer.writeLiteralWithoutIndexing(name: nameBytes, value: valueBytes)
                }
            }
        }
    }

    /// Hands `bytes` to the session as one read.
    func feed(_ bytes: [UInt8]) throws(HTTP2ConnectionError) {
        let result: Result<Void, HTTP2ConnectionError> = bytes.withUnsafeBytes { raw in
            do throws(HTTP2ConnectionError) {
                try session.receive(raw)
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
    }

    override func http2RequestBody(request: Int) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(bodies[request]!) }

    override func http2ResponseHeader(request: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        let field = (String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self))
        responseFields[request, default: []].append(field)
        if field.0 == ":status" { statuses[request] = Int(field.1) }
    }

    override func http2ResponseData(request: Int, bytes: UnsafeRawBufferPointer) {
        responseBodies[request, default: []].append(contentsOf: bytes)
    }

    override func http2StreamClosed(request: Int, errorCode: UInt32, processed: Bool) {
        precondition(outcomes[request] == nil, "request \(request) closed twice")
        outcomes[request] = Outcome(
            errorCode: errorCode, processed: processed, status: statuses[request] ?? 0,
            body: String(decoding: responseBodies[request] ?? [], as: UTF8.self))
        closeOrder.append(request)
    }

    override func http2RemoteSettingsChanged(maxConcurrentStreams: Int?) { settingsSeen.append(maxConcurrentStreams) }

    override func http2GoAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: UnsafeRawBufferPointer) {
        goAways.append((lastStreamID, errorCode, String(decoding: debugData, as: UTF8.self)))
    }
}

/// Moves bytes both ways until neither side has anything more to say.
/// `chunk` splits what the client reads into pieces of that size (frames then straddle reads).
func pump(
    _ client: TestClient, _ server: NGHTTP2Server, chunk: Int = .max, rounds: Int = 10_000
) throws(HTTP2ConnectionError) {
    for _ in 0..<rounds {
        client.session.produce()
        let toServer = client.output.take()
        if !toServer.isEmpty {
            let consumed = server.receive(toServer)
            precondition(
                consumed >= 0,
                "nghttp2 rejected the client's bytes: \(String(cString: nghttp2_strerror(Int32(consumed))))")
        }
        let toClient = server.send()
        if !toClient.isEmpty {
            var offset = 0
            while offset < toClient.count {
                let end = min(toClient.count, offset + chunk)
                try client.feed(Array(toClient[offset..<end]))
                offset = end
            }
        }
        if toServer.isEmpty && toClient.isEmpty && !client.session.wantsWrite { return }
    }
}

/// One raw HTTP/2 frame, for feeding the client bytes no well-behaved server would send.
func rawFrame(type: UInt8, flags: UInt8 = 0, stream: Int32 = 0, payload: [UInt8] = []) -> [UInt8] {
    let length = payload.count
    return [UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff), type, flags]
        + withUnsafeBytes(of: UInt32(bitPattern: stream).bigEndian, Array.init) + payload
}

/// The frames in `bytes` (type, flags, stream, payload), in order.
func parseFrames(_ bytes: [UInt8]) -> [(type: UInt8, flags: UInt8, stream: Int32, payload: [UInt8])] {
    var frames: [(type: UInt8, flags: UInt8, stream: Int32, payload: [UInt8])] = []
    var offset = 0
    while offset + 9 <= bytes.count {
        let length = Int(bytes[offset]) << 16 | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
        let stream =
            Int32(bytes[offset + 5] & 0x7f) << 24 | Int32(bytes[offset + 6]) << 16 | Int32(bytes[offset + 7]) << 8
            | Int32(bytes[offset + 8])
        guard offset + 9 + length <= bytes.count else { break }
        frames.append(
            (bytes[offset + 3], bytes[offset + 4], stream, Array(bytes[(offset + 9)..<(offset + 9 + length)])))
        offset += 9 + length
    }
    return frames
}

import CNghttp2
import FanfareHTTP2

#if canImport(Glibc)
import Glibc
#endif

/// The server side under test: our `HTTP2ServerSession`, answering what the test script says.
final class TestServer: HTTP2ServerSessionDelegate {
    struct Request {
        var streamID: Int32
        var headers: [(String, String)] = []
        var body: [UInt8] = []
        var ended = false
        var closedWith: UInt32?
    }

    /// What the server answers a complete request with (nil: hold it).
    var answer: (Request) -> (status: Int, fields: [(String, String)], body: [UInt8])? = { _ in (200, [], []) }
    /// Refuse streams whose id is in here (the owner's refusal).
    var refuse: Set<Int32> = []
    let output = MemoryOutput(capacity: 256 * 1024)
    private(set) var session: HTTP2ServerSession!
    /// Requests by stream number while open; `finished` keeps every request by stream id once closed.
    var open: [Int: Request] = [:]
    var finished: [Int32: Request] = [:]
    var responses: [Int: (status: Int, fields: [(String, String)], body: [UInt8])] = [:]
    var resetsSent: [(Int32, UInt32)] = []
    var maxOpen = 0
    private var responseBodies: [Int: UnsafeMutableRawBufferPointer] = [:]

    init(capacity: Int = 1000, settings: HTTP2ServerSession.LocalSettings = .init()) {
        super.init()
        session = HTTP2ServerSession(transport: output, delegate: self, capacity: capacity, settings: settings)
        session.start()
    }

    deinit { responseBodies.values.forEach { $0.deallocate() } }

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

    /// Feeds `bytes` and returns the connection error they caused, if any.
    func feedExpectingError(_ bytes: [UInt8]) -> HTTP2ConnectionError? {
        do throws(HTTP2ConnectionError) {
            try feed(bytes)
            return nil
        } catch {
            return error
        }
    }

    func respond(_ stream: Int, status: Int, fields: [(String, String)] = [], body: [UInt8] = []) {
        responses[stream] = (status, fields, body)
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: max(body.count, 1), alignment: 1)
        body.withUnsafeBytes { if $0.count > 0 { copy.copyMemory(from: $0) } }
        responseBodies[stream]?.deallocate()
        responseBodies[stream] = copy
        session.respond(stream: stream, streamID: open[stream]!.streamID)
    }

    override func http2StreamOpened(stream: Int, streamID: Int32) -> Bool {
        if refuse.contains(streamID) { return false }
        precondition(open[stream] == nil, "stream number \(stream) handed out twice")
        open[stream] = Request(streamID: streamID)
        maxOpen = max(maxOpen, open.count)
        return true
    }

    override func http2RequestHeader(stream: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        open[stream]!.headers.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
    }

    override func http2RequestData(stream: Int, bytes: UnsafeRawBufferPointer) {
        open[stream]!.body.append(contentsOf: bytes)
    }

    override func http2RequestEnded(stream: Int) {
        open[stream]!.ended = true
        if let reply = answer(open[stream]!) {
            respond(stream, status: reply.status, fields: reply.fields, body: reply.body)
        }
    }

    override func http2WriteResponseHeaders(stream: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter)
    {
        let response = responses[stream]!
        if let index = HPACKStaticTable.statusIndex(response.status) {
            writer.writeIndexed(index)
        } else {
            Array(String(response.status).utf8).withUnsafeBytes {
                writer.writeLiteralWithoutIndexing(
                    nameIndex: HPACKStaticTable.statusNameIndex, value: $0, huffman: false)
            }
        }
        for (name, value) in response.fields {
            Array(name.utf8).withUnsafeBytes { name in
                Array(value.utf8).withUnsafeBytes { value in writer.writeLiteralNeverIndexed(name: name, value: value) }
            }
        }
    }

    override func http2ResponseBody(stream: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(
            rebasing: UnsafeRawBufferPointer(responseBodies[stream]!)[0..<responses[stream]!.body.count])
    }

    override func http2StreamClosed(stream: Int, errorCode: UInt32) {
        var request = open.removeValue(forKey: stream)!
        request.closedWith = errorCode
        finished[request.streamID] = request
    }

    override func http2ResetSent(streamID: Int32, errorCode: UInt32) {
        resetsSent.append((streamID, errorCode))
    }
}

/// One response as nghttp2's client saw it.
struct ClientResponse {
    var headers: [(String, String)] = []
    var body: [UInt8] = []
    var closedWith: UInt32?
    var status: String? { headers.first { $0.0 == ":status" }?.1 }
}

/// nghttp2 1.52's own client session, in memory: the other end of the server session in these tests.
final class NGHTTP2Client {
    private(set) var session: OpaquePointer!
    var outbound: [UInt8] = []
    var responses: [Int32: ClientResponse] = [:]
    var goAway: (lastStreamID: Int32, errorCode: UInt32)?
    var remoteMaxConcurrentStreams: UInt32 {
        nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
    }
    private var bodies: [Int32: [UInt8]] = [:]
    private var bodyOffsets: [Int32: Int] = [:]

    init(settings: [(nghttp2_settings_id, UInt32)] = [], options: ((OpaquePointer) -> Void)? = nil) {
        var callbacks: OpaquePointer?
        nghttp2_session_callbacks_new(&callbacks)
        nghttp2_session_callbacks_set_send_callback(callbacks, clientSend)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, clientOnHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, clientOnData)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, clientOnFrame)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, clientOnStreamClose)
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        options?(option!)
        var created: OpaquePointer?
        let result = nghttp2_session_client_new2(&created, callbacks, Unmanaged.passUnretained(self).toOpaque(), option)
        precondition(result == 0)
        nghttp2_option_del(option)
        nghttp2_session_callbacks_del(callbacks)
        session = created
        var entries = settings.map { nghttp2_settings_entry(settings_id: Int32($0.0.rawValue), value: $0.1) }
        nghttp2_submit_settings(session, 0, &entries, entries.count)
    }

    deinit { nghttp2_session_del(session) }

    /// Submits a POST with `fields` after the pseudo-headers and `body`; returns its stream id.
    @discardableResult
    func request(path: String, fields: [(String, String)] = [], body: [UInt8] = [], noIndex: Set<String> = []) -> Int32
    {
        let all =
            [(":method", "POST"), (":scheme", "https"), (":authority", "api.push.apple.com"), (":path", path)] + fields
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
                    noIndex.contains(all[index].0) ? NGHTTP2_NV_FLAG_NO_INDEX.rawValue : NGHTTP2_NV_FLAG_NONE.rawValue))
        }
        if body.isEmpty {
            return nghttp2_submit_request(session, nil, &nva, nva.count, nil, nil)
        }
        var provider = nghttp2_data_provider()
        provider.read_callback = clientReadBody
        let streamID = nghttp2_submit_request(session, nil, &nva, nva.count, &provider, nil)
        precondition(streamID > 0)
        bodies[streamID] = body
        bodyOffsets[streamID] = 0
        return streamID
    }

    func readBody(
        _ streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>
    ) -> Int {
        let body = bodies[streamID] ?? []
        let offset = bodyOffsets[streamID] ?? 0
        let count = min(length, body.count - offset)
        body.withUnsafeBufferPointer {
            UnsafeMutableRawPointer(buffer).copyMemory(from: $0.baseAddress! + offset, byteCount: count)
        }
        bodyOffsets[streamID] = offset + count
        if offset + count == body.count { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return count
    }

    /// Feeds the server's bytes; returns nghttp2's result (negative when it found a protocol error).
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
}

private func client(_ userData: UnsafeMutableRawPointer?) -> NGHTTP2Client {
    Unmanaged<NGHTTP2Client>.fromOpaque(userData!).takeUnretainedValue()
}

private func clientSend(
    _ session: OpaquePointer?, _ data: UnsafePointer<UInt8>?, _ length: Int, _ flags: Int32,
    _ userData: UnsafeMutableRawPointer?
) -> Int {
    client(userData).outbound.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
    return length
}

private func clientOnHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
    _ value: UnsafePointer<UInt8>?, _ valueLength: Int, _ flags: UInt8, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    let field = (
        String(decoding: UnsafeBufferPointer(start: name, count: nameLength), as: UTF8.self),
        String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self)
    )
    client(userData).responses[frame!.pointee.hd.stream_id, default: ClientResponse()].headers.append(field)
    return 0
}

private func clientOnData(
    _ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32, _ data: UnsafePointer<UInt8>?, _ length: Int,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    client(userData).responses[streamID, default: ClientResponse()].body.append(
        contentsOf: UnsafeBufferPointer(start: data, count: length))
    return 0
}

private func clientOnFrame(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    if frame!.pointee.hd.type == UInt8(NGHTTP2_GOAWAY.rawValue) {
        client(userData).goAway = (frame!.pointee.goaway.last_stream_id, frame!.pointee.goaway.error_code)
    }
    return 0
}

private func clientOnStreamClose(
    _ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    client(userData).responses[streamID, default: ClientResponse()].closedWith = errorCode
    return 0
}

private func clientReadBody(
    _ session: OpaquePointer?, _ streamID: Int32, _ buffer: UnsafeMutablePointer<UInt8>?, _ length: Int,
    _ flags: UnsafeMutablePointer<UInt32>?, _ source: UnsafeMutablePointer<nghttp2_data_source>?,
    _ userData: UnsafeMutableRawPointer?
) -> Int {
    client(userData).readBody(streamID, into: buffer!, length: length, flags: flags!)
}

/// Moves bytes both ways until neither side has anything more to say (`chunk` splits what the server reads).
func pump(
    _ server: TestServer, _ client: NGHTTP2Client, chunk: Int = .max, rounds: Int = 10_000
) throws(HTTP2ConnectionError) {
    for _ in 0..<rounds {
        let toServer = client.send()
        var offset = 0
        while offset < toServer.count {
            let end = min(toServer.count, offset + chunk)
            try server.feed(Array(toServer[offset..<end]))
            offset = end
        }
        server.session.produce()
        let toClient = server.output.take()
        if !toClient.isEmpty {
            let consumed = client.receive(toClient)
            precondition(
                consumed >= 0,
                "nghttp2 rejected the server's bytes: \(String(cString: nghttp2_strerror(Int32(consumed))))")
        }
        if toServer.isEmpty && toClient.isEmpty { return }
    }
}

/// The client connection preface and an empty SETTINGS frame.
let clientPrefaceBytes: [UInt8] =
    Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + rawFrame(type: HTTP2FrameType.settings.rawValue)

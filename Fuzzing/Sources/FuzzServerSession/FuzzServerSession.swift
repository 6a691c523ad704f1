// The simulator's HTTP/2 session (`HTTP2ServerSession`) fed a hostile client's bytes, in memory: after the
// client preface, the input interleaves reads (split anywhere) with what the simulator does (respond, produce,
// a new stream limit, GOAWAY, a backed-up transport). Checked: every stream the session opens closes exactly
// once; request fields, body bytes and ends only reach open streams, and the end once; a response is asked for
// only for open streams; everything the session writes is whole, well-formed frames of the kinds a server
// sends; a failed session refuses further reads; at the end every stream still open closes with the connection.
//
// Input: config byte (bit 0: small windows; bits 1-2: header table size 4096, 256, 0, 4096), then ops (% 8):
//   0-2 read: a chunk of client bytes      3 respond: stream byte, body size u16
//   4 produce                              5 advertise: limit byte (% capacity + 1)
//   6 graceful GOAWAY                      7 toggle a backed-up transport
import FanfareHTTP2
import FuzzHTTP2Support
import FuzzSupport

@main
enum FuzzServerSession {
    static func main() {
        runFuzzer(testOneInput, seeds: seeds)
    }
}

let capacity = 8
nonisolated(unsafe) let bodyPattern: UnsafeMutableRawBufferPointer = {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65535, alignment: 16)
    for index in 0..<buffer.count { buffer[index] = UInt8(truncatingIfNeeded: index &* 31 &+ 7) }
    return buffer
}()

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let config = input.byte()
    var settings = HTTP2ServerSession.LocalSettings()
    settings.headerTableSize = [4096, 256, 0, 4096][Int(config >> 1) & 3]
    if config & 1 != 0 { settings.initialWindowSize = 1000 }
    settings.maxConcurrentStreams = capacity
    settings.maxQueuedControlFrames = 50
    settings.maxResetsBeyondAnswers = 50
    settings.maxEmptyFrames = 50
    let sink = FrameChecker(side: .server)
    let server = Server()
    let session = HTTP2ServerSession(transport: sink, delegate: server, capacity: capacity, settings: settings)
    server.session = session
    session.start()
    sink.checkFrames()

    var failed = !server.read(clientPreface)
    while !input.isAtEnd && !failed {
        switch input.byte() % 8 {
        case 0, 1, 2:
            failed = !server.read(input.chunk())
        case 3:
            server.respond(Int(input.byte()) % capacity, bodySize: input.uint16())
        case 4:
            session.produce()
        case 5:
            session.advertise(maxConcurrentStreams: Int(input.byte()) % (capacity + 1))
        case 6:
            session.goAway()
        default:
            sink.backedUp.toggle()
        }
        sink.checkFrames()
    }
    if failed {
        require(session.failed && session.isFinished, "receive threw but the session is not failed")
        require(!server.read(clientPreface), "a failed session accepted more bytes")
    }
    session.connectionLost()
    require(server.open.allSatisfy { !$0 }, "streams still open after the connection ended: \(server.open)")
    sink.checkFrames()
    return 0
}

// MARK: - The owner of the session

final class Server: HTTP2ServerSessionDelegate {
    var session: HTTP2ServerSession!
    var open = [Bool](repeating: false, count: capacity)
    var ended = [Bool](repeating: false, count: capacity)
    var streamIDs = [Int32](repeating: 0, count: capacity)
    var bodySizes = [Int](repeating: 0, count: capacity)
    var lastStreamID: Int32 = 0

    func read(_ bytes: UnsafeRawBufferPointer) -> Bool {
        do {
            try session.receive(bytes)
            return true
        } catch {
            require(!error.message.isEmpty, "a connection error without a message")
            return false
        }
    }

    func read(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { read($0) } }

    func respond(_ stream: Int, bodySize: Int) {
        bodySizes[stream] = bodySize
        let accepted = session.respond(stream: stream, streamID: streamIDs[stream])
        require(!accepted || open[stream], "a response accepted for stream number \(stream), which is not open")
    }

    override func http2StreamOpened(stream: Int, streamID: Int32) -> Bool {
        require(stream >= 0 && stream < capacity && !open[stream], "stream number \(stream) handed out while in use")
        require(streamID & 1 == 1 && streamID > lastStreamID, "stream \(streamID) opened after \(lastStreamID)")
        lastStreamID = streamID
        // The owner refuses some: the session resets those and reports nothing more about them.
        guard streamID % 7 != 0 else { return false }
        open[stream] = true
        ended[stream] = false
        streamIDs[stream] = streamID
        return true
    }

    override func http2RequestHeader(stream: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        require(open[stream] && !ended[stream], "a request field for stream number \(stream), not receiving")
    }

    override func http2RequestData(stream: Int, bytes: UnsafeRawBufferPointer) {
        require(open[stream] && !ended[stream], "request data for stream number \(stream), not receiving")
        require(!bytes.isEmpty, "empty request data reported")
    }

    override func http2RequestEnded(stream: Int) {
        require(open[stream] && !ended[stream], "request end for stream number \(stream), twice or not open")
        ended[stream] = true
    }

    override func http2WriteResponseHeaders(stream: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter) {
        require(open[stream], "response headers for stream number \(stream), not open")
        writer.writeIndexed(bodySizes[stream] == 0 ? HPACKStaticTable.status200 : HPACKStaticTable.status400)
    }

    override func http2ResponseBody(stream: Int) -> UnsafeRawBufferPointer {
        require(open[stream], "response body for stream number \(stream), not open")
        return UnsafeRawBufferPointer(rebasing: bodyPattern[0..<bodySizes[stream]])
    }

    override func http2StreamClosed(stream: Int, errorCode: UInt32) {
        require(stream >= 0 && stream < capacity && open[stream], "stream number \(stream) closed twice or never opened")
        open[stream] = false
    }

    override func http2ResetSent(streamID: Int32, errorCode: UInt32) {}
}

// MARK: - The preface

let clientPreface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
    + frame(.settings, [setting(HTTP2SettingID.enablePush, 0), setting(HTTP2SettingID.initialWindowSize, 1 << 20)].flatMap { $0 })
    + frame(.settings, flags: HTTP2FrameFlag.ack)

// MARK: - Seeds

/// Requests as APNs clients send them (literals, then indexed repeats), bodies, split reads, resets, SETTINGS,
/// CONTINUATION, padding, window updates.
func seeds() -> [Seed] {
    let path = [0x04, 0x0a] + Array("/3/device/".utf8)
    let topic = [0x40, 0x0a] + Array("apns-topic".utf8) + [0x08] + Array("com.x.y".utf8)  // inserted: index 62
    let first = [0x83, 0x87] + path + topic
    let again = [0x83, 0x87] + path + [0xbe]
    let body = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
    var seeds: [Seed] = []

    func program(config: UInt8 = 0, _ ops: (inout FuzzInputWriter) -> Void) -> [UInt8] {
        var writer = FuzzInputWriter()
        writer.byte(config)
        ops(&writer)
        return writer.bytes
    }
    func read(_ writer: inout FuzzInputWriter, _ bytes: [UInt8]) {
        writer.byte(0)
        writer.chunk(bytes)
    }
    func respond(_ writer: inout FuzzInputWriter, _ stream: UInt8, body: Int = 0) {
        writer.byte(3)
        writer.byte(stream)
        writer.uint16(body)
    }

    seeds.append(Seed("requests-and-answers", program { w in
        read(&w, frame(.headers, flags: HTTP2FrameFlag.endHeaders, stream: 1, first) + frame(.data, flags: HTTP2FrameFlag.endStream, stream: 1, body))
        read(&w, frame(.headers, flags: HTTP2FrameFlag.endHeaders, stream: 3, again) + frame(.data, flags: HTTP2FrameFlag.endStream, stream: 3, body))
        respond(&w, 0)
        respond(&w, 1, body: 40)
        w.byte(4)
        w.byte(5)
        w.byte(8)
    }))
    seeds.append(Seed("split-and-continuation", program(config: 2) { w in
        let bytes = frame(.headers, flags: HTTP2FrameFlag.padded, stream: 1, [2] + first + [0, 0])
            + frame(.continuation, flags: HTTP2FrameFlag.endHeaders, stream: 1, [])
            + frame(.data, flags: HTTP2FrameFlag.endStream | HTTP2FrameFlag.padded, stream: 1, [1] + body + [0])
        for start in stride(from: 0, to: bytes.count, by: 7) { read(&w, Array(bytes[start..<min(bytes.count, start + 7)])) }
        respond(&w, 0, body: 20_000)
        w.byte(4)
        read(&w, frame(.windowUpdate, stream: 1, uint32(40_000)) + frame(.windowUpdate, uint32(40_000)))
        w.byte(4)
    }))
    seeds.append(Seed("resets-settings-goaway", program(config: 1) { w in
        read(&w, frame(.headers, flags: HTTP2FrameFlag.endHeaders, stream: 1, first) + frame(.rstStream, stream: 1, uint32(HTTP2ErrorCode.cancel)))
        read(&w, frame(.settings, [setting(HTTP2SettingID.initialWindowSize, 10), setting(HTTP2SettingID.headerTableSize, 0)].flatMap { $0 }))
        read(&w, frame(.headers, flags: HTTP2FrameFlag.endHeaders | HTTP2FrameFlag.endStream, stream: 3, again))
        w.byte(5)
        w.byte(1)
        read(&w, frame(.ping, [1, 2, 3, 4, 5, 6, 7, 8]) + frame(.priority, stream: 5, [0, 0, 0, 1, 16]))
        w.byte(7)
        respond(&w, 0, body: 100)
        w.byte(4)
        w.byte(7)
        w.byte(4)
        w.byte(6)
        read(&w, frame(.headers, flags: HTTP2FrameFlag.endHeaders | HTTP2FrameFlag.endStream, stream: 5, again))
    }))
    return seeds
}

// The client's HTTP/2 session (`HTTP2ClientSession`) fed a hostile server's bytes, in memory: after the
// server's first SETTINGS, the input interleaves reads (split anywhere) with what the connection does
// (submit, produce, cancel, ping, a backed-up transport). Checked: every request ends exactly once and only
// after it was submitted; responses only reach requests that were sent; `processed` only for sent requests;
// everything the session writes is whole, well-formed frames of the kinds a client sends; a failed session
// refuses further reads.
//
// Input: config byte (bit 0: reportsOnlyStatus; bits 1-2: header table size 4096, 256, 0, 4096; bit 3:
// small windows), then ops (op byte % 8):
//   0-2 read: a chunk of server bytes     3 submit: request byte, body size u16 (× 1..4)
//   4 produce                             5 cancel: request byte
//   6 ping                                7 toggle a backed-up transport
import FanfareHTTP2
import FuzzHTTP2Support
import FuzzSupport

@main
enum FuzzClientSession {
    static func main() {
        runFuzzer(testOneInput, seeds: seeds)
    }
}

let capacity = 8
/// Bodies are slices of one pattern buffer; up to 4 × 65535 octets exercises flow control.
nonisolated(unsafe) let bodyPattern: UnsafeMutableRawBufferPointer = {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4 * 65535, alignment: 16)
    for index in 0..<buffer.count { buffer[index] = UInt8(truncatingIfNeeded: index &* 31 &+ 7) }
    return buffer
}()

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let config = input.byte()
    var settings = HTTP2ClientSession.LocalSettings()
    settings.reportsOnlyStatus = config & 1 != 0
    settings.headerTableSize = [4096, 256, 0, 4096][Int(config >> 1) & 3]
    if config & 8 != 0 {
        settings.initialWindowSize = 65535
        settings.connectionWindowSize = 65535
    }
    settings.maxConcurrentStreams = capacity
    settings.maxEmptyFrames = 50  // within reach of an input: the flood guard's end is fuzzed too
    let sink = FrameChecker(side: .client)
    let client = Client()
    let session = HTTP2ClientSession(transport: sink, delegate: client, capacity: capacity, settings: settings)
    client.session = session
    client.register()
    session.start()
    sink.checkPreface()

    // The server's preface: SETTINGS (as the simulator sends them) and the ACK of ours.
    var failed = !client.read(serverPreface)
    while !input.isAtEnd && !failed {
        switch input.byte() % 8 {
        case 0, 1, 2:
            failed = !client.read(input.chunk())
            if !failed { session.produce() }
        case 3:
            let request = Int(input.byte()) % capacity
            let bodySize = min(input.uint16() * (Int(input.byte()) % 4 + 1), bodyPattern.count)
            client.submit(request, bodySize: bodySize)
        case 4:
            session.produce()
        case 5:
            client.cancel(Int(input.byte()) % capacity)
        case 6:
            session.sendPing()
        default:
            sink.backedUp.toggle()
        }
        sink.checkFrames()
    }
    if failed {
        // A connection error: the session said goodbye and refuses anything more.
        require(session.failed, "receive threw but the session is not failed")
        require(!client.read(serverPreface), "a failed session accepted more bytes")
        require(!session.acceptsRequests, "a failed session accepts requests")
    } else {
        // The owner gives up on whatever is left: each request ends now, once.
        for request in 0..<capacity { client.cancel(request) }
        require(client.inUse.allSatisfy { !$0 }, "requests still in use after cancelling all: \(client.inUse)")
    }
    sink.checkFrames()
    return 0
}

// MARK: - The owner of the session

final class Client: HTTP2ClientSessionDelegate {
    var session: HTTP2ClientSession!
    var inUse = [Bool](repeating: false, count: capacity)
    var sent = [Bool](repeating: false, count: capacity)
    var bodySizes = [Int](repeating: 0, count: capacity)
    private var authority: HPACKCachedField!
    private var authorization: HPACKCachedField!
    private var topic: HPACKCachedField!
    private let token: [UInt8] = (0..<32).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }

    func register() {
        authority = session.registerRepeatedField(nameIndex: HPACKStaticTable.authority, name: ":authority", value: "api.push.apple.com")
        authorization = session.registerRepeatedField(
            nameIndex: HPACKStaticTable.authorization, name: "authorization", value: "bearer eyJhbGciOiJFUzI1NiJ9.e30.c2ln")
        topic = session.registerRepeatedField(nameIndex: nil, name: "apns-topic", value: "com.example.app.push-type.liveactivity")
    }

    /// One read; false when the session found a connection error.
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

    func submit(_ request: Int, bodySize: Int) {
        guard !inUse[request] else { return }
        bodySizes[request] = bodySize
        sent[request] = false
        if session.submit(request: request) {
            inUse[request] = true
        } else {
            require(!session.acceptsRequests, "submit refused while the session accepts requests")
        }
    }

    func cancel(_ request: Int) {
        session.cancel(request: request)
        require(!inUse[request], "cancel returned before request \(request) closed")
    }

    override func http2WriteRequestHeaders(request: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter) {
        require(inUse[request] && !sent[request], "headers for request \(request), in use \(inUse[request]), sent \(sent[request])")
        sent[request] = true
        writer.writeIndexed(HPACKStaticTable.methodPOST)
        writer.writeIndexed(HPACKStaticTable.schemeHTTPS)
        let prefix: StaticString = "/3/device/"
        token.withUnsafeBytes { token in
            writer.writeLiteralWithoutIndexing(
                nameIndex: HPACKStaticTable.path, valuePrefix: UnsafeRawBufferPointer(start: prefix.utf8Start, count: prefix.utf8CodeUnitCount),
                hexOf: token)
        }
        table.write(authority, into: &writer)
        table.write(authorization, into: &writer)
        table.write(topic, into: &writer)
    }

    override func http2RequestBody(request: Int) -> UnsafeRawBufferPointer {
        require(inUse[request], "body of request \(request), not in use")
        return UnsafeRawBufferPointer(rebasing: bodyPattern[0..<bodySizes[request]])
    }

    override func http2ResponseHeader(request: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        require(inUse[request] && sent[request], "response header for request \(request) that is not open")
    }

    override func http2ResponseData(request: Int, bytes: UnsafeRawBufferPointer) {
        require(inUse[request] && sent[request], "response data for request \(request) that is not open")
        require(!bytes.isEmpty, "empty response data reported")
    }

    override func http2StreamClosed(request: Int, errorCode: UInt32, processed: Bool) {
        require(request >= 0 && request < capacity, "closed request \(request) out of range")
        require(inUse[request], "request \(request) closed twice or never submitted")
        require(!processed || sent[request], "request \(request) processed although it was never sent")
        inUse[request] = false
        sent[request] = false
    }

    override func http2RemoteSettingsChanged(maxConcurrentStreams: Int?) {}

    override func http2GoAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: UnsafeRawBufferPointer) {}
}

// MARK: - The preface

let serverPreface =
    frame(.settings, [setting(HTTP2SettingID.maxConcurrentStreams, 1000), setting(HTTP2SettingID.headerTableSize, 4096)].flatMap { $0 })
    + frame(.settings, flags: HTTP2FrameFlag.ack)

// MARK: - Seeds

/// Responses as APNs sends them (200 with apns-id; 400 with a JSON reason; HPACK-indexed repeats), split
/// reads, RST_STREAM, GOAWAY, SETTINGS changes, WINDOW_UPDATE for large bodies, CONTINUATION, padding.
func seeds() -> [Seed] {
    let status200: [UInt8] = [0x88]  // indexed :status 200
    let status400: [UInt8] = [0x8c]
    let apnsID = Array("0b1cde6a-7b3c-4c6f-9a39-3f3f1ec3c1a0".utf8)
    let literalID = [0x40, 0x07] + Array("apns-id".utf8) + [0x24] + apnsID  // inserted: index 62
    let reason = Array(#"{"reason":"BadDeviceToken"}"#.utf8)
    var seeds: [Seed] = []

    func program(config: UInt8 = 0, _ ops: (inout FuzzInputWriter) -> Void) -> [UInt8] {
        var writer = FuzzInputWriter()
        writer.byte(config)
        ops(&writer)
        return writer.bytes
    }
    func submit(_ writer: inout FuzzInputWriter, _ request: UInt8, body: Int = 60) {
        writer.byte(3)
        writer.byte(request)
        writer.uint16(body)
        writer.byte(0)
    }
    func read(_ writer: inout FuzzInputWriter, _ bytes: [UInt8]) {
        writer.byte(0)
        writer.chunk(bytes)
    }

    seeds.append(Seed("ok-and-rejected", program { w in
        submit(&w, 0)
        submit(&w, 1)
        w.byte(4)
        read(&w, frame(.headers, flags: HTTP2FrameFlag.endHeaders | HTTP2FrameFlag.endStream, stream: 1, status200 + literalID))
        read(&w, frame(.headers, flags: HTTP2FrameFlag.endHeaders, stream: 3, status400 + [0xbe] + [0x0f, 0x10, 0x10] + Array("application/json".utf8))
            + frame(.data, flags: HTTP2FrameFlag.endStream, stream: 3, reason))
    }))
    seeds.append(Seed("split-reads", program(config: 1) { w in
        submit(&w, 2)
        w.byte(4)
        let bytes = frame(.headers, flags: HTTP2FrameFlag.endHeaders | HTTP2FrameFlag.endStream, stream: 1, status200 + literalID)
        for start in stride(from: 0, to: bytes.count, by: 5) { read(&w, Array(bytes[start..<min(bytes.count, start + 5)])) }
    }))
    seeds.append(Seed("continuation-and-padding", program { w in
        submit(&w, 0)
        w.byte(4)
        read(&w, frame(.headers, flags: HTTP2FrameFlag.padded, stream: 1, [3] + status200 + [0, 0, 0])
            + frame(.continuation, flags: HTTP2FrameFlag.endHeaders, stream: 1, literalID)
            + frame(.data, flags: HTTP2FrameFlag.endStream | HTTP2FrameFlag.padded, stream: 1, [2, 0x7b, 0x7d, 0, 0]))
    }))
    seeds.append(Seed("reset-and-goaway", program { w in
        for request: UInt8 in 0..<4 { submit(&w, request) }
        w.byte(4)
        read(&w, frame(.rstStream, stream: 1, uint32(HTTP2ErrorCode.refusedStream)))
        read(&w, frame(.goAway, [0, 0, 0, 3] + uint32(HTTP2ErrorCode.noError) + Array(#"{"reason":"Shutdown"}"#.utf8)))
        read(&w, frame(.headers, flags: HTTP2FrameFlag.endHeaders | HTTP2FrameFlag.endStream, stream: 3, status200))
        submit(&w, 5)
    }))
    seeds.append(Seed("settings-and-windows", program(config: 8) { w in
        read(&w, frame(.settings, [setting(HTTP2SettingID.initialWindowSize, 10), setting(HTTP2SettingID.maxConcurrentStreams, 1),
            setting(HTTP2SettingID.headerTableSize, 0), setting(HTTP2SettingID.maxFrameSize, 20000)].flatMap { $0 }))
        submit(&w, 0, body: 3000)
        submit(&w, 1, body: 100)
        w.byte(4)
        read(&w, frame(.windowUpdate, stream: 1, uint32(5000)) + frame(.windowUpdate, uint32(70000)))
        read(&w, frame(.settings, [setting(HTTP2SettingID.initialWindowSize, 65535)].flatMap { $0 }))
        read(&w, frame(.ping, [1, 2, 3, 4, 5, 6, 7, 8]) + frame(.priority, stream: 1, [0, 0, 0, 0, 16]))
        w.byte(7)
        w.byte(4)
        w.byte(7)
        w.byte(4)
        read(&w, frame(.headers, flags: HTTP2FrameFlag.endHeaders | HTTP2FrameFlag.endStream, stream: 1, status200))
        w.byte(5)
        w.byte(1)
    }))
    seeds.append(Seed("large-response", program { w in
        submit(&w, 0)
        w.byte(4)
        read(&w, frame(.headers, flags: HTTP2FrameFlag.endHeaders, stream: 1, status400)
            + frame(.data, stream: 1, [UInt8](repeating: 0x20, count: 16000))
            + frame(.data, flags: HTTP2FrameFlag.endStream, stream: 1, reason))
    }))
    return seeds
}

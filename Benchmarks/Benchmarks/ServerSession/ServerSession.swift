// The simulator's side of a push: `HTTP2ServerSession` (FanfareHTTP2) reading one request (HEADERS with the
// APNs fields as a client sends them the first time: literals, token path, JWT; then a 100-byte DATA with
// END_STREAM), handing each field and the body to its delegate, and writing the 200 with `apns-id` into the
// transport's staging buffer. 0 mallocs per request (Thresholds/), as for the client.
import Benchmark
import FanfareHTTP2

let benchmarks: @Sendable () -> Void = {
    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(1),
        maxIterations: 10_000,
        thresholds: [.mallocCountTotal: BenchmarkThresholds(absolute: [.p90: 0])]
    )

    // One request in, one response out, per operation (1000 per iteration).
    Benchmark("AnswerRequest", configuration: configuration) { benchmark, harness in
        for _ in benchmark.scaledIterations {
            harness.answerOne()
        }
        blackHole(harness.answered)
    } setup: {
        ServerHarness()
    }
}

/// A staging buffer that forgets what was written (the socket, for the benchmark).
final class DiscardingSink: HTTP2FrameSink {
    private let scratch = UnsafeMutableRawPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    private(set) var written = 0
    override var plaintextCapacity: Int { 64 * 1024 }
    override var isBackedUp: Bool { false }
    override func reservePlaintext(_ count: Int) -> UnsafeMutableRawPointer? { scratch }
    override func commitPlaintext(_ count: Int) { written &+= count }
    override func setNeedsFlush() {}
}

/// The session, its delegate (answering every request at once with 200 + apns-id) and one request's frames.
final class ServerHarness: HTTP2ServerSessionDelegate, @unchecked Sendable {
    let sink = DiscardingSink()
    private(set) var session: HTTP2ServerSession!
    private let request: UnsafeMutableRawBufferPointer
    private let headersLength: Int
    private var streamID: Int32 = 1
    private(set) var answered = 0
    private var bodyBytes = 0
    private let apnsID: UnsafeMutableRawBufferPointer
    private var fieldCount = 0
    private static let apnsIDName: StaticString = "apns-id"

    override init() {
        let token = String(repeating: "5f", count: 40)
        let jwt = "eyJhbGciOiJFUzI1NiIsImtpZCI6IkZBTkZBUkUwMDEifQ." + String(repeating: "x", count: 60) + "." + String(repeating: "y", count: 86)
        request = .allocate(byteCount: 4096, alignment: 16)
        let fields: [(Int, String)] = [
            (HPACKStaticTable.authority, "api.push.apple.com"), (HPACKStaticTable.path, "/3/device/\(token)"),
            (HPACKStaticTable.authorization, "bearer \(jwt)"),
        ]
        var writer = HPACKBlockWriter(destination: request.baseAddress! + 9, capacity: 2048)
        writer.writeIndexed(HPACKStaticTable.methodPOST)
        writer.writeIndexed(HPACKStaticTable.schemeHTTPS)
        for (index, value) in fields {
            Array(value.utf8).withUnsafeBytes { writer.writeLiteralWithoutIndexing(nameIndex: index, value: $0, huffman: true) }
        }
        for (name, value) in [("apns-topic", "com.example.fanfare.push-type.liveactivity"), ("apns-push-type", "liveactivity"),
                              ("apns-priority", "10"), ("apns-id", "123e4567-e89b-12d3-a456-426614174000")] {
            Array(name.utf8).withUnsafeBytes { name in
                Array(value.utf8).withUnsafeBytes { value in writer.writeLiteralWithoutIndexing(name: name, value: value) }
            }
        }
        headersLength = 9 + writer.count
        HTTP2FrameHeader.write(to: request.baseAddress!, length: writer.count, type: .headers, flags: HTTP2FrameFlag.endHeaders, streamID: 1)
        let body = request.baseAddress! + headersLength
        HTTP2FrameHeader.write(to: body, length: 100, type: .data, flags: HTTP2FrameFlag.endStream, streamID: 1)
        (body + 9).initializeMemory(as: UInt8.self, repeating: UInt8(ascii: "a"), count: 100)
        let apnsID = UnsafeMutableRawBufferPointer.allocate(byteCount: 36, alignment: 1)
        Array("123e4567-e89b-12d3-a456-426614174000".utf8).withUnsafeBytes { apnsID.copyMemory(from: $0) }
        self.apnsID = apnsID
        super.init()
        var settings = HTTP2ServerSession.LocalSettings()
        settings.maxConcurrentStreams = 1000
        session = HTTP2ServerSession(transport: sink, delegate: self, capacity: 1000, settings: settings)
        session.start()
        let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + [0, 0, 0, 4, 0, 0, 0, 0, 0] + [0, 0, 0, 4, 1, 0, 0, 0, 0]
        preface.withUnsafeBytes { try! session.receive($0) }
    }

    deinit {
        request.deallocate()
        apnsID.deallocate()
    }

    @inline(__always)
    func answerOne() {
        HTTP2FrameHeader.writeUInt32(UInt32(streamID), to: request.baseAddress! + 5)
        HTTP2FrameHeader.writeUInt32(UInt32(streamID), to: request.baseAddress! + headersLength + 5)
        streamID &+= 2
        try! session.receive(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(request)[0..<(headersLength + 109)]))
        session.produce()
    }

    override func http2StreamOpened(stream: Int, streamID: Int32) -> Bool { true }
    override func http2RequestHeader(stream: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) { fieldCount &+= 1 }
    override func http2RequestData(stream: Int, bytes: UnsafeRawBufferPointer) { bodyBytes &+= bytes.count }
    override func http2RequestEnded(stream: Int) { session.respond(stream: stream, streamID: session.streamID(of: stream)!) }
    override func http2WriteResponseHeaders(stream: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter) {
        writer.writeIndexed(HPACKStaticTable.status200)
        writer.writeLiteralNeverIndexed(name: UnsafeRawBufferPointer(start: Self.apnsIDName.utf8Start, count: 7), value: UnsafeRawBufferPointer(apnsID))
    }
    override func http2ResponseBody(stream: Int) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: nil, count: 0) }
    override func http2StreamClosed(stream: Int, errorCode: UInt32) { answered &+= 1 }
}

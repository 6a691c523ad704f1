import FanfareHTTP2
import FanfareTestSupport
import Testing

/// The server session against clients that are broken or hostile, in raw frames: each ends the connection with
/// GOAWAY carrying the RFC's error code (nghttp2's choices), memory stays bounded, and nothing traps.
@Suite("HTTP/2 server session against hostile clients", .ownThread)
struct HostileClientTests {
    private static let request: [UInt8] = [0x83, 0x87, 0x84]  // :method POST, :scheme https, :path /
    private static let endHeaders = HTTP2FrameFlag.endHeaders
    private static let endStream = HTTP2FrameFlag.endStream

    private static func headers(
        _ stream: Int32, flags: UInt8 = endHeaders | endStream, block: [UInt8] = request
    ) -> [UInt8] {
        rawFrame(type: HTTP2FrameType.headers.rawValue, flags: flags, stream: stream, payload: block)
    }

    /// A server past the preface and SETTINGS exchange, holding every request.
    private func connected(_ settings: HTTP2ServerSession.LocalSettings = .init()) throws -> TestServer {
        let server = TestServer(settings: settings)
        server.answer = { _ in nil }
        try server.feed(
            clientPrefaceBytes + rawFrame(type: HTTP2FrameType.settings.rawValue, flags: HTTP2FrameFlag.ack))
        _ = server.output.take()
        return server
    }

    /// Feeds `bytes`; expects the connection to end with `code`, in the error and in the GOAWAY written last.
    private func expectGoAway(
        _ server: TestServer, _ bytes: [UInt8], _ code: UInt32, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let error = server.feedExpectingError(bytes)
        #expect(error?.code == code, "\(String(describing: error))", sourceLocation: sourceLocation)
        let last = parseFrames(server.output.take()).last
        #expect(last?.type == HTTP2FrameType.goAway.rawValue, sourceLocation: sourceLocation)
        if let payload = last?.payload, payload.count >= 8 {
            let sent =
                UInt32(payload[4]) << 24 | UInt32(payload[5]) << 16 | UInt32(payload[6]) << 8 | UInt32(payload[7])
            #expect(sent == code, "GOAWAY carries \(HTTP2ErrorCode.name(sent))", sourceLocation: sourceLocation)
        }
        #expect(server.session.failed && server.session.isFinished, sourceLocation: sourceLocation)
        #expect(
            server.feedExpectingError(Self.headers(101)) != nil, "nothing is read after the error",
            sourceLocation: sourceLocation)
    }

    @Test("a bad preface: PROTOCOL_ERROR")
    func badPreface() {
        let server = TestServer()
        expectGoAway(server, Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8), HTTP2ErrorCode.protocolError)
    }

    @Test("a preface split at every byte is accepted; a preface not followed by SETTINGS is a PROTOCOL_ERROR")
    func prefaceThenSettings() throws {
        let server = TestServer()
        for byte in clientPrefaceBytes { try server.feed([byte]) }
        #expect(!server.session.failed)
        let other = TestServer()
        expectGoAway(other, Array(clientPrefaceBytes.prefix(24)) + Self.headers(1), HTTP2ErrorCode.protocolError)
    }

    @Test("a frame over our SETTINGS_MAX_FRAME_SIZE: FRAME_SIZE_ERROR")
    func frameTooLarge() throws {
        let server = try connected()
        expectGoAway(
            server,
            rawFrame(type: HTTP2FrameType.data.rawValue, stream: 1, payload: Array(repeating: 0, count: 16_385)),
            HTTP2ErrorCode.frameSizeError)
    }

    @Test("fixed-size frames of the wrong size: FRAME_SIZE_ERROR")
    func wrongSizes() throws {
        for frame in [
            rawFrame(type: HTTP2FrameType.ping.rawValue, payload: [1, 2, 3]),
            rawFrame(type: HTTP2FrameType.settings.rawValue, payload: [0, 3, 0, 0]),
            rawFrame(type: HTTP2FrameType.windowUpdate.rawValue, payload: [0, 0, 1]),
            rawFrame(type: HTTP2FrameType.priority.rawValue, stream: 1, payload: [0, 0, 0]),
            rawFrame(type: HTTP2FrameType.settings.rawValue, flags: HTTP2FrameFlag.ack, payload: [0, 0, 0, 0, 0, 0]),
        ] {
            expectGoAway(try connected(), frame, HTTP2ErrorCode.frameSizeError)
        }
        let server = try connected()
        expectGoAway(
            server,
            Self.headers(1, flags: Self.endStream)
                + rawFrame(type: HTTP2FrameType.rstStream.rawValue, stream: 1, payload: [0]),
            HTTP2ErrorCode.protocolError)
    }

    @Test("stream ids: even, zero, going backwards, or HEADERS on a closed stream end the connection")
    func streamIDs() throws {
        expectGoAway(try connected(), Self.headers(2), HTTP2ErrorCode.protocolError)
        expectGoAway(try connected(), Self.headers(0), HTTP2ErrorCode.protocolError)
        let backwards = try connected()
        try backwards.feed(Self.headers(5))
        expectGoAway(backwards, Self.headers(3), HTTP2ErrorCode.streamClosed)
        let closed = try connected()
        try closed.feed(Self.headers(1))
        closed.respond(closed.open.keys.first!, status: 200)
        closed.session.produce()
        #expect(closed.finished[1]?.closedWith == 0)
        expectGoAway(closed, Self.headers(1), HTTP2ErrorCode.streamClosed)
        let halfClosed = try connected()
        try halfClosed.feed(Self.headers(1))
        expectGoAway(
            halfClosed, rawFrame(type: HTTP2FrameType.data.rawValue, flags: Self.endStream, stream: 1, payload: [1]),
            HTTP2ErrorCode.streamClosed)
    }

    @Test("frames on streams never opened: PROTOCOL_ERROR")
    func idleStreams() throws {
        expectGoAway(
            try connected(), rawFrame(type: HTTP2FrameType.data.rawValue, stream: 9, payload: [1]),
            HTTP2ErrorCode.protocolError)
        expectGoAway(
            try connected(), rawFrame(type: HTTP2FrameType.rstStream.rawValue, stream: 9, payload: [0, 0, 0, 8]),
            HTTP2ErrorCode.protocolError)
        expectGoAway(
            try connected(), rawFrame(type: HTTP2FrameType.windowUpdate.rawValue, stream: 9, payload: [0, 0, 0, 8]),
            HTTP2ErrorCode.protocolError)
        expectGoAway(
            try connected(), rawFrame(type: HTTP2FrameType.continuation.rawValue, stream: 1, payload: [0x83]),
            HTTP2ErrorCode.protocolError)
        expectGoAway(
            try connected(), rawFrame(type: HTTP2FrameType.pushPromise.rawValue, stream: 1, payload: [0, 0, 0, 2]),
            HTTP2ErrorCode.protocolError)
    }

    @Test("a header block interrupted by another frame: PROTOCOL_ERROR")
    func interruptedHeaderBlock() throws {
        let server = try connected()
        expectGoAway(
            server,
            Self.headers(1, flags: 0, block: [0x83])
                + rawFrame(type: HTTP2FrameType.ping.rawValue, payload: Array(repeating: 0, count: 8)),
            HTTP2ErrorCode.protocolError)
    }

    @Test(
        "a CONTINUATION flood: ENHANCE_YOUR_CALM within the header block bound, empty ones within the empty-frame bound"
    )
    func continuationFlood() throws {
        let server = try connected()
        var bytes = Self.headers(1, flags: 0, block: [0x83])
        for _ in 0..<5 {
            bytes += rawFrame(
                type: HTTP2FrameType.continuation.rawValue, stream: 1, payload: Array(repeating: 0x40, count: 16_000))
        }
        expectGoAway(server, bytes, HTTP2ErrorCode.enhanceYourCalm)
        var settings = HTTP2ServerSession.LocalSettings()
        settings.maxEmptyFrames = 100
        let empty = try connected(settings)
        var emptyBytes = Self.headers(1, flags: 0, block: [0x83])
        for _ in 0..<200 { emptyBytes += rawFrame(type: HTTP2FrameType.continuation.rawValue, stream: 1) }
        expectGoAway(empty, emptyBytes, HTTP2ErrorCode.enhanceYourCalm)
    }

    @Test("empty DATA frames and unknown frames without end: ENHANCE_YOUR_CALM")
    func emptyFrameFlood() throws {
        var settings = HTTP2ServerSession.LocalSettings()
        settings.maxEmptyFrames = 100
        let server = try connected(settings)
        try server.feed(Self.headers(1, flags: Self.endHeaders))
        expectGoAway(
            server,
            Array(repeating: rawFrame(type: HTTP2FrameType.data.rawValue, stream: 1), count: 200).flatMap { $0 },
            HTTP2ErrorCode.enhanceYourCalm)
        let unknown = try connected(settings)
        expectGoAway(
            unknown, Array(repeating: rawFrame(type: 0x42, payload: [1]), count: 200).flatMap { $0 },
            HTTP2ErrorCode.enhanceYourCalm)
    }

    @Test("HPACK: a bad index, a table size update above our setting, an oversized header list: COMPRESSION_ERROR")
    func hpackErrors() throws {
        // Index 190, then a table size update to 16 KiB.
        expectGoAway(try connected(), Self.headers(1, block: [0xFF, 0x70]), HTTP2ErrorCode.compressionError)
        expectGoAway(try connected(), Self.headers(1, block: [0x3F, 0xE1, 0x7F]), HTTP2ErrorCode.compressionError)
        var settings = HTTP2ServerSession.LocalSettings()
        settings.maxHeaderListSize = 1000
        // A bomb: one 500-byte entry inserted, then referenced 100 times (1 byte each).
        let value = Array(repeating: UInt8(ascii: "a"), count: 500)
        // A literal with indexing: name "x", a 500-byte value.
        let insert: [UInt8] = [0x40, 0x01, 0x78, 0x7F, 0x81, 0x03] + value
        let bomb = insert + Array(repeating: 0xBE, count: 100)  // index 62, again and again
        expectGoAway(try connected(settings), Self.headers(1, block: bomb), HTTP2ErrorCode.compressionError)
    }

    @Test("DATA beyond the stream's or the connection's window, a window past 2^31-1: FLOW_CONTROL_ERROR")
    func flowControlViolations() throws {
        let server = try connected()
        var bytes = Self.headers(1, flags: Self.endHeaders)
        for _ in 0..<4 {
            bytes += rawFrame(
                type: HTTP2FrameType.data.rawValue, stream: 1, payload: Array(repeating: 0, count: 16_384))
        }
        #expect(
            server.feedExpectingError(bytes) == nil,
            "more than 65,535 bytes fit: the session gives back half a window at a time")
        #expect(parseFrames(server.output.take()).filter { $0.type == HTTP2FrameType.windowUpdate.rawValue }.count == 4)
        let strict = try connected()
        var settings = HTTP2ServerSession.LocalSettings()
        settings.initialWindowSize = 1000
        let small = try connected(settings)
        expectGoAway(
            small,
            Self.headers(1, flags: Self.endHeaders)
                + rawFrame(type: HTTP2FrameType.settings.rawValue, flags: HTTP2FrameFlag.ack)
                + rawFrame(type: HTTP2FrameType.data.rawValue, stream: 1, payload: Array(repeating: 0, count: 1001)),
            HTTP2ErrorCode.flowControlError)
        expectGoAway(
            strict, rawFrame(type: HTTP2FrameType.windowUpdate.rawValue, payload: [0x7F, 0xFF, 0xFF, 0xFF]),
            HTTP2ErrorCode.flowControlError)
        let streamWindow = try connected()
        expectGoAway(
            streamWindow,
            Self.headers(1)
                + rawFrame(type: HTTP2FrameType.windowUpdate.rawValue, stream: 1, payload: [0x7F, 0xFF, 0xFF, 0xFF]),
            HTTP2ErrorCode.flowControlError)
        expectGoAway(
            try connected(), rawFrame(type: HTTP2FrameType.windowUpdate.rawValue, payload: [0, 0, 0, 0]),
            HTTP2ErrorCode.protocolError)
        expectGoAway(
            try connected(), rawFrame(type: HTTP2FrameType.settings.rawValue, payload: [0, 4, 0x80, 0, 0, 0]),
            HTTP2ErrorCode.flowControlError)
    }

    @Test(
        "a PING or SETTINGS flood from a client that does not read: ENHANCE_YOUR_CALM, memory bounded; the same from one that reads is answered"
    )
    func controlFloods() throws {
        var settings = HTTP2ServerSession.LocalSettings()
        settings.maxQueuedControlFrames = 100
        for frame in [
            rawFrame(type: HTTP2FrameType.ping.rawValue, payload: Array(repeating: 7, count: 8)),
            rawFrame(type: HTTP2FrameType.settings.rawValue),
        ] {
            let server = try connected(settings)
            server.output.backedUp = true
            var caught: HTTP2ConnectionError?
            var fed = 0
            while caught == nil && fed < 10_000 {
                caught = server.feedExpectingError(Array(repeating: frame, count: 50).flatMap { $0 })
                fed += 50
            }
            #expect(caught?.code == HTTP2ErrorCode.enhanceYourCalm)
            #expect(fed <= 200)
            #expect(parseFrames(server.output.take()).count <= 102)
            let reading = try connected(settings)
            for _ in 0..<20 {
                try reading.feed(Array(repeating: frame, count: 50).flatMap { $0 })
                reading.session.produce()
            }
            #expect(parseFrames(reading.output.take()).count == 1000)
        }
    }

    @Test("rapid reset: streams opened and reset beyond those answered end the connection with ENHANCE_YOUR_CALM")
    func rapidReset() throws {
        var settings = HTTP2ServerSession.LocalSettings()
        settings.maxResetsBeyondAnswers = 100
        let server = try connected(settings)
        var bytes = [UInt8]()
        for index in 0..<200 {
            let stream = Int32(2 * index + 1)
            bytes +=
                Self.headers(stream, flags: Self.endHeaders)
                + rawFrame(type: HTTP2FrameType.rstStream.rawValue, stream: stream, payload: [0, 0, 0, 8])
        }
        expectGoAway(server, bytes, HTTP2ErrorCode.enhanceYourCalm)
        #expect(server.finished.count <= 101)
        #expect(server.open.isEmpty || server.open.count == 1)
    }

    @Test("a client's GOAWAY: its open streams are still answered, then the session is finished")
    func clientGoAway() throws {
        let server = try connected()
        try server.feed(Self.headers(1))
        try server.feed(rawFrame(type: HTTP2FrameType.goAway.rawValue, payload: [0, 0, 0, 0, 0, 0, 0, 0]))
        #expect(!server.session.isFinished)
        server.respond(server.open.keys.first!, status: 200)
        server.session.produce()
        #expect(server.session.isFinished && !server.session.failed)
    }

    @Test("random bytes after the preface never trap: each run ends in an error or is consumed")
    func randomBytes() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            let server = try connected()
            let count = Int.random(in: 1...400, using: &generator)
            var bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            // Often a plausible frame header, so the fuzzing gets past the length check.
            if Bool.random(using: &generator) && bytes.count > 9 {
                bytes = Array(bytes.prefix(9 + 255))
                bytes[0] = 0
                bytes[1] = 0
                bytes[2] = UInt8(bytes.count - 9)
                bytes[3] = UInt8.random(in: 0...10, using: &generator)
            }
            _ = server.feedExpectingError(bytes)
        }
    }
}

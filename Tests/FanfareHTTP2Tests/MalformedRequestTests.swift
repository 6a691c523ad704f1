import FanfareHTTP2
import FanfareTestSupport
import Testing

/// Malformed requests (RFC 9113 §8.1.1, §8.2, §8.3.1) end only their stream, with RST_STREAM PROTOCOL_ERROR, as
/// nghttp2 does; the connection and the next request go on. Well-formed variants of each case are answered.
@Suite("HTTP/2 server session: malformed requests", .ownThread)
struct MalformedRequestTests {
    /// A literal field without indexing, name and value as-is (RFC 7541 §6.2.2).
    private static func field(_ name: String, _ value: String) -> [UInt8] {
        func string(_ text: String) -> [UInt8] {
            let bytes = Array(text.utf8)
            precondition(bytes.count < 127)
            return [UInt8(bytes.count)] + bytes
        }
        return [0x00] + string(name) + string(value)
    }

    private static let method = field(":method", "POST")
    private static let scheme = field(":scheme", "https")
    private static let path = field(":path", "/3/device/abc")
    private static let authority = field(":authority", "api.push.apple.com")
    private static let valid = method + scheme + path + authority

    private func connected() throws -> TestServer {
        let server = TestServer()
        server.answer = { _ in (200, [], []) }
        try server.feed(
            clientPrefaceBytes + rawFrame(type: HTTP2FrameType.settings.rawValue, flags: HTTP2FrameFlag.ack))
        _ = server.output.take()
        return server
    }

    private static func headers(_ stream: Int32, _ block: [UInt8], endStream: Bool = true) -> [UInt8] {
        rawFrame(
            type: HTTP2FrameType.headers.rawValue,
            flags: HTTP2FrameFlag.endHeaders | (endStream ? HTTP2FrameFlag.endStream : 0), stream: stream,
            payload: block)
    }

    private static func data(_ stream: Int32, _ count: Int, endStream: Bool = true) -> [UInt8] {
        rawFrame(
            type: HTTP2FrameType.data.rawValue, flags: endStream ? HTTP2FrameFlag.endStream : 0, stream: stream,
            payload: Array(repeating: UInt8(ascii: "x"), count: count))
    }

    /// Sends `bytes` as stream 1 and a valid request as stream 3: stream 1 must be reset with PROTOCOL_ERROR (and
    /// never reach the answer), stream 3 answered, the connection still up.
    private func expectMalformed(
        _ bytes: [UInt8], _ what: Comment, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let server = try connected()
        try server.feed(bytes + Self.headers(3, Self.valid))
        server.session.produce()
        #expect(
            server.resetsSent.contains { $0 == (1, HTTP2ErrorCode.protocolError) }, what, sourceLocation: sourceLocation
        )
        #expect(server.finished[1]?.closedWith == HTTP2ErrorCode.protocolError, what, sourceLocation: sourceLocation)
        #expect(
            server.finished[1]?.ended != true, "never handed over as a request: \(what)", sourceLocation: sourceLocation
        )
        #expect(
            server.finished[3]?.closedWith == HTTP2ErrorCode.noError, "the next request is answered: \(what)",
            sourceLocation: sourceLocation)
        #expect(!server.session.failed, what, sourceLocation: sourceLocation)
    }

    private func expectAnswered(
        _ bytes: [UInt8], _ what: Comment, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let server = try connected()
        try server.feed(bytes)
        server.session.produce()
        #expect(server.resetsSent.isEmpty, what, sourceLocation: sourceLocation)
        #expect(server.finished[1]?.closedWith == HTTP2ErrorCode.noError, what, sourceLocation: sourceLocation)
    }

    @Test("field names: upper case, empty, or not a token")
    func fieldNames() throws {
        try expectMalformed(Self.headers(1, Self.valid + Self.field("Apns-Topic", "x")), "upper case")
        try expectMalformed(Self.headers(1, Self.valid + Self.field("", "x")), "empty")
        try expectMalformed(Self.headers(1, Self.valid + Self.field("apns topic", "x")), "a space")
        try expectMalformed(Self.headers(1, Self.valid + Self.field("apns:topic", "x")), "a colon inside")
        try expectAnswered(Self.headers(1, Self.valid + Self.field("apns-topic", "com.example")), "lower-case token")
    }

    @Test("field values with NUL, CR or LF, at every position of a word")
    func fieldValues() throws {
        for bad in ["\u{0}", "\r", "\n"] {
            for position in 0..<17 {
                let value = String(repeating: "a", count: position) + bad + String(repeating: "b", count: 16 - position)
                try expectMalformed(
                    Self.headers(1, Self.valid + Self.field("x-value", value)), "\(bad.utf8.first!) at \(position)")
            }
        }
        try expectAnswered(
            Self.headers(1, Self.valid + Self.field("x-value", "tab\tand \u{7F} and spaces")), "HTAB, SP, DEL")
    }

    @Test("pseudo-header fields: unknown, repeated, after a regular field, missing, empty :path, in trailers")
    func pseudoHeaders() throws {
        try expectMalformed(Self.headers(1, Self.valid + Self.field(":status", "200")), "a response pseudo-header")
        try expectMalformed(
            Self.headers(1, Self.valid + Self.field(":protocol", "websocket")), ":protocol without extended CONNECT")
        try expectMalformed(Self.headers(1, Self.valid + Self.path), "repeated :path")
        try expectMalformed(
            Self.headers(1, Self.method + Self.scheme + Self.field("apns-topic", "x") + Self.path),
            "after a regular field")
        try expectMalformed(Self.headers(1, Self.method + Self.scheme), "no :path")
        try expectMalformed(Self.headers(1, Self.method + Self.path), "no :scheme")
        try expectMalformed(Self.headers(1, Self.scheme + Self.path), "no :method")
        try expectMalformed(Self.headers(1, Self.method + Self.scheme + Self.field(":path", "")), "empty :path")
        try expectMalformed(
            Self.headers(1, Self.valid, endStream: false) + Self.data(1, 3, endStream: false)
                + Self.headers(1, Self.field(":path", "/late")), "a pseudo-header in trailers")
        try expectAnswered(
            Self.headers(1, Self.valid, endStream: false) + Self.data(1, 3, endStream: false)
                + Self.headers(1, Self.field("x-trailer", "fine")), "regular trailers")
        try expectAnswered(Self.headers(1, Self.method + Self.scheme + Self.path), "no :authority is fine")
        try expectMalformed(
            Self.headers(1, Self.field(":method", "CONNECT") + Self.scheme + Self.path + Self.authority),
            "CONNECT with :path")
        try expectAnswered(
            Self.headers(1, Self.field(":method", "CONNECT") + Self.authority), "CONNECT with :authority only")
    }

    @Test("connection-specific fields, and te other than trailers")
    func connectionSpecific() throws {
        for name in ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"] {
            try expectMalformed(Self.headers(1, Self.valid + Self.field(name, "x")), "\(name)")
        }
        try expectMalformed(Self.headers(1, Self.valid + Self.field("te", "gzip")), "te: gzip")
        try expectAnswered(Self.headers(1, Self.valid + Self.field("te", "trailers")), "te: trailers")
    }

    @Test("content-length: not a number, twice, or not the length of the DATA")
    func contentLength() throws {
        try expectMalformed(
            Self.headers(1, Self.valid + Self.field("content-length", "1x"), endStream: false) + Self.data(1, 2),
            "not a number")
        try expectMalformed(
            Self.headers(1, Self.valid + Self.field("content-length", ""), endStream: false) + Self.data(1, 0), "empty")
        try expectMalformed(
            Self.headers(1, Self.valid + Self.field("content-length", "99999999999999999999"), endStream: false)
                + Self.data(1, 1),
            "over 18 digits")
        try expectMalformed(
            Self.headers(
                1, Self.valid + Self.field("content-length", "3") + Self.field("content-length", "3"), endStream: false)
                + Self.data(1, 3), "twice")
        try expectMalformed(
            Self.headers(1, Self.valid + Self.field("content-length", "3"), endStream: false) + Self.data(1, 4),
            "more DATA")
        try expectMalformed(
            Self.headers(1, Self.valid + Self.field("content-length", "3"), endStream: false) + Self.data(1, 2),
            "less DATA")
        try expectMalformed(Self.headers(1, Self.valid + Self.field("content-length", "3")), "no DATA at all")
        try expectMalformed(
            Self.headers(1, Self.valid + Self.field("content-length", "4"), endStream: false)
                + Self.data(1, 2, endStream: false)
                + Self.data(1, 3), "more DATA over two frames")
        try expectAnswered(
            Self.headers(1, Self.valid + Self.field("content-length", "5"), endStream: false)
                + Self.data(1, 2, endStream: false)
                + Self.data(1, 3), "exact over two frames")
        try expectAnswered(Self.headers(1, Self.valid + Self.field("content-length", "0")), "zero, no DATA")
    }

    @Test("the DATA of a reset malformed request is ignored and still counted by flow control")
    func dataAfterTheReset() throws {
        let server = try connected()
        try server.feed(
            Self.headers(1, Self.valid + Self.field("content-length", "2"), endStream: false)
                + Self.data(1, 3, endStream: false)
                + Self.data(1, 10_000) + Self.headers(3, Self.valid))
        server.session.produce()
        #expect(server.finished[1]?.closedWith == HTTP2ErrorCode.protocolError)
        #expect(server.finished[3]?.closedWith == HTTP2ErrorCode.noError)
        #expect(!server.session.failed)
    }
}

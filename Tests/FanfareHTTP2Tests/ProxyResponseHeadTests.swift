// The proxy's answer to CONNECT, read as it arrives: final and interim heads, bare LF line ends, the bytes after
// the head left for TLS, and every malformed or oversized head an error (never a trap), however it is split.
import FanfareHTTP2
import FanfareTestSupport
import Testing

@Suite(.ownThread) struct ProxyResponseHeadTests {
    /// Feeds `text` in pieces of `size` bytes; the outcome and the offset of the head's end in the whole text.
    static func read(_ text: [UInt8], pieces size: Int) -> (ProxyResponseHead.Progress, end: Int?) {
        var head = ProxyResponseHead()
        var offset = 0
        while offset < text.count {
            let piece = Array(text[offset..<min(text.count, offset + size)])
            let progress = piece.withUnsafeBytes { head.consume($0) }
            if case .complete(_, _, let consumed) = progress { return (progress, offset + consumed) }
            if case .malformed = progress { return (progress, nil) }
            offset += piece.count
        }
        return (.needMore, nil)
    }

    static func status(_ progress: ProxyResponseHead.Progress) -> (Int, String)? {
        if case .complete(let status, let reason, _) = progress { return (status, reason) }
        return nil
    }

    static func problem(_ progress: ProxyResponseHead.Progress) -> String? {
        if case .malformed(let problem) = progress { return problem }
        return nil
    }

    @Test(arguments: [1, 2, 7, 64, 4096])
    func aFinalHeadEndsWhereItsBlankLineDoes(pieces: Int) {
        let head = "HTTP/1.1 200 Connection established\r\nVia: 1.1 proxy\r\nContent-Length: 12\r\n\r\n"
        let after: [UInt8] = [0x16, 0x03, 0x03, 0x00, 0x7A]
        let (progress, end) = Self.read(Array(head.utf8) + after, pieces: pieces)
        #expect(Self.status(progress)?.0 == 200)
        #expect(Self.status(progress)?.1 == "Connection established")
        #expect(end == head.utf8.count, "the bytes after the head are the tunnel's")
    }

    @Test func bareLineFeedsInterimHeadsAndRefusals() {
        #expect(Self.status(Self.read(Array("HTTP/1.0 200\n\n".utf8), pieces: 100).0)?.0 == 200)
        let interim = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nX: y\r\n\r\n"
        let (progress, end) = Self.read(Array(interim.utf8), pieces: 5)
        #expect(Self.status(progress)?.0 == 204)
        #expect(end == interim.utf8.count)
        let refusal = Self.read(Array("HTTP/1.1 407 Proxy Authentication Required\r\n\r\n".utf8), pieces: 9).0
        #expect(Self.status(refusal)?.0 == 407)
        #expect(Self.status(refusal)?.1 == "Proxy Authentication Required")
        let hostile = Self.read(Array("HTTP/1.1 502 Bad\u{1B}[2J Gateway\r\n\r\n".utf8), pieces: 100).0
        #expect(Self.status(hostile)?.1 == "Bad\\x1b[2J Gateway", "the reason is made printable")
    }

    @Test(arguments: [
        ("HTTP/1.1 20 OK\r\n\r\n", "the status line 'HTTP/1.1 20 OK'"),
        ("HTTP/1.1 2000 OK\r\n\r\n", "the status line 'HTTP/1.1 2000 OK'"),
        ("HTTP/1.1 099 Odd\r\n\r\n", "the status 99, outside 100...599"),
        // Told apart by the first bytes that differ, whatever came with them.
        ("HTTP/2 200\r\n\r\n", "not an HTTP/1.x response (only http:// proxies are supported)"),
        ("SSH-2.0-OpenSSH_9.2\r\n", "'S"),
        ("\u{15}\u{03}\u{03}\u{00}\u{02}\u{02}\u{46}", "'\\x15"),
        ("\r\n\r\n", "the status line ''"),
    ])
    func aMalformedHeadIsAnError(text: String, expected: String) {
        for size in [1, 3, 100] {
            let problem = Self.problem(Self.read(Array(text.utf8), pieces: size).0) ?? "no error"
            #expect(problem.contains(expected), "pieces of \(size): \(problem)")
        }
        let whole = Self.problem(Self.read(Array("SSH-2.0-OpenSSH_9.2\r\n".utf8), pieces: 100).0)
        #expect(whole == "'SSH-2.0-OpenSSH_9.2', not an HTTP/1.x response (only http:// proxies are supported)")
    }

    @Test func aHeadOverTheBoundIsAnError() {
        var text = Array("HTTP/1.1 200 OK\r\n".utf8)
        while text.count <= ProxyResponseHead.maximumBytes { text += Array("X-Filler: aaaaaaaaaaaaaaaa\r\n".utf8) }
        for size in [1, 1000, 64 << 10] {
            #expect(Self.problem(Self.read(text, pieces: size).0) == "a response head over 8192 bytes")
        }
        // Interim heads count toward the same bound.
        let interim = Array(repeating: Array("HTTP/1.1 100 Continue\r\n\r\n".utf8), count: 400).flatMap { $0 }
        #expect(Self.problem(Self.read(interim, pieces: 512).0) == "a response head over 8192 bytes")
    }

    @Test func theConnectRequestNamesTheTargetAndItsCredentials() {
        let plain = ProxyTunnel(
            proxy: "proxy:3128", targetHost: "api.push.apple.com", targetPort: 443, authorization: nil)
        #expect(
            String(decoding: plain.request, as: UTF8.self)
                == "CONNECT api.push.apple.com:443 HTTP/1.1\r\nHost: api.push.apple.com:443\r\n\r\n")
        let v6 = ProxyTunnel(proxy: "[::1]:8080", targetHost: "::1", targetPort: 2197, authorization: "Basic dTpw")
        #expect(
            String(decoding: v6.request, as: UTF8.self)
                == "CONNECT [::1]:2197 HTTP/1.1\r\nHost: [::1]:2197\r\nProxy-Authorization: Basic dTpw\r\n\r\n")
        #expect(v6.target == "[::1]:2197" && v6.sendsCredentials && !plain.sendsCredentials)
    }
}

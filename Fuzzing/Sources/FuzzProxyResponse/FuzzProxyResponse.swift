// An HTTP proxy's answer to CONNECT (`ProxyResponseHead`), read as `SecureTransport` reads it: in the pieces
// the socket returns. Checked: the same outcome whole and in pieces (the same status, reason and end of the
// head; both an error when one is); a head ends at a line feed, within `maximumBytes`, with a final (not 1xx)
// status of 100...599; a reason or an error is one printable line; an unfinished head is within the bound.
//
// Input: one byte for the piece size (1...256), then the proxy's bytes.
import FanfareHTTP2
import FuzzSupport

@main
enum FuzzProxyResponse {
    static func main() {
        runFuzzer(testOneInput, seeds: seeds)
    }
}

/// The outcome and, for a complete head, its end in the whole input.
func read(_ bytes: UnsafeRawBufferPointer, pieces size: Int) -> (ProxyResponseHead.Progress, end: Int?) {
    var head = ProxyResponseHead()
    var offset = 0
    while offset < bytes.count {
        let count = min(size, bytes.count - offset)
        let progress = head.consume(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count]))
        switch progress {
        case .complete(_, _, let consumed):
            require(consumed >= 1 && consumed <= count, "consumed \(consumed) of a piece of \(count)")
            return (progress, offset + consumed)
        case .malformed: return (progress, nil)
        case .needMore: offset += count
        }
    }
    return (.needMore, nil)
}

func isPrintableLine(_ text: String) -> Bool {
    text.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7F || $0 == "…" }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let pieceSize = Int(input.byte()) + 1
    let bytes = input.rest()
    let whole = read(bytes, pieces: max(1, bytes.count))
    let pieced = read(bytes, pieces: pieceSize)
    switch (whole.0, pieced.0) {
    case (.complete(let status, let reason, _), .complete(let otherStatus, let otherReason, _)):
        require(status == otherStatus && reason == otherReason, "\(status) \(reason) vs \(otherStatus) \(otherReason)")
        require(whole.end == pieced.end, "the head ends at \(String(describing: whole.end)) vs \(String(describing: pieced.end))")
        let end = whole.end!
        require(end <= ProxyResponseHead.maximumBytes, "a head of \(end) bytes")
        require(bytes[end - 1] == UInt8(ascii: "\n"), "a head that does not end at a line feed")
        require((200...599).contains(status), "the final status \(status)")
        require(isPrintableLine(reason), "the reason \(reason) is not printable")
        let start = Array(bytes.prefix(7))
        require(start == Array("HTTP/1.".utf8), "a head that does not start HTTP/1.")
    case (.malformed(let problem), .malformed(let other)):
        require(isPrintableLine(problem) && isPrintableLine(other), "an error that is not one printable line")
    case (.needMore, .needMore):
        require(bytes.count <= ProxyResponseHead.maximumBytes, "\(bytes.count) bytes and no end")
    default:
        require(false, "whole: \(whole.0), in pieces of \(pieceSize): \(pieced.0)")
    }
    return 0
}

func seeds() -> [Seed] {
    func seed(_ name: String, _ piece: UInt8, _ text: String, _ after: [UInt8] = []) -> Seed {
        Seed(name, [piece] + Array(text.utf8) + after)
    }
    return [
        seed("established", 255, "HTTP/1.1 200 Connection established\r\nVia: 1.1 proxy\r\n\r\n", [0x16, 0x03, 0x03]),
        seed("established-bytewise", 0, "HTTP/1.0 200 OK\r\n\r\n"),
        seed("bare-lf", 4, "HTTP/1.1 204\n\n"),
        seed("interim", 6, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"),
        seed("refused-407", 9, "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n"),
        seed("refused-502-body", 255, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 5\r\n\r\nhello"),
        seed("bad-status", 2, "HTTP/1.1 2000 OK\r\n\r\n"),
        seed("not-http", 255, "SSH-2.0-OpenSSH_9.2\r\n"),
        seed("tls-alert", 255, "", [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46]),
        seed("unfinished", 3, "HTTP/1.1 200 Conn"),
        seed("escape-in-reason", 255, "HTTP/1.1 403 \u{1B}[2J\u{7F}\r\n\r\n"),
    ]
}

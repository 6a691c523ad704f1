import FanfareCore

/// The head of an HTTP/1.x proxy's answer to CONNECT (RFC 9110 §9.3.6, RFC 9112 §4), read as it arrives. The
/// proxy is outside input: the head is bounded, a status line that is not HTTP/1.x is an error (an HTTPS proxy
/// or another protocol on that port is told apart by the first bytes it sends), and every text kept is made
/// printable.
public struct ProxyResponseHead: Sendable {
    /// Every head of one answer together (interim 1xx ones too): more is not an HTTP proxy we can talk to.
    public static let maximumBytes = 8192
    /// The reason phrase kept for messages.
    static let maximumReasonBytes = 128

    public enum Progress: Equatable, Sendable {
        /// The head has not ended yet.
        case needMore
        /// A final answer (interim 1xx heads are skipped): its status and reason phrase (printable), and how many
        /// of the bytes given last belong to the head; the rest came after it and belong to the tunnel.
        case complete(status: Int, reason: String, consumed: Int)
        /// Not an HTTP/1.x answer, or longer than `maximumBytes`.
        case malformed(String)
    }

    private static let versionPrefix: [UInt8] = Array("HTTP/1.".utf8)

    /// The status line as read so far (the first line of each head).
    private var statusLine: [UInt8] = []
    /// Whether the line being read is a head's first one, and whether it has bytes (a bare CR does not count).
    private var onStatusLine = true
    private var lineHasBytes = false
    private var status = 0
    private var reason = ""
    private var total = 0

    public init() {}

    /// Bytes of the answer read so far, up to the end of its head.
    public var bytesRead: Int { total }

    /// Reads `bytes`, the next ones the proxy sent. After `.complete` or `.malformed` nothing more is read.
    public mutating func consume(_ bytes: UnsafeRawBufferPointer) -> Progress {
        for index in 0..<bytes.count {
            total += 1
            guard total <= Self.maximumBytes else {
                return .malformed("a response head over \(Self.maximumBytes) bytes")
            }
            let byte = bytes[index]
            guard byte == UInt8(ascii: "\n") else {
                if byte != UInt8(ascii: "\r") { lineHasBytes = true }
                if onStatusLine { statusLine.append(byte) }
                continue
            }
            if onStatusLine {
                if let problem = parseStatusLine() { return .malformed(problem) }
                onStatusLine = false
            } else if !lineHasBytes {
                // The empty line ends a head: a 1xx is interim and another head follows (RFC 9110 §15.2).
                guard (100..<200).contains(status) else {
                    return .complete(status: status, reason: reason, consumed: index + 1)
                }
                onStatusLine = true
                statusLine.removeAll(keepingCapacity: true)
            }
            lineHasBytes = false
        }
        if onStatusLine, let problem = checkVersionPrefix(Self.withoutCR(statusLine[...])) {
            return .malformed(problem)
        }
        return .needMore
    }

    /// A status line starts `HTTP/1.`: checked after every read, so a TLS server (an https:// proxy) or another
    /// protocol that sends no line break fails at once rather than at the time limit.
    private func checkVersionPrefix(_ line: ArraySlice<UInt8>) -> String? {
        guard !Self.versionPrefix.starts(with: line.prefix(Self.versionPrefix.count)) else { return nil }
        return "\(Self.quoted(line)), not an HTTP/1.x response (only http:// proxies are supported)"
    }

    /// `HTTP/1.x SP 3DIGIT [SP reason-phrase]` (RFC 9112 §4), a trailing CR dropped.
    private mutating func parseStatusLine() -> String? {
        let line = Self.withoutCR(statusLine[...])
        if let problem = checkVersionPrefix(line) { return problem }
        let digits = line.dropFirst(9).prefix(3)
        guard line.count >= 12, line.starts(with: Self.versionPrefix),
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(line[line.startIndex + 7]),
            line[line.startIndex + 8] == UInt8(ascii: " "),
            digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            line.count == 12 || line[line.startIndex + 12] == UInt8(ascii: " ")
        else {
            return "the status line \(Self.quoted(line)), not HTTP/1.x SP status SP reason"
        }
        let value = digits.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
        guard (100...599).contains(value) else { return "the status \(value), outside 100...599" }
        status = value
        reason = line.dropFirst(13).withUnsafeBytes { PrintableText.escaping($0, limit: Self.maximumReasonBytes) }
        return nil
    }

    private static func withoutCR(_ line: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        line.last == UInt8(ascii: "\r") ? line.dropLast() : line
    }

    private static func quoted(_ bytes: ArraySlice<UInt8>) -> String {
        "'" + bytes.withUnsafeBytes { PrintableText.escaping($0, limit: 64) } + "'"
    }
}

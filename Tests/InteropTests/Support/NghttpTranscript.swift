// Reading what `nghttp -v` (nghttp2 1.52) prints for one request. Response headers appear as
//
//   [  0.057] recv (stream_id=13) :status: 403
//   [  0.057] recv (stream_id=13) apns-id: 6f0e…
//
// and the response body goes to the same stdout, unterminated, right before the frame line of the DATA
// frame that carried it:
//
//   {"reason":"MissingProviderToken"}[  0.058] recv DATA frame <length=33, flags=0x01, stream_id=13>
//
// so each DATA frame's bytes are the `length` bytes just before its `[` timestamp.
import Foundation

struct NghttpTranscript {
    /// Response header fields in arrival order (names as sent: lowercase, pseudo-headers with ':').
    var responseHeaders: [(name: String, value: String)] = []
    /// The response body: every received DATA frame's bytes, in order.
    var body = ""

    init(parsing output: String) {
        for line in output.split(separator: "\n", omittingEmptySubsequences: true) {
            guard let marker = line.range(of: "] recv (stream_id=") else { continue }
            let afterMarker = line[marker.upperBound...]
            guard let close = afterMarker.range(of: ") ") else { continue }
            let field = afterMarker[close.upperBound...]
            // The name ends at the first ": " (pseudo-header names start with ':' but contain no ": ").
            guard let separator = field.range(of: ": ") else { continue }
            responseHeaders.append((String(field[..<separator.lowerBound]), String(field[separator.upperBound...])))
        }
        body = Self.dataFramePayloads(in: output)
    }

    /// The value of the first response header called `name`.
    func header(_ name: String) -> String? {
        responseHeaders.first { $0.name == name }?.value
    }

    /// `:status` as a number.
    var status: Int? { header(":status").flatMap { Int($0) } }

    private static func dataFramePayloads(in output: String) -> String {
        let bytes = Array(output.utf8)
        let pattern = try! NSRegularExpression(pattern: #"\[ *[0-9]+\.[0-9]+\] recv DATA frame <length=([0-9]+),"#)
        let text = output as NSString
        var payload: [UInt8] = []
        for match in pattern.matches(in: output, range: NSRange(location: 0, length: text.length)) {
            guard let length = Int(text.substring(with: match.range(at: 1))) else { continue }
            // NSString ranges count UTF-16 units; the transcript is ASCII, where both agree with bytes.
            let end = match.range.location
            guard length <= end, end <= bytes.count else { continue }
            payload += bytes[(end - length)..<end]
        }
        return String(decoding: payload, as: UTF8.self)
    }
}

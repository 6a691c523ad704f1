// The simulator's accepted-push log as the durable-wave tests read it: lines counted while it grows, and per
// token the apns-ids of its lines in order. A byte scan of the log's fixed field order
// (`{"time":…,"token":"…",…,"apns-id":"…",…}`): hundreds of thousands of lines are too many for
// JSONSerialization in a debug build.
import Foundation
import Glibc

/// Counts the lines of a file that only grows, reading only what was appended since the last call.
final class GrowingLineCounter {
    let path: String
    private var offset: UInt64 = 0
    private(set) var lines = 0

    init(path: String) { self.path = path }

    /// Lines so far (0 while the file does not exist).
    func count() -> Int {
        guard let handle = FileHandle(forReadingAtPath: path) else { return lines }
        defer { try? handle.close() }
        try? handle.seek(toOffset: offset)
        while let chunk = try? handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            offset += UInt64(chunk.count)
            chunk.withUnsafeBytes { bytes in
                var start = 0
                while start < bytes.count, let newline = memchr(bytes.baseAddress! + start, 0x0A, bytes.count - start) {
                    lines += 1
                    start = UnsafeRawPointer(newline) - bytes.baseAddress! + 1
                }
            }
        }
        return lines
    }
}

/// Every whole record of an accepted-push log: per token, the apns-ids of its lines in the order written.
struct AcceptedLog {
    /// token hex → apns-ids (lower-case), one per line.
    var idsByToken: [String: [String]] = [:]
    var records = 0
    /// Each record's `time` (ms since the epoch), in file order.
    var times: [Int64] = []
    /// Lines that are not whole records (a kill in the middle of a write may cut one short).
    var unparsable = 0
    /// Broadcast pushes (`"token":null` with a `channel-id`), in file order: the channel and the sender's
    /// apns-request-id (nil when it sent none).
    var broadcasts: [(channelID: String, requestID: String?)] = []

    init(path: String) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        idsByToken.reserveCapacity(1 << 18)
        data.withUnsafeBytes { scan($0) }
    }

    /// Tokens with more than one line.
    var duplicatedTokens: [String] { idsByToken.filter { $0.value.count > 1 }.map(\.key) }
    /// Lines beyond the first of each token.
    var extraLines: Int { records - idsByToken.count }

    private mutating func scan(_ file: UnsafeRawBufferPointer) {
        guard let base = file.baseAddress else { return }
        var start = 0
        while start < file.count {
            var end = file.count
            if let newline = memchr(base + start, 0x0A, file.count - start) { end = UnsafeRawPointer(newline) - base }
            let line = UnsafeRawBufferPointer(start: base + start, count: end - start)
            start = end + 1
            if line.isEmpty { continue }
            if line.last == UInt8(ascii: "}"), let channel = Self.field(#","channel-id":""#, in: line) {
                broadcasts.append((channel, Self.field(#","apns-request-id":""#, in: line)))
                continue
            }
            guard line.last == UInt8(ascii: "}"), let token = Self.field(#","token":""#, in: line),
                let id = Self.field(#","apns-id":""#, in: line)
            else {
                unparsable += 1
                continue
            }
            idsByToken[token, default: []].append(id)
            records += 1
            times.append(Self.time(in: line))
        }
    }

    /// The record's leading `{"time":<ms>`: 0 when it has none.
    private static func time(in line: UnsafeRawBufferPointer) -> Int64 {
        let key = Array(#"{"time":"#.utf8)
        guard line.count > key.count, line.prefix(key.count).elementsEqual(key) else { return 0 }
        var value: Int64 = 0
        for byte in line.dropFirst(key.count) {
            guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { break }
            value = value &* 10 &+ Int64(byte - UInt8(ascii: "0"))
        }
        return value
    }

    /// The string after the first `key` (which ends with the opening quote), up to the closing quote.
    private static func field(_ key: String, in line: UnsafeRawBufferPointer) -> String? {
        let length = key.utf8.count
        var offset = 0
        while offset + length <= line.count {
            guard let comma = memchr(line.baseAddress! + offset, Int32(UInt8(ascii: ",")), line.count - offset) else {
                return nil
            }
            offset = UnsafeRawPointer(comma) - line.baseAddress!
            guard offset + length <= line.count else { return nil }
            if memcmp(comma, key, length) == 0 {
                let valueStart = offset + length
                guard
                    let quote = memchr(
                        line.baseAddress! + valueStart, Int32(UInt8(ascii: "\"")), line.count - valueStart)
                else {
                    return nil
                }
                let valueEnd = UnsafeRawPointer(quote) - line.baseAddress!
                return String(decoding: UnsafeRawBufferPointer(rebasing: line[valueStart..<valueEnd]), as: UTF8.self)
            }
            offset += 1
        }
        return nil
    }
}

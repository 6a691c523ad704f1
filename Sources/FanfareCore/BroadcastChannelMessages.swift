/// `message-storage-policy` of an APNs broadcast channel (apns-spec.md §8.2), fixed when the channel is created.
public enum ChannelStoragePolicy: Int, Sendable, CaseIterable, CustomStringConvertible {
    /// No message stored: devices offline at the moment miss it; a higher publishing budget; every publish
    /// must carry `apns-expiration: 0`. For frequent updates (a match's score).
    case noMessageStored = 0
    /// The most recent message is kept (up to 8 hours) for devices that come back. For infrequent updates.
    case mostRecentMessageStored = 1

    public var description: String {
        switch self {
        case .noMessageStored: return "0 (no message stored)"
        case .mostRecentMessageStored: return "1 (most recent message stored)"
        }
    }
}

/// What reading a channel tells (`GET /1/apps/<bundle id>/channels`, 200).
public struct BroadcastChannelInfo: Sendable, Equatable {
    public var storagePolicy: ChannelStoragePolicy
    /// `push-type` as APNs wrote it (`LiveActivity`), made printable.
    public var pushType: String

    public init(storagePolicy: ChannelStoragePolicy, pushType: String) {
        self.storagePolicy = storagePolicy
        self.pushType = pushType
    }
}

/// The JSON bodies of APNs' channel management API (apns-spec.md §8.2), written with `JSONWriter` and read with
/// the one JSON scanner of this module. Readers are strict about the parts they use and skip other members,
/// so a server that adds fields still works and a hostile one gets a clear error, never a trap.
public enum BroadcastChannelMessages {
    /// The push type every channel has (the only one APNs allows).
    public static let pushType = "LiveActivity"

    /// The create request's body: `{"message-storage-policy":N,"push-type":"LiveActivity"}`.
    public static func createBody(storagePolicy: ChannelStoragePolicy) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 128)
        let count = bytes.withUnsafeMutableBytes { buffer in
            var writer = JSONWriter(buffer: buffer)
            writer.beginObject()
            writer.key("message-storage-policy")
            writer.int(storagePolicy.rawValue)
            writer.key("push-type")
            writer.string(pushType)
            writer.endObject()
            assert(!writer.overflowed)
            return writer.count
        }
        return Array(bytes[0..<count])
    }

    /// Reads a read answer: `message-storage-policy` (0 or 1) and `push-type` are required.
    public static func parseInfo(_ bytes: UnsafeRawBufferPointer) throws(ChannelBodyError) -> BroadcastChannelInfo {
        var policy: ChannelStoragePolicy?
        var pushType: String?
        try readObject(bytes) { (scanner: inout JSONScanner, key: String) throws(ChannelBodyError) in
            switch key {
            case "message-storage-policy":
                let start = scanner.offset
                try wrap { () throws(JSONValidationError) in try scanner.scanNumber() }
                let digits = scanner.slice(start..<scanner.offset)
                guard let value = APNsErrorBody.parseInteger(digits),
                    let known = ChannelStoragePolicy(rawValue: Int(clamping: value))
                else {
                    throw .unexpected(
                        "message-storage-policy \(PrintableText.escaping(digits, limit: 32)) is neither 0 nor 1")
                }
                policy = known
            case "push-type":
                guard scanner.peek() == UInt8(ascii: "\"") else { throw .unexpected("push-type is not a string") }
                let (range, escapes) = try wrap { () throws(JSONValidationError) in try scanner.scanString() }
                pushType = PrintableText.escaping(scanner.decodeString(range, hasEscapes: escapes), limit: 64)
            default:
                try wrap { () throws(JSONValidationError) in try scanner.scanValue(allowNull: true, enclosingDepth: 1) }
            }
        }
        guard let policy else { throw .unexpected("the answer has no message-storage-policy") }
        guard let pushType else { throw .unexpected("the answer has no push-type") }
        return BroadcastChannelInfo(storagePolicy: policy, pushType: pushType)
    }

    /// Reads a list answer: `{"channels":["…", …]}`, or an empty body (Apple's prose says the body is empty;
    /// its table shows the list), which lists nothing. Every id must be a channel id.
    public static func parseChannelList(
        _ bytes: UnsafeRawBufferPointer
    ) throws(ChannelBodyError) -> [BroadcastChannelID] {
        if bytes.allSatisfy({ JSONScanner.isWhitespace($0) }) { return [] }
        var channels: [BroadcastChannelID] = []
        var sawChannels = false
        try readObject(bytes) { (scanner: inout JSONScanner, key: String) throws(ChannelBodyError) in
            guard key == "channels" else {
                try wrap { () throws(JSONValidationError) in try scanner.scanValue(allowNull: true, enclosingDepth: 1) }
                return
            }
            sawChannels = true
            try wrap { () throws(JSONValidationError) in try scanner.expect(UInt8(ascii: "["), .value) }
            scanner.skipWhitespace()
            if scanner.peek() == UInt8(ascii: "]") {
                scanner.offset += 1
                return
            }
            while true {
                scanner.skipWhitespace()
                guard scanner.peek() == UInt8(ascii: "\"") else {
                    throw .unexpected("channels[\(channels.count)] is not a string")
                }
                let (range, escapes) = try wrap { () throws(JSONValidationError) in try scanner.scanString() }
                let text = scanner.decodeString(range, hasEscapes: escapes)
                do {
                    channels.append(try BroadcastChannelID(text))
                } catch {
                    throw .unexpected(
                        "channels[\(channels.count)] '\(PrintableText.escaping(text, limit: 120))': \(error)")
                }
                scanner.skipWhitespace()
                if scanner.peek() == UInt8(ascii: ",") {
                    scanner.offset += 1
                    continue
                }
                try wrap { () throws(JSONValidationError) in try scanner.expect(UInt8(ascii: "]"), .commaOrArrayEnd) }
                return
            }
        }
        guard sawChannels else { throw .unexpected("the answer has no \"channels\" member") }
        return channels
    }

    /// Walks one top-level object, handing each member's value to `member` (which must consume it).
    private static func readObject(
        _ bytes: UnsafeRawBufferPointer, member: (inout JSONScanner, String) throws(ChannelBodyError) -> Void
    ) throws(ChannelBodyError) {
        var scanner = JSONScanner(bytes)
        try scanner.scanObjectDocument(invalid: { .invalidJSON($0) }) { scanner, key throws(ChannelBodyError) in
            try member(&scanner, scanner.decodeString(key.contents, hasEscapes: key.hasEscapes))
        }
    }

    private static func wrap<T>(_ body: () throws(JSONValidationError) -> T) throws(ChannelBodyError) -> T {
        do {
            return try body()
        } catch {
            throw .invalidJSON(error)
        }
    }
}

/// A channel management answer whose body is not what APNs documents.
public enum ChannelBodyError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidJSON(JSONValidationError)
    case unexpected(String)

    public var description: String {
        switch self {
        case .invalidJSON(let error): return "the answer's body is not valid JSON: \(error)"
        case .unexpected(let problem): return "the answer's body is not as APNs documents it: \(problem)"
        }
    }
}

/// An APNs broadcast channel id (apns-spec.md §8.2): the base64 text APNs returns in `apns-channel-id` when a
/// channel is created, sent back verbatim in `apns-channel-id` when publishing, reading or deleting.
///
/// Kept inline (no allocation) so a broadcast push can carry it like a token push carries its `DeviceToken`.
/// Channel ids contain `/`, `+` and `=`: wherever one goes into a path, a file name or a URL, encode it
/// (``pathSafe``) rather than pasting the text.
public struct BroadcastChannelID: Hashable, Sendable, CustomStringConvertible {
    /// Longest id accepted. Apple documents no maximum; its ids are 24 characters (16 bytes in base64).
    public static let maximumByteCount = 96

    @usableFromInline var storage: InlineArray<96, UInt8>
    @usableFromInline var length: UInt8

    /// Checks the text: standard base64 (`A–Z a–z 0–9 + /`), with or without `=` padding (at most two, only
    /// at the end, and then a length that is a multiple of 4), 1 to 96 characters.
    public init(_ text: some StringProtocol) throws(BroadcastChannelIDError) {
        var storage = InlineArray<96, UInt8>(repeating: 0)
        var count = 0
        var padding = 0
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "+"), UInt8(ascii: "/"):
                if padding > 0 { throw .invalidCharacter(offset: count) }
            case UInt8(ascii: "="):
                padding += 1
                if padding > 2 { throw .invalidCharacter(offset: count) }
            default:
                throw .invalidCharacter(offset: count)
            }
            if count < Self.maximumByteCount { storage[count] = byte }
            count += 1
        }
        guard count > 0 else { throw .empty }
        guard count <= Self.maximumByteCount else { throw .tooLong(count) }
        guard padding == 0 || count % 4 == 0 else { throw .badPadding }
        guard padding < count else { throw .invalidCharacter(offset: 0) }
        self.storage = storage
        self.length = UInt8(count)
    }

    /// Checks raw bytes (a header value) the same way.
    public init(bytes: UnsafeRawBufferPointer) throws(BroadcastChannelIDError) {
        guard bytes.count <= Self.maximumByteCount else { throw .tooLong(bytes.count) }
        try self.init(String(decoding: bytes, as: UTF8.self))
    }

    @inlinable public var byteCount: Int { Int(length) }

    /// The id's ASCII bytes (what `apns-channel-id` carries).
    @inlinable
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let used = Int(length)
        return try storage.span.withUnsafeBytes { all in try body(UnsafeRawBufferPointer(rebasing: all[0..<used])) }
    }

    /// The id as APNs wrote it. Allocates.
    public var description: String { withUnsafeBytes { String(decoding: $0, as: UTF8.self) } }

    /// The id with `/`, `+` and `=` percent-encoded (`%2F`, `%2B`, `%3D`): safe as one URL path segment or a
    /// file name, and decoded back by ``init(pathSafe:)``.
    public var pathSafe: String {
        var out = ""
        out.reserveCapacity(byteCount + 12)
        withUnsafeBytes { bytes in
            for byte in bytes {
                switch byte {
                case UInt8(ascii: "/"): out += "%2F"
                case UInt8(ascii: "+"): out += "%2B"
                case UInt8(ascii: "="): out += "%3D"
                default: out.unicodeScalars.append(Unicode.Scalar(byte))
                }
            }
        }
        return out
    }

    /// Reads an id from its ``pathSafe`` form (the percent escapes in either case) or from plain text.
    public init(pathSafe text: some StringProtocol) throws(BroadcastChannelIDError) {
        var decoded = ""
        var rest = Substring(text)
        while let percent = rest.firstIndex(of: "%") {
            decoded += rest[..<percent]
            let escape = rest[percent...].prefix(3).uppercased()
            switch escape {
            case "%2F": decoded += "/"
            case "%2B": decoded += "+"
            case "%3D": decoded += "="
            default: throw .invalidCharacter(offset: decoded.utf8.count)
            }
            rest = rest[percent...].dropFirst(3)
        }
        decoded += rest
        try self.init(decoded)
    }

    public static func == (lhs: BroadcastChannelID, rhs: BroadcastChannelID) -> Bool {
        lhs.length == rhs.length && lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in a.elementsEqual(b) } }
    }

    public func hash(into hasher: inout Hasher) {
        withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}

/// Why a text is not a broadcast channel id.
public enum BroadcastChannelIDError: Error, Sendable, Equatable, CustomStringConvertible {
    case empty
    case tooLong(Int)
    /// A byte outside base64's alphabet, or `=` before the end (UTF-8 offset).
    case invalidCharacter(offset: Int)
    /// `=` padding on a length that is not a multiple of 4.
    case badPadding

    public var description: String {
        switch self {
        case .empty: return "the channel id is empty"
        case .tooLong(let count):
            return "the channel id is \(count) characters; at most \(BroadcastChannelID.maximumByteCount) are accepted"
        case .invalidCharacter(let offset):
            return
                "the channel id is not base64 (A-Z a-z 0-9 + / and = padding at the end): bad character at offset \(offset)"
        case .badPadding: return "the channel id's = padding needs a length that is a multiple of 4"
        }
    }
}

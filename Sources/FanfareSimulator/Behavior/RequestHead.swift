/// The request headers the simulator understands. Anything else is counted (header list size) and ignored.
public enum RequestHeaderField: Int, Sendable, CaseIterable {
    case method
    case path
    case scheme
    case authority
    case host
    case authorization
    case apnsTopic
    case apnsPushType
    case apnsPriority
    case apnsExpiration
    case apnsID
    case apnsCollapseID
    case apnsChannelID
    case apnsRequestID
    case contentType
    case contentLength

    /// Number of fields; sizes the per-head span table and the bit masks.
    public static let fieldCount = 16

    /// The lower-case wire name (HTTP/2 requires lower-case names; another spelling is not recognised).
    public var name: StaticString {
        switch self {
        case .method: ":method"
        case .path: ":path"
        case .scheme: ":scheme"
        case .authority: ":authority"
        case .host: "host"
        case .authorization: "authorization"
        case .apnsTopic: "apns-topic"
        case .apnsPushType: "apns-push-type"
        case .apnsPriority: "apns-priority"
        case .apnsExpiration: "apns-expiration"
        case .apnsID: "apns-id"
        case .apnsCollapseID: "apns-collapse-id"
        case .apnsChannelID: "apns-channel-id"
        case .apnsRequestID: "apns-request-id"
        case .contentType: "content-type"
        case .contentLength: "content-length"
        }
    }

    /// The field for a lower-case header name, or nil if the simulator ignores it.
    /// Dispatches on length first so most names are settled by one or two comparisons.
    public static func recognise(_ name: UnsafeRawBufferPointer) -> RequestHeaderField? {
        let candidate: RequestHeaderField
        switch name.count {
        case 4: candidate = .host
        case 5: candidate = .path
        case 7:
            guard name[0] == UInt8(ascii: ":") || name[0] == UInt8(ascii: "a") else { return nil }
            if name[0] == UInt8(ascii: "a") {
                candidate = .apnsID
            } else {
                candidate = name[1] == UInt8(ascii: "m") ? .method : .scheme
            }
        case 10: candidate = name[0] == UInt8(ascii: ":") ? .authority : .apnsTopic
        case 12: candidate = .contentType
        case 13:
            candidate = name[0] == UInt8(ascii: "a") && name[1] == UInt8(ascii: "u") ? .authorization : .apnsPriority
        case 14: candidate = name[0] == UInt8(ascii: "c") ? .contentLength : .apnsPushType
        case 15:
            guard name.count > 5 else { return nil }
            switch name[5] {
            case UInt8(ascii: "e"): candidate = .apnsExpiration
            case UInt8(ascii: "c"): candidate = .apnsChannelID
            case UInt8(ascii: "r"): candidate = .apnsRequestID
            default: return nil
            }
        case 16: candidate = .apnsCollapseID
        default: return nil
        }
        return name.equals(candidate.name) ? candidate : nil
    }

    var bit: UInt32 { 1 << UInt32(rawValue) }
}

/// One recognised header's value as stored in a `RequestHead`.
public enum HeaderValue {
    /// The header was not sent.
    case absent
    /// The header was sent; the bytes live in the head's arena until `reset()` or deinit.
    case present(UnsafeRawBufferPointer)
    /// The header was sent but its value did not fit in the remaining arena; only its length is known.
    /// The validator treats it as malformed for that field.
    case oversized(byteCount: Int)
}

/// One HTTP/2 stream's request, collected as the server session decodes it, with zero allocation per request.
///
/// A head owns one fixed allocation made at `init`: a table of value spans, a header-value arena and a
/// body prefix buffer. `add(name:value:)` copies the values of recognised headers into the arena;
/// `appendBody` counts body bytes and keeps the first `bodyCapacity` of them (the validator needs the
/// whole body up to the size limit + 1 for the size and JSON checks, and the accepted-push log embeds it).
/// `reset()` makes the head reusable for the next stream. The type is `~Copyable` so the storage has
/// exactly one owner; a server keeps N of them in a `RequestHeadPool`.
///
/// A header seen twice keeps its first value and is recorded as duplicated (`DuplicateHeaders`).
public struct RequestHead: ~Copyable {
    /// Header-value bytes per stream. An ES256 JWT is ~200 bytes and a 100-byte token path ~210, so 2 KiB
    /// leaves room for every recognised header at realistic sizes.
    public static let defaultArenaCapacity = 2048
    /// The largest APNs body limit (broadcast/VoIP 5120) plus one byte to tell "at the limit" from "over".
    public static let defaultBodyCapacity = 5121

    private struct ValueSpan {
        var offset: Int32
        var count: Int32
    }

    private let spans: UnsafeMutablePointer<ValueSpan>
    private let storage: UnsafeMutableRawBufferPointer
    public let arenaCapacity: Int
    public let bodyCapacity: Int

    private var arenaUsed = 0
    private var presentMask: UInt32 = 0
    private var oversizedMask: UInt32 = 0
    private var duplicateMask: UInt32 = 0
    /// Number of header fields received, recognised or not.
    public private(set) var headerCount = 0
    /// Sum over all received fields of name + value + 32 (the RFC 7540 SETTINGS_MAX_HEADER_LIST_SIZE measure).
    public private(set) var headerListSize = 0
    /// Body bytes received so far (all of them, not only the stored prefix).
    public private(set) var bodyByteCount = 0
    private var bodyStoredCount = 0

    public init(
        arenaCapacity: Int = RequestHead.defaultArenaCapacity, bodyCapacity: Int = RequestHead.defaultBodyCapacity
    ) {
        precondition(arenaCapacity > 0 && arenaCapacity <= Int(Int32.max), "arena capacity must be positive")
        precondition(bodyCapacity >= 0 && bodyCapacity <= Int(Int32.max), "body capacity must not be negative")
        self.arenaCapacity = arenaCapacity
        self.bodyCapacity = bodyCapacity
        spans = .allocate(capacity: RequestHeaderField.fieldCount)
        spans.initialize(repeating: ValueSpan(offset: 0, count: 0), count: RequestHeaderField.fieldCount)
        storage = .allocate(byteCount: arenaCapacity + max(bodyCapacity, 1), alignment: 16)
    }

    deinit {
        spans.deinitialize(count: RequestHeaderField.fieldCount)
        spans.deallocate()
        storage.deallocate()
    }

    /// Forgets the previous stream; keeps the storage.
    public mutating func reset() {
        arenaUsed = 0
        presentMask = 0
        oversizedMask = 0
        duplicateMask = 0
        headerCount = 0
        headerListSize = 0
        bodyByteCount = 0
        bodyStoredCount = 0
    }

    /// Records one header field (as decoded: a name that is not lower-case matches no known field).
    public mutating func add(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        headerCount += 1
        headerListSize += name.count + value.count + 32
        guard let field = RequestHeaderField.recognise(name) else { return }
        let bit = field.bit
        if presentMask & bit != 0 {
            duplicateMask |= bit
            return
        }
        presentMask |= bit
        guard value.count <= arenaCapacity - arenaUsed else {
            oversizedMask |= bit
            spans[field.rawValue] = ValueSpan(offset: 0, count: Int32(clamping: value.count))
            return
        }
        if value.count > 0, let source = value.baseAddress, let arenaBase = storage.baseAddress {
            (arenaBase + arenaUsed).copyMemory(from: source, byteCount: value.count)
        }
        spans[field.rawValue] = ValueSpan(offset: Int32(arenaUsed), count: Int32(value.count))
        arenaUsed += value.count
        assert(arenaUsed <= arenaCapacity)
    }

    /// Counts and stores (up to `bodyCapacity`) one DATA chunk.
    public mutating func appendBody(_ bytes: UnsafeRawBufferPointer) {
        let room = bodyCapacity - bodyStoredCount
        let stored = min(room, bytes.count)
        if stored > 0, let source = bytes.baseAddress, let base = storage.baseAddress {
            (base + arenaCapacity + bodyStoredCount).copyMemory(from: source, byteCount: stored)
            bodyStoredCount += stored
        }
        bodyByteCount += bytes.count
        assert(bodyStoredCount <= bodyCapacity && bodyStoredCount <= bodyByteCount)
    }

    /// Counts body bytes without storing them (when the caller keeps the body elsewhere or discards it).
    /// After this, `isBodyFullyStored` is false unless `count` is zero.
    public mutating func appendBody(count: Int) {
        precondition(count >= 0, "body byte count must not be negative")
        bodyByteCount += count
    }

    /// A recognised header's value.
    public func lookup(_ field: RequestHeaderField) -> HeaderValue {
        let bit = field.bit
        guard presentMask & bit != 0 else { return .absent }
        let span = spans[field.rawValue]
        if oversizedMask & bit != 0 { return .oversized(byteCount: Int(span.count)) }
        return .present(UnsafeRawBufferPointer(start: storage.baseAddress! + Int(span.offset), count: Int(span.count)))
    }

    /// A recognised header's bytes; nil when absent or oversized. Valid until `reset()` or deinit.
    public func value(_ field: RequestHeaderField) -> UnsafeRawBufferPointer? {
        if case .present(let bytes) = lookup(field) { return bytes }
        return nil
    }

    public func isPresent(_ field: RequestHeaderField) -> Bool {
        presentMask & field.bit != 0
    }

    public func isDuplicated(_ field: RequestHeaderField) -> Bool {
        duplicateMask & field.bit != 0
    }

    /// Some recognised header appeared more than once.
    public var hasDuplicateHeaders: Bool { duplicateMask != 0 }

    /// Some recognised header's value did not fit in the arena.
    public var hasOversizedHeaders: Bool { oversizedMask != 0 }

    /// The stored body bytes: the whole body when `isBodyFullyStored`, else its first `bodyCapacity` bytes.
    public var body: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: storage.baseAddress! + arenaCapacity, count: bodyStoredCount)
    }

    public var isBodyFullyStored: Bool { bodyStoredCount == bodyByteCount }
}

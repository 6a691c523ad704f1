/// The static table of RFC 7541 Appendix A (indices 1...61), with the indices the client and simulator use.
///
/// Names and values live in one immutable block built at first use (thread-safe lazy initialization), so
/// `entry(_:)` hands out raw buffers without copying or allocating.
public enum HPACKStaticTable {
    public static let count = 61

    public static let authority = 1  // ":authority" (name only)
    public static let methodGET = 2
    public static let methodPOST = 3
    public static let path = 4  // ":path" "/" (use as the name of any path)
    public static let schemeHTTP = 6
    public static let schemeHTTPS = 7
    public static let status200 = 8  // also the name ":status"
    public static let status204 = 9
    public static let status400 = 12
    public static let status404 = 13
    public static let status500 = 14
    /// ":status" as a name (its entry's value is "200").
    public static let statusNameIndex = 8
    public static let authorization = 23
    public static let contentLength = 28
    public static let contentType = 31
    public static let date = 33
    public static let retryAfter = 53
    public static let server = 54
    public static let userAgent = 58

    /// One entry's name and value; the memory is never freed.
    public struct Entry {
        public let name: UnsafeRawBufferPointer
        public let value: UnsafeRawBufferPointer

        public var nameString: String { String(decoding: name, as: UTF8.self) }
        public var valueString: String { String(decoding: value, as: UTF8.self) }
    }

    /// The index of a `:status` field the static table holds whole (200, 204, 206, 304, 400, 404, 500).
    @inline(__always)
    public static func statusIndex(_ status: Int) -> Int? {
        switch status {
        case 200: 8
        case 204: 9
        case 206: 10
        case 304: 11
        case 400: 12
        case 404: 13
        case 500: 14
        default: nil
        }
    }

    /// The entry at `index` (1...61).
    @inline(__always)
    public static func entry(_ index: Int) -> Entry {
        precondition(index >= 1 && index <= count, "HPACK static table index out of range")
        return storage.entries[index]
    }

    /// The first index whose name is `name` (lowercase), if any.
    public static func index(name: String) -> Int? {
        fields.firstIndex { $0.name == name }.map { $0 + 1 }
    }

    /// The index of the entry with exactly this name and value, if any.
    public static func index(name: String, value: String) -> Int? {
        fields.firstIndex { $0.name == name && $0.value == value }.map { $0 + 1 }
    }

    /// RFC 7541 Appendix A, in index order from 1.
    static let fields: [(name: String, value: String)] = [
        (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"), (":path", "/index.html"),
        (":scheme", "http"), (":scheme", "https"), (":status", "200"), (":status", "204"), (":status", "206"),
        (":status", "304"), (":status", "400"), (":status", "404"), (":status", "500"), ("accept-charset", ""),
        ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""), ("accept", ""),
        ("access-control-allow-origin", ""), ("age", ""), ("allow", ""), ("authorization", ""),
        ("cache-control", ""), ("content-disposition", ""), ("content-encoding", ""), ("content-language", ""),
        ("content-length", ""), ("content-location", ""), ("content-range", ""), ("content-type", ""),
        ("cookie", ""), ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
        ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
        ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""), ("max-forwards", ""),
        ("proxy-authenticate", ""), ("proxy-authorization", ""), ("range", ""), ("referer", ""), ("refresh", ""),
        ("retry-after", ""), ("server", ""), ("set-cookie", ""), ("strict-transport-security", ""),
        ("transfer-encoding", ""), ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
    ]

    private static let storage = Storage()

    /// All names and values in one allocation; `entries[0]` is unused so the index needs no adjustment.
    private struct Storage: @unchecked Sendable {
        let entries: UnsafePointer<Entry>

        init() {
            let fields = HPACKStaticTable.fields
            precondition(fields.count == HPACKStaticTable.count)
            let byteCount = fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count }
            let bytes = UnsafeMutableRawPointer.allocate(byteCount: max(byteCount, 1), alignment: 1)
            let entries = UnsafeMutablePointer<Entry>.allocate(capacity: fields.count + 1)
            let empty = UnsafeRawBufferPointer(start: bytes, count: 0)
            entries.initialize(to: Entry(name: empty, value: empty))
            var offset = 0
            func copy(_ text: String) -> UnsafeRawBufferPointer {
                let utf8 = Array(text.utf8)
                let start = bytes + offset
                for (position, byte) in utf8.enumerated() {
                    start.storeBytes(of: byte, toByteOffset: position, as: UInt8.self)
                }
                offset += utf8.count
                return UnsafeRawBufferPointer(start: start, count: utf8.count)
            }
            for (index, field) in fields.enumerated() {
                (entries + index + 1).initialize(to: Entry(name: copy(field.name), value: copy(field.value)))
            }
            self.entries = UnsafePointer(entries)
        }
    }
}

import Glibc

/// What makes a request's header block malformed (RFC 9113 §8.1.1, §8.2, §8.3.1), checked field by field as the
/// block is decoded. A malformed request is a stream error of type PROTOCOL_ERROR: the session resets the stream
/// and the rest of the connection goes on, as nghttp2 does.
///
/// Checked: field names are non-empty lower-case tokens; values hold no NUL, CR or LF; only the request
/// pseudo-header fields `:method`, `:scheme`, `:path`, `:authority`, each at most once and all before the first
/// regular field; `:method`, `:scheme` and a non-empty `:path` present (CONNECT: `:authority` instead of the
/// other two); no connection-specific fields (`connection`, `keep-alive`, `proxy-connection`,
/// `transfer-encoding`, `upgrade`; `te` only as `trailers`); `content-length` a decimal number, which the
/// session then holds the DATA to. Trailers carry no pseudo-header fields.
struct HTTP2RequestFieldCheck {
    private static let method: UInt8 = 1
    private static let scheme: UInt8 = 2
    private static let path: UInt8 = 4
    private static let authority: UInt8 = 8

    private let isTrailers: Bool
    private var pseudoSeen: UInt8 = 0
    private var regularSeen = false
    private var isConnect = false
    /// The first problem found; later fields are not looked at.
    private(set) var problem: StaticString?
    /// The `content-length` value, or -1 when the request has none.
    private(set) var contentLength: Int64 = -1

    init(trailers: Bool = false) {
        isTrailers = trailers
    }

    mutating func check(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        guard problem == nil else { return }
        guard let first = name.first else { return fail("an empty field name") }
        guard Self.isValidValue(value) else { return fail("NUL, CR or LF in a field value") }
        if first == UInt8(ascii: ":") {
            checkPseudo(name, value)
            return
        }
        regularSeen = true
        guard Self.isLowerCaseToken(name) else { return fail("a field name that is not a lower-case token") }
        switch name.count {
        case 2 where Self.equals(name, "te"):
            if !Self.equals(value, "trailers") { fail("te other than trailers") }
        case 7 where Self.equals(name, "upgrade"): fail("a connection-specific field (upgrade)")
        case 10 where Self.equals(name, "connection") || Self.equals(name, "keep-alive"):
            fail("a connection-specific field (connection, keep-alive)")
        case 14 where Self.equals(name, "content-length"): checkContentLength(value)
        case 16 where Self.equals(name, "proxy-connection"): fail("a connection-specific field (proxy-connection)")
        case 17 where Self.equals(name, "transfer-encoding"): fail("a connection-specific field (transfer-encoding)")
        default: break
        }
    }

    /// After the last field: the problem with the block, if any (required pseudo-header fields missing).
    mutating func finish() -> StaticString? {
        if problem == nil && !isTrailers {
            if isConnect {
                if pseudoSeen & Self.authority == 0 || pseudoSeen & (Self.scheme | Self.path) != 0 {
                    fail("CONNECT without :authority or with :scheme or :path")
                }
            } else if pseudoSeen & (Self.method | Self.scheme | Self.path) != Self.method | Self.scheme | Self.path {
                fail("a request without :method, :scheme or :path")
            }
        }
        return problem
    }

    private mutating func checkPseudo(_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) {
        guard !isTrailers else { return fail("a pseudo-header field in trailers") }
        guard !regularSeen else { return fail("a pseudo-header field after a regular one") }
        let bit: UInt8
        if Self.equals(name, ":method") {
            bit = Self.method
            isConnect = Self.equals(value, "CONNECT")
        } else if Self.equals(name, ":scheme") {
            bit = Self.scheme
        } else if Self.equals(name, ":path") {
            guard !value.isEmpty else { return fail("an empty :path") }
            bit = Self.path
        } else if Self.equals(name, ":authority") {
            bit = Self.authority
        } else {
            return fail("an unknown pseudo-header field")
        }
        guard pseudoSeen & bit == 0 else { return fail("a pseudo-header field twice") }
        pseudoSeen |= bit
    }

    private mutating func checkContentLength(_ value: UnsafeRawBufferPointer) {
        guard contentLength < 0 else { return fail("content-length twice") }
        guard !value.isEmpty && value.count <= 18 else { return fail("content-length is not a decimal number") }
        var length: Int64 = 0
        for byte in value {
            guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else {
                return fail("content-length is not a decimal number")
            }
            length = length * 10 + Int64(byte - UInt8(ascii: "0"))
        }
        contentLength = length
    }

    private mutating func fail(_ what: StaticString) {
        problem = what
    }

    @inline(__always)
    private static func equals(_ bytes: UnsafeRawBufferPointer, _ text: StaticString) -> Bool {
        bytes.count == text.utf8CodeUnitCount && memcmp(bytes.baseAddress!, text.utf8Start, bytes.count) == 0
    }

    /// tchar (RFC 9110 §5.6.2) without upper-case letters, as a set of the octets 0-127: one test per octet.
    private static let lowerCaseTokenOctets: (UInt64, UInt64) = {
        var words: [UInt64] = [0, 0]
        for byte in Array("abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~".utf8) {
            words[Int(byte >> 6)] |= 1 << UInt64(byte & 63)
        }
        return (words[0], words[1])
    }()

    private static func isLowerCaseToken(_ name: UnsafeRawBufferPointer) -> Bool {
        let octets = lowerCaseTokenOctets
        for byte in name {
            // Octets of 128 and above are never token characters.
            let word = byte < 64 ? octets.0 : byte < 128 ? octets.1 : 0
            if (word >> UInt64(byte & 63)) & 1 == 0 { return false }
        }
        return true
    }

    /// No NUL, CR or LF (§8.2.1), eight octets at a time: a word has a zero octet when
    /// `(w - 0x01…) & ~w & 0x80…` is not zero; XOR with `0x0A…` and `0x0D…` turns LF and CR into zeros.
    static func isValidValue(_ value: UnsafeRawBufferPointer) -> Bool {
        guard let base = value.baseAddress else { return true }
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        @inline(__always) func hasZero(_ word: UInt64) -> Bool { (word &- ones) & ~word & highs != 0 }
        var offset = 0
        while offset + 8 <= value.count {
            let word = base.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            if hasZero(word) || hasZero(word ^ (ones &* 0x0A)) || hasZero(word ^ (ones &* 0x0D)) { return false }
            offset += 8
        }
        while offset < value.count {
            let byte = base.load(fromByteOffset: offset, as: UInt8.self)
            if byte == 0 || byte == 0x0A || byte == 0x0D { return false }
            offset += 1
        }
        return true
    }
}

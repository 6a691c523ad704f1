import CNghttp2
#if canImport(Glibc)
import Glibc
#endif

/// Small helpers over nghttp2 1.52 (the simulator's framing) and header parsing shared with the client.
public enum HTTP2 {
    /// nghttp2's text for one of its error codes.
    public static func describe(_ code: Int32) -> String {
        String(cString: nghttp2_strerror(code))
    }

    /// The RFC 9113 name of an error code in RST_STREAM / GOAWAY.
    public static func describeErrorCode(_ code: UInt32) -> String {
        String(cString: nghttp2_http2_strerror(code))
    }

    /// A header with a static name and a value nghttp2 must not copy (the caller keeps it alive until sent).
    @inlinable
    public static func header(
        _ name: StaticString, _ value: UnsafeRawPointer, _ count: Int, noIndex: Bool = false
    ) -> nghttp2_nv {
        var flags = UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue)
        if noIndex { flags |= UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue) }
        return nghttp2_nv(
            name: UnsafeMutablePointer(mutating: name.utf8Start), value: UnsafeMutablePointer(mutating: value.assumingMemoryBound(to: UInt8.self)),
            namelen: name.utf8CodeUnitCount, valuelen: count, flags: flags)
    }

    /// A header whose name and value are both static strings.
    @inlinable
    public static func header(_ name: StaticString, _ value: StaticString) -> nghttp2_nv {
        header(name, UnsafeRawPointer(value.utf8Start), value.utf8CodeUnitCount)
    }

    /// Compares bytes from nghttp2 with a static string.
    @inlinable
    public static func equals(_ pointer: UnsafePointer<UInt8>, _ count: Int, _ literal: StaticString) -> Bool {
        guard count == literal.utf8CodeUnitCount else { return false }
        return memcmp(pointer, literal.utf8Start, count) == 0
    }

    /// Parses a small unsigned decimal (e.g. `:status`); -1 if not a number.
    @inlinable
    public static func parseDecimal(_ pointer: UnsafePointer<UInt8>, _ count: Int) -> Int {
        guard count > 0 && count <= 18 else { return -1 }
        var value = 0
        for index in 0..<count {
            let digit = Int(pointer[index]) &- 48
            guard digit >= 0 && digit <= 9 else { return -1 }
            value = value &* 10 &+ digit
        }
        return value
    }
}

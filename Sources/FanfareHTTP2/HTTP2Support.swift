#if canImport(Glibc)
import Glibc
#endif

/// Small helpers for reading header values, shared by the client's connections.
public enum HTTP2 {
    /// Compares bytes from the wire with a static string.
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

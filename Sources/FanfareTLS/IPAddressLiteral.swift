// Telling IP literals from DNS names: they go in different certificate and SNI fields.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

enum IPAddressLiteral {
    /// True for dotted IPv4 ("127.0.0.1") and IPv6 ("::1") text, without brackets.
    static func matches(_ text: String) -> Bool {
        var address = in6_addr()
        return inet_pton(AF_INET, text, &address) == 1 || inet_pton(AF_INET6, text, &address) == 1
    }
}

import CURing
import Glibc

/// An IPv4 or IPv6 socket address (a `sockaddr_storage` and its length).
public struct SocketAddress: Sendable, Hashable, CustomStringConvertible {
    private var storage: sockaddr_storage
    public let length: socklen_t

    /// Wraps a kernel-filled address (getaddrinfo, getsockname, accept).
    public init(storage: sockaddr_storage, length: socklen_t) {
        precondition(Int(length) <= MemoryLayout<sockaddr_storage>.size)
        self.storage = storage
        self.length = length
    }

    /// Copies `length` bytes from a `sockaddr`.
    public init(_ address: UnsafePointer<sockaddr>, length: socklen_t) {
        precondition(Int(length) <= MemoryLayout<sockaddr_storage>.size)
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { bytes in
            bytes.baseAddress!.copyMemory(from: address, byteCount: Int(length))
        }
        self.init(storage: storage, length: length)
    }

    /// A numeric IPv4 (`127.0.0.1`) or IPv6 (`::1`) address; no name lookup.
    public init(ip: String, port: UInt16) throws(IOError) {
        var storage = sockaddr_storage()
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, ip, &v4) == 1 {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr = v4
            withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: address, as: sockaddr_in.self) }
            self.init(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in>.size))
        } else if inet_pton(AF_INET6, ip, &v6) == 1 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            address.sin6_addr = v6
            withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: address, as: sockaddr_in6.self) }
            self.init(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in6>.size))
        } else {
            throw IOError(operation: "parse address", message: "'\(ip)' is not a numeric IPv4 or IPv6 address")
        }
    }

    /// No address (family AF_UNSPEC, length 0): a placeholder before a real address is known.
    public static let unspecified = SocketAddress(storage: sockaddr_storage(), length: 0)

    /// The address `fd` is bound to (getsockname), e.g. the real port after binding port 0.
    public static func local(of fd: Int32) -> SocketAddress? { Sockets.localAddress(of: fd) }

    /// The peer of a connected `fd` (getpeername).
    public static func peer(of fd: Int32) -> SocketAddress? { Sockets.peerAddress(of: fd) }

    /// `127.0.0.1:port`.
    public static func loopbackIPv4(port: UInt16) -> SocketAddress {
        try! SocketAddress(ip: "127.0.0.1", port: port)
    }

    public var family: Int32 { Int32(storage.ss_family) }
    public var isIPv4: Bool { family == AF_INET && Int(length) >= MemoryLayout<sockaddr_in>.size }
    public var isIPv6: Bool { family == AF_INET6 && Int(length) >= MemoryLayout<sockaddr_in6>.size }

    /// The port in host byte order (0 for an unspecified address).
    public var port: UInt16 {
        get {
            if isIPv4 { return UInt16(bigEndian: asIPv4.sin_port) }
            if isIPv6 { return UInt16(bigEndian: asIPv6.sin6_port) }
            return 0
        }
        set {
            if isIPv4 {
                var address = asIPv4
                address.sin_port = newValue.bigEndian
                withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: address, as: sockaddr_in.self) }
            } else if isIPv6 {
                var address = asIPv6
                address.sin6_port = newValue.bigEndian
                withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: address, as: sockaddr_in6.self) }
            }
        }
    }

    /// The address without the port: `127.0.0.1`, `::1` (with `%scope` for scoped IPv6).
    public var host: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        if isIPv4 {
            var address = asIPv4.sin_addr
            guard inet_ntop(AF_INET, &address, &buffer, socklen_t(buffer.count)) != nil else { return "?" }
            return SocketAddress.string(fromNulTerminated: buffer)
        }
        if isIPv6 {
            let full = asIPv6
            var address = full.sin6_addr
            guard inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count)) != nil else { return "?" }
            let text = SocketAddress.string(fromNulTerminated: buffer)
            return full.sin6_scope_id == 0 ? text : "\(text)%\(full.sin6_scope_id)"
        }
        return "unspecified"
    }

    /// `127.0.0.1:8443` or `[::1]:8443`.
    public var description: String {
        if isIPv4 { return "\(host):\(port)" }
        if isIPv6 { return "[\(host)]:\(port)" }
        return "unspecified"
    }

    /// Calls `body` with a pointer to the `sockaddr` and its length; the pointer is valid only inside.
    public func withSockaddr<Result, Failure: Error>(
        _ body: (UnsafePointer<sockaddr>, socklen_t) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        var copy = storage
        return try withUnsafeMutablePointer(to: &copy) { (pointer) throws(Failure) -> Result in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { (address) throws(Failure) -> Result in
                try body(UnsafePointer(address), length)
            }
        }
    }

    private static func string(fromNulTerminated buffer: [CChar]) -> String {
        let end = buffer.firstIndex(of: 0) ?? buffer.count
        return String(decoding: buffer[..<end].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private var asIPv4: sockaddr_in {
        withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in.self) }
    }

    private var asIPv6: sockaddr_in6 {
        withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in6.self) }
    }

    // Equal when the meaningful bytes (the first `length`) are equal.
    public static func == (left: SocketAddress, right: SocketAddress) -> Bool {
        guard left.length == right.length else { return false }
        return withUnsafeBytes(of: left.storage) { a in
            withUnsafeBytes(of: right.storage) { b in
                a.prefix(Int(left.length)).elementsEqual(b.prefix(Int(right.length)))
            }
        }
    }

    public func hash(into hasher: inout Hasher) {
        withUnsafeBytes(of: storage) { hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: $0.prefix(Int(length)))) }
    }
}

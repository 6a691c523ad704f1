import CURing
import Glibc

/// Name resolution through getaddrinfo. Uncached on purpose: APNs asks for a fresh lookup for every new
/// connection, to spread connections over its servers. Blocking: call it off the loop thread, or accept
/// the stall on the control plane.
public enum SocketResolver {
    /// The TCP addresses of `host` (a name or a numeric address), in getaddrinfo's preference order,
    /// without duplicates.
    public static func resolve(host: String, port: UInt16) throws(IOError) -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_protocol = Int32(IPPROTO_TCP)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0 else {
            let reason: String
            if status == EAI_SYSTEM {
                reason = IOError.describe(errno: Glibc.errno)
            } else {
                reason = String(cString: gai_strerror(status))
            }
            throw IOError(operation: "getaddrinfo", message: "cannot resolve '\(host)': \(reason)")
        }
        defer { freeaddrinfo(list) }
        var addresses: [SocketAddress] = []
        var entry = list
        while let current = entry {
            if let address = current.pointee.ai_addr,
                current.pointee.ai_family == AF_INET || current.pointee.ai_family == AF_INET6
            {
                let resolved = SocketAddress(address, length: current.pointee.ai_addrlen)
                if !addresses.contains(resolved) { addresses.append(resolved) }
            }
            entry = current.pointee.ai_next
        }
        guard !addresses.isEmpty else {
            throw IOError(operation: "getaddrinfo", message: "cannot resolve '\(host)': no IPv4 or IPv6 address")
        }
        return addresses
    }
}

import CURing
import Glibc

/// Socket set-up for the control plane (may allocate; errors say which call failed and why).
public enum Sockets {
    /// A non-blocking, close-on-exec TCP socket for `address`'s family, with TCP_NODELAY.
    public static func makeTCPSocket(for address: SocketAddress) throws(IOError) -> Int32 {
        guard address.isIPv4 || address.isIPv6 else {
            throw IOError(operation: "socket", message: "cannot open a socket for an unspecified address")
        }
        let fd = socket(
            address.family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue),
            Int32(IPPROTO_TCP))
        guard fd >= 0 else {
            throw IOError(
                operation: "socket for \(address)", errno: Glibc.errno, hint: hintForDescriptorExhaustion(Glibc.errno))
        }
        guard setNoDelay(fd) else {
            let code = Glibc.errno
            Glibc.close(fd)
            throw IOError(operation: "setsockopt TCP_NODELAY", errno: code)
        }
        return fd
    }

    /// A listening TCP socket bound to `address` (SO_REUSEADDR; port 0 picks a free port). Returns the fd
    /// and the address actually bound (with the real port). With `reusePort` (SO_REUSEPORT) several
    /// threads can each listen on the same port and the kernel spreads connections over them.
    public static func listen(
        on address: SocketAddress, backlog: Int32 = 1024, reusePort: Bool = false
    ) throws(IOError) -> (fd: Int32, boundAddress: SocketAddress) {
        guard address.isIPv4 || address.isIPv6 else {
            throw IOError(operation: "listen", message: "cannot listen on an unspecified address")
        }
        let fd = socket(
            address.family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue),
            Int32(IPPROTO_TCP))
        guard fd >= 0 else {
            throw IOError(
                operation: "socket for \(address)", errno: Glibc.errno, hint: hintForDescriptorExhaustion(Glibc.errno))
        }
        var one: Int32 = 1
        guard setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
            let code = Glibc.errno
            Glibc.close(fd)
            throw IOError(operation: "setsockopt SO_REUSEADDR", errno: code)
        }
        if reusePort {
            guard setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
                let code = Glibc.errno
                Glibc.close(fd)
                throw IOError(operation: "setsockopt SO_REUSEPORT", errno: code)
            }
        }
        let bound = address.withSockaddr { pointer, length in Glibc.bind(fd, pointer, length) }
        guard bound == 0 else {
            let code = Glibc.errno
            Glibc.close(fd)
            let hint = code == EADDRINUSE ? "another process listens on \(address); pick another port" : nil
            throw IOError(operation: "bind \(address)", errno: code, hint: hint)
        }
        guard Glibc.listen(fd, backlog) == 0 else {
            let code = Glibc.errno
            Glibc.close(fd)
            throw IOError(operation: "listen on \(address)", errno: code)
        }
        guard let local = localAddress(of: fd) else {
            let code = Glibc.errno
            Glibc.close(fd)
            throw IOError(operation: "getsockname", errno: code)
        }
        return (fd, local)
    }

    /// Sets TCP_NODELAY (push frames out without Nagle's delay). Returns false if the call failed.
    @discardableResult
    public static func setNoDelay(_ fd: Int32) -> Bool {
        var one: Int32 = 1
        return setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size)) == 0
    }

    /// SO_LINGER with a zero timeout: closing `fd` then sends a TCP RST and drops unsent data.
    public static func setAbortiveClose(_ fd: Int32) -> Bool {
        var option = linger(l_onoff: 1, l_linger: 0)
        return setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size)) == 0
    }

    /// Closes `fd` with a plain syscall (outside the ring; control plane and error paths).
    public static func close(_ fd: Int32) {
        precondition(fd >= 0, "Sockets.close: negative fd")
        _ = Glibc.close(fd)
    }

    /// The address `fd` is bound to (getsockname).
    public static func localAddress(of fd: Int32) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return result == 0 ? SocketAddress(storage: storage, length: length) : nil
    }

    /// The peer of a connected `fd` (getpeername).
    public static func peerAddress(of fd: Int32) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
        }
        return result == 0 ? SocketAddress(storage: storage, length: length) : nil
    }

    /// The pending error of a socket (SO_ERROR), 0 if none.
    public static func pendingError(of fd: Int32) -> Int32 {
        var code: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length) == 0 else { return Glibc.errno }
        return code
    }

    private static func hintForDescriptorExhaustion(_ code: Int32) -> String? {
        code == EMFILE || code == ENFILE ? "out of file descriptors: raise the open-files limit (ulimit -n)" : nil
    }
}

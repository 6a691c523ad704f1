// A TCP proxy a test controls, between a client and a server on loopback: it forwards, or goes silent (bytes are
// held, connections stay open: a network path that stopped carrying packets), or resets every connection. Used
// to cut one client (a node) from a server (PostgreSQL) while the others keep theirs.
import Foundation
import Glibc
import Synchronization

public final class TCPProxy: @unchecked Sendable {
    public enum Mode: Int, Sendable {
        /// Bytes flow both ways.
        case forward = 0
        /// Nothing flows; new connections are accepted and held.
        case silent = 1
    }

    /// The port clients connect to (127.0.0.1).
    public let port: Int
    private let targetPort: Int
    private let listener: Int32
    private let modeStorage = Atomic<Int>(Mode.forward.rawValue)
    private let stopped = Atomic<Bool>(false)
    private let sockets = Mutex<[Int32]>([])

    /// Listens on a free port of 127.0.0.1 and forwards to 127.0.0.1:`targetPort`.
    public init(targetPort: Int) throws {
        self.targetPort = targetPort
        let listening = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listening, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listening, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(listening, 64) == 0 else {
            close(listening)
            throw ChildProcessError(description: "TCPProxy: bind/listen failed: errno \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listening, $0, &length) }
        }
        listener = listening
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "tcp-proxy-accept"
        thread.start()
    }

    deinit { stop() }

    public var mode: Mode {
        get { Mode(rawValue: modeStorage.load(ordering: .acquiring)) ?? .forward }
        set { modeStorage.store(newValue.rawValue, ordering: .releasing) }
    }

    /// Closes every connection through the proxy (both sides see a reset or an end of stream).
    public func resetConnections() {
        let open = sockets.withLock { sockets in
            defer { sockets.removeAll() }
            return sockets
        }
        for socket in open { shutdown(socket, Int32(SHUT_RDWR)) }
    }

    /// Stops listening and closes every connection.
    public func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        resetConnections()
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    private func acceptLoop() {
        while !stopped.load(ordering: .acquiring) {
            let client = accept(listener, nil, nil)
            guard client >= 0 else {
                if errno == EINTR { continue }
                return
            }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: targetPort)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else {
                close(client)
                close(server)
                continue
            }
            sockets.withLock { $0 += [client, server] }
            let thread = Thread { [self] in pump(client, server) }
            thread.name = "tcp-proxy-pump"
            thread.start()
        }
    }

    /// Copies bytes both ways while forwarding; while silent, reads nothing (so the kernel's buffers fill and
    /// the senders stall, as on a dead path). Ends when either side closes.
    private func pump(_ client: Int32, _ server: Int32) {
        defer {
            close(client)
            close(server)
            sockets.withLock { $0.removeAll { $0 == client || $0 == server } }
        }
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var fds = [
            pollfd(fd: client, events: Int16(POLLIN), revents: 0),
            pollfd(fd: server, events: Int16(POLLIN), revents: 0),
        ]
        while !stopped.load(ordering: .acquiring) {
            guard mode == .forward else {
                usleep(20_000)
                continue
            }
            fds[0].revents = 0
            fds[1].revents = 0
            let ready = poll(&fds, 2, 50)
            if ready < 0 && errno != EINTR { return }
            if ready <= 0 { continue }
            for (index, pair) in [(client, server), (server, client)].enumerated()
            where fds[index].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                let read = buffer.withUnsafeMutableBytes { recv(pair.0, $0.baseAddress, $0.count, 0) }
                guard read > 0 else { return }
                var sent = 0
                while sent < read {
                    let written = buffer.withUnsafeBytes {
                        send(pair.1, $0.baseAddress! + sent, read - sent, Int32(MSG_NOSIGNAL))
                    }
                    guard written > 0 else { return }
                    sent += written
                }
            }
        }
    }
}

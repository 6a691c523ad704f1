// An HTTP CONNECT proxy a test controls, on 127.0.0.1: it tunnels as a proxy does, or answers as a broken or
// hostile one would (a refusal, a head that never ends, a close in the middle of its head, bytes after its head),
// and can cut every tunnel it carries (a proxy that dies mid-stream). Blocking sockets on threads of its own.
import Foundation
import Glibc
import Synchronization

public final class ConnectProxy: @unchecked Sendable {
    public enum Behavior: Sendable {
        /// Reads the CONNECT head, connects to its target port on 127.0.0.1, answers 200 and tunnels. With
        /// `authorization`, a request without exactly that `Proxy-Authorization` value gets a 407 instead.
        case tunnel(authorization: String? = nil)
        /// Tunnels, its answer's head sent `bytes` at a time with a pause between (a slow, chatty proxy).
        case tunnelInPieces(bytes: Int, pauseMilliseconds: Int)
        /// Answers with these bytes and closes (a 407, a 502, garbage).
        case answer(String)
        /// Sends a status line, then header lines without end.
        case endlessHead
        /// Sends these bytes (the start of a head) and closes.
        case closeMidHead(String)
        /// Answers 200 and these bytes in the same write: whatever follows the head goes to the client's TLS.
        case answerWithTrailing([UInt8])
        /// Accepts and reads, and never answers.
        case silent
    }

    public static let established = "HTTP/1.1 200 Connection established\r\nVia: 1.1 fanfare-test-proxy\r\n\r\n"

    /// The port clients connect to (127.0.0.1).
    public let port: Int
    private let listener: Int32
    private let behaviorBox: Mutex<Behavior>
    private let stopped = Atomic<Bool>(false)
    private let sockets = Mutex<[Int32]>([])
    private let heads = Mutex<[String]>([])
    private let tunnels = Atomic<Int>(0)

    public init(_ behavior: Behavior = .tunnel()) throws {
        behaviorBox = Mutex(behavior)
        let (listening, port) = try Self.listen()
        listener = listening
        self.port = port
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "connect-proxy-accept"
        thread.start()
    }

    deinit { stop() }

    /// What the proxy does with the next connections.
    public var behavior: Behavior {
        get { behaviorBox.withLock { $0 } }
        set { behaviorBox.withLock { $0 = newValue } }
    }

    /// Every request head received so far (the CONNECT line and its fields), in order.
    public var requestHeads: [String] { heads.withLock { $0 } }

    /// Tunnels opened so far (a 200 sent after the target connected).
    public var tunnelsOpened: Int { tunnels.load(ordering: .acquiring) }

    /// Ends every connection through the proxy at once (both sides see their connection end).
    public func cutTunnels() {
        let open = sockets.withLock { sockets in
            defer { sockets.removeAll() }
            return sockets
        }
        for socket in open { shutdown(socket, Int32(SHUT_RDWR)) }
    }

    /// Stops listening and ends every connection.
    public func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        cutTunnels()
    }

    private static func listen() throws -> (Int32, Int) {
        let listening = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listening, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listening, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, Glibc.listen(listening, 64) == 0 else {
            close(listening)
            throw ChildProcessError(description: "ConnectProxy: bind/listen failed: errno \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listening, $0, &length) }
        }
        return (listening, Int(UInt16(bigEndian: address.sin_port)))
    }

    static func loopback(port: Int) -> sockaddr_in {
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
            sockets.withLock { $0.append(client) }
            let thread = Thread { [self] in serve(client) }
            thread.name = "connect-proxy-conn"
            thread.start()
        }
    }

    private func serve(_ client: Int32) {
        defer {
            close(client)
            sockets.withLock { $0.removeAll { $0 == client } }
        }
        guard let head = readHead(client) else { return }
        heads.withLock { $0.append(head) }
        switch behavior {
        case .tunnel(let authorization):
            if let authorization, !head.contains("\r\nProxy-Authorization: \(authorization)\r\n") {
                send(
                    client,
                    "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"t\"\r\n\r\n")
                return
            }
            tunnel(client, head: head) { send(client, Self.established) }
        case .tunnelInPieces(let size, let pause):
            tunnel(client, head: head) {
                let bytes = Array(Self.established.utf8)
                for start in stride(from: 0, to: bytes.count, by: max(1, size)) {
                    guard send(client, Array(bytes[start..<min(bytes.count, start + max(1, size))])) else { return }
                    usleep(UInt32(pause * 1000))
                }
            }
        case .answer(let text):
            send(client, text)
            usleep(50_000)  // let the client read the answer before the close
        case .endlessHead:
            guard send(client, "HTTP/1.1 200 Connection established\r\n") else { return }
            while !stopped.load(ordering: .acquiring)
                && send(client, "X-Filler: \(String(repeating: "a", count: 100))\r\n")
            {
                usleep(1_000)
            }
        case .closeMidHead(let text):
            send(client, text)
        case .answerWithTrailing(let bytes):
            send(client, Array(Self.established.utf8) + bytes)
            usleep(200_000)
        case .silent:
            var byte: UInt8 = 0
            while !stopped.load(ordering: .acquiring) && recv(client, &byte, 1, 0) > 0 {}
        }
    }

    /// Reads up to the blank line that ends the request head (bounded).
    private func readHead(_ socket: Int32) -> String? {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while bytes.count < 16 << 10 {
            guard recv(socket, &byte, 1, 0) == 1 else { return nil }
            bytes.append(byte)
            if bytes.count >= 4 && bytes.suffix(4) == [13, 10, 13, 10] {
                return String(decoding: bytes, as: UTF8.self)
            }
        }
        return nil
    }

    /// Connects to the port the CONNECT line names, on 127.0.0.1, calls `answer`, and copies bytes both ways.
    private func tunnel(_ client: Int32, head: String, answer: () -> Void) {
        let target = head.split(separator: " ").dropFirst().first ?? ""
        guard let port = target.split(separator: ":").last.flatMap({ Int($0) }) else {
            send(client, "HTTP/1.1 400 Bad Request\r\n\r\n")
            return
        }
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = Self.loopback(port: port)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(server)
            send(client, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        }
        sockets.withLock { $0.append(server) }
        defer {
            close(server)
            sockets.withLock { $0.removeAll { $0 == server } }
        }
        tunnels.add(1, ordering: .releasing)
        answer()
        pump(client, server)
    }

    /// Copies bytes both ways until either side ends.
    private func pump(_ client: Int32, _ server: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var fds = [
            pollfd(fd: client, events: Int16(POLLIN), revents: 0),
            pollfd(fd: server, events: Int16(POLLIN), revents: 0),
        ]
        while !stopped.load(ordering: .acquiring) {
            fds[0].revents = 0
            fds[1].revents = 0
            let ready = poll(&fds, 2, 50)
            if ready < 0 && errno != EINTR { return }
            if ready <= 0 { continue }
            for (index, pair) in [(client, server), (server, client)].enumerated()
            where fds[index].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                let read = buffer.withUnsafeMutableBytes { recv(pair.0, $0.baseAddress, $0.count, 0) }
                guard read > 0, send(pair.1, Array(buffer[0..<read])) else { return }
            }
        }
    }

    @discardableResult
    private func send(_ socket: Int32, _ text: String) -> Bool { send(socket, Array(text.utf8)) }

    @discardableResult
    private func send(_ socket: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let written = bytes.withUnsafeBytes {
                Glibc.send(socket, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
            }
            guard written > 0 else { return false }
            sent += written
        }
        return true
    }
}

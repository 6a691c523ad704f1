import CURing
import FanfareIO
import Testing

/// Runs ticks until `condition` holds; false if it still does not after `maxTicks` ticks.
func runLoop(
    _ loop: IOLoop, maxTicks: Int = 3_000, maxWait: UInt64 = 10_000_000, until condition: () -> Bool
) throws -> Bool {
    var ticks = 0
    while !condition() {
        if ticks >= maxTicks { return false }
        try loop.runOnce(maxWait: maxWait)
        ticks += 1
    }
    return true
}

/// A connected AF_UNIX stream pair (for ring tests that do not need TCP).
func makeSocketPair() throws -> (Int32, Int32) {
    var fds: [Int32] = [-1, -1]
    let result = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0, &fds)
    try #require(result == 0, "socketpair failed")
    return (fds[0], fds[1])
}

/// Deterministic bytes so the receiver can check what arrived.
func fillPattern(_ buffer: UnsafeMutableRawBufferPointer, seed: Int) {
    for i in 0..<buffer.count {
        buffer[i] = UInt8(truncatingIfNeeded: (i &* 31) &+ seed &+ (i >> 8))
    }
}

/// Records every completion and timer it receives.
final class Recorder: IOHandler {
    struct Completion: Equatable {
        var tag: UInt8
        var result: Int32
        var flags: UInt32
    }

    var completions: [Completion] = []
    var timers: [(tag: UInt8, cookie: UInt64)] = []
    var ticks = 0
    var onCompletion: ((Completion, IOLoop) -> Void)?

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {
        let completion = Completion(tag: tag, result: result, flags: flags)
        completions.append(completion)
        onCompletion?(completion, loop)
    }

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {
        timers.append((tag, cookie))
    }

    func tick(loop: IOLoop) {
        ticks += 1
    }

    func completions(tag: UInt8) -> [Completion] {
        completions.filter { $0.tag == tag }
    }
}

/// Listens with a multishot accept and echoes every byte back on each accepted connection.
final class EchoServer: IOHandler {
    static let acceptTag: UInt8 = 1

    let listenFD: Int32
    let address: SocketAddress
    private(set) var id: IOHandlerID?
    var accepted = 0
    var acceptErrors: [Int32] = []
    /// Accepted connections whose peer closed (a 0-byte recv).
    var peerClosed = 0
    /// Accepted connections fully closed and unregistered.
    var finished = 0
    var bytesEchoed = 0

    init(loop: IOLoop) throws {
        let (fd, bound) = try Sockets.listen(on: SocketAddress.loopbackIPv4(port: 0))
        listenFD = fd
        address = bound
        let id = loop.register(self)
        self.id = id
        loop.acceptMultishot(fd: fd, handler: id, tag: EchoServer.acceptTag)
    }

    /// Cancels the accept; the listener fd is closed once the final accept completion arrives.
    func stop(loop: IOLoop) {
        loop.cancel(fd: listenFD)
    }

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {
        if result >= 0 {
            accepted += 1
            let connection = EchoConnection(fd: result, server: self)
            connection.start(loop: loop)
        } else {
            acceptErrors.append(result)
        }
        if flags & IORING_CQE_F_MORE == 0 {
            if result == -ECANCELED {
                Sockets.close(listenFD)
                if let id { loop.unregister(id) }
                id = nil
            } else if let id {
                loop.acceptMultishot(fd: listenFD, handler: id, tag: EchoServer.acceptTag)  // re-arm
            }
        }
    }

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {}

    deinit {
        if id != nil { Sockets.close(listenFD) }  // never stopped: the loop is gone, close it here
    }
}

/// One accepted connection of `EchoServer`: recv, send it all back, recv again; close on EOF.
final class EchoConnection: IOHandler {
    enum Tag: UInt8 { case recv = 1, send, close }

    let fd: Int32
    unowned let server: EchoServer
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 32 * 1024, alignment: 16)
    private var pendingStart = 0
    private var pendingEnd = 0
    private var id: IOHandlerID?

    init(fd: Int32, server: EchoServer) {
        self.fd = fd
        self.server = server
    }

    deinit {
        buffer.deallocate()
        if !closed { Sockets.close(fd) }
    }

    private var closed = false

    func start(loop: IOLoop) {
        let id = loop.register(self)
        self.id = id
        loop.recv(fd: fd, into: buffer, handler: id, tag: Tag.recv.rawValue)
    }

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {
        guard let id else { return }
        switch Tag(rawValue: tag)! {
        case .recv:
            if result > 0 {
                pendingStart = 0
                pendingEnd = Int(result)
                loop.send(
                    fd: fd, from: UnsafeRawBufferPointer(rebasing: buffer[0..<pendingEnd]), handler: id,
                    tag: Tag.send.rawValue)
            } else {
                if result == 0 { server.peerClosed += 1 }
                loop.close(fd: fd, handler: id, tag: Tag.close.rawValue)
            }
        case .send:
            guard result > 0 else {
                loop.close(fd: fd, handler: id, tag: Tag.close.rawValue)
                return
            }
            server.bytesEchoed += Int(result)
            pendingStart += Int(result)
            if pendingStart < pendingEnd {  // short write: send the rest
                loop.send(
                    fd: fd, from: UnsafeRawBufferPointer(rebasing: buffer[pendingStart..<pendingEnd]), handler: id,
                    tag: Tag.send.rawValue)
            } else {
                loop.recv(fd: fd, into: buffer, handler: id, tag: Tag.recv.rawValue)
            }
        case .close:
            closed = true
            server.finished += 1
            loop.unregister(id)
            self.id = nil
        }
    }

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {}
}

/// Connects, streams `payload` in chunks while reading the echo back, then (optionally) closes.
final class StreamClient: IOHandler {
    enum Tag: UInt8 { case connect = 1, send, recv, close }

    let fd: Int32
    let payload: UnsafeMutableRawBufferPointer
    let received: UnsafeMutableRawBufferPointer
    let chunk: Int
    let closeWhenDone: Bool
    private(set) var id: IOHandlerID?
    var connectResult: Int32?
    var sent = 0
    var receivedCount = 0
    var sawEOF = false
    var closed = false
    var errors: [Int32] = []
    private var sendInFlight = false

    init(address: SocketAddress, size: Int, chunk: Int = 16 * 1024, seed: Int = 7, closeWhenDone: Bool = false) throws {
        fd = try Sockets.makeTCPSocket(for: address)
        payload = .allocate(byteCount: max(size, 1), alignment: 16)
        received = .allocate(byteCount: max(size, 1), alignment: 16)
        fillPattern(payload, seed: seed)
        self.chunk = chunk
        self.closeWhenDone = closeWhenDone
    }

    deinit {
        payload.deallocate()
        received.deallocate()
        if !closed { Sockets.close(fd) }
    }

    var isDone: Bool { receivedCount == payload.count }
    var echoMatches: Bool { isDone && payload.elementsEqual(received) }

    func start(loop: IOLoop, address: SocketAddress) {
        let id = loop.register(self)
        self.id = id
        loop.connect(fd: fd, to: address, handler: id, tag: Tag.connect.rawValue)
    }

    private func sendNext(loop: IOLoop) {
        guard let id, sent < payload.count, !sendInFlight else { return }
        let end = min(sent + chunk, payload.count)
        sendInFlight = true
        loop.send(
            fd: fd, from: UnsafeRawBufferPointer(rebasing: payload[sent..<end]), handler: id, tag: Tag.send.rawValue)
    }

    private func receiveNext(loop: IOLoop) {
        guard let id, receivedCount < received.count else { return }
        let end = min(receivedCount + chunk, received.count)
        loop.recv(
            fd: fd, into: UnsafeMutableRawBufferPointer(rebasing: received[receivedCount..<end]), handler: id,
            tag: Tag.recv.rawValue)
    }

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {
        guard let id else { return }
        switch Tag(rawValue: tag)! {
        case .connect:
            connectResult = result
            guard result == 0 else { return }
            sendNext(loop: loop)
            receiveNext(loop: loop)
        case .send:
            sendInFlight = false
            guard result > 0 else {
                errors.append(result)
                return
            }
            sent += Int(result)
            sendNext(loop: loop)
        case .recv:
            guard result > 0 else {
                if result == 0 { sawEOF = true } else { errors.append(result) }
                return
            }
            receivedCount += Int(result)
            if isDone {
                if closeWhenDone { loop.close(fd: fd, handler: id, tag: Tag.close.rawValue) }
            } else {
                receiveNext(loop: loop)
            }
        case .close:
            closed = true
            loop.unregister(id)
            self.id = nil
        }
    }

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {}
}

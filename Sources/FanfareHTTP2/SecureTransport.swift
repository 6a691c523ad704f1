import Glibc
import FanfareCore
import FanfareIO
import FanfareTLS

/// What a `SecureTransport` tells its owner (an HTTP/2 client or server connection).
///
/// All calls happen on the loop's thread.
public protocol SecureTransportDelegate: AnyObject {
    /// The TLS handshake finished and ALPN chose `h2`: the HTTP/2 preface may be written now.
    func transportEstablished(_ transport: SecureTransport)
    /// Decrypted bytes arrived. Return false to report a protocol error (the transport then closes).
    func transportReceived(_ transport: SecureTransport, plaintext: UnsafeRawBufferPointer) -> Bool
    /// The socket can take more: write frames with `transport.writePlaintext` now.
    func transportProduce(_ transport: SecureTransport)
    /// The connection is gone and every buffer the kernel held is back; called exactly once.
    func transportClosed(_ transport: SecureTransport, reason: TransportCloseReason)
}

/// Why a transport closed.
public enum TransportCloseReason: Sendable, CustomStringConvertible, Equatable {
    case localClose
    case peerClosed
    case connectFailed(errno: Int32, address: String)
    case socketError(operation: String, errno: Int32)
    case tls(String)
    /// We rejected the server's certificate (untrusted CA, wrong host name, expired): a configuration
    /// error that retrying does not fix.
    case certificateRejected(String)
    case protocolError(String)
    case timeout(String)
    /// The HTTP proxy did not open the tunnel (a refusal, a malformed answer, or it closed first).
    case proxy(String)

    /// The connection never got as far as TLS (so another address of the host may work).
    public var isConnectFailure: Bool {
        switch self {
        case .connectFailed, .timeout, .socketError: return true
        default: return false
        }
    }

    public var description: String {
        switch self {
        case .localClose: return "closed locally"
        case .peerClosed: return "peer closed the connection"
        case .connectFailed(let e, let address): return "cannot connect to \(address): \(IOError.describe(errno: e))"
        case .socketError(let op, let e): return "\(op) failed: \(IOError.describe(errno: e))"
        case .tls(let message): return "TLS: \(message)"
        case .certificateRejected(let message): return "TLS: \(message)"
        case .protocolError(let message): return "HTTP/2: \(message)"
        case .timeout(let what): return "timed out \(what)"
        case .proxy(let message): return message
        }
    }
}

/// Buffer sizes of one connection. Bigger buffers mean fewer syscalls per push under load.
public struct TransportBufferSizes: Sendable {
    public var receive: Int = 64 * 1024
    public var plaintextIn: Int = 64 * 1024
    public var plaintextOut: Int = 64 * 1024
    public var ciphertextOut: Int = 256 * 1024
    public init() {}
    public static let small: TransportBufferSizes = {
        var sizes = TransportBufferSizes()
        sizes.receive = 16 * 1024
        sizes.plaintextIn = 16 * 1024
        sizes.plaintextOut = 16 * 1024
        sizes.ciphertextOut = 64 * 1024
        return sizes
    }()
}

/// TLS over a TCP socket whose I/O runs through the loop's io_uring ring.
///
/// The kernel does the socket work (one recv and at most one send in flight), OpenSSL only encrypts
/// through memory BIOs, and the delegate (an HTTP/2 session) only frames. Output is batched: frames written during a
/// tick are encrypted together and sent with one SQE at the end of the tick.
public final class SecureTransport: HTTP2FrameSink, IOHandler {
    private enum Tag: UInt8 {
        case connect = 1, recv, send, close
    }
    private enum TimerTag: UInt8 { case handshake = 1, linger }
    /// How long a local close waits for its last bytes (final frames, close_notify) to reach the kernel.
    static let lingerLimit: UInt64 = 1_000_000_000

    public enum State: Equatable {
        /// `tunnelling`: connected to an HTTP proxy, its answer to CONNECT not read yet (`ProxyTunnel`).
        case idle, connecting, tunnelling, handshaking, established, closing, closed
    }

    // Back references without reference counting: weak/unowned references give the target a side table,
    // and every retain/release of it then takes the slow path (measured: ~10% of client CPU). The owner
    // (the delegate) keeps the transport alive and outlives it; the loop outlives every handler.
    public unowned(unsafe) let loop: IOLoop
    @exclusivity(unchecked) public unowned(unsafe) var delegate: SecureTransportDelegate?
    @exclusivity(unchecked) public private(set) var state: State = .idle
    public let tls: TLSConnection
    @exclusivity(unchecked) public private(set) var fd: Int32 = -1
    @exclusivity(unchecked) public private(set) var remoteDescription: String = ""
    @exclusivity(unchecked) private var handlerID: IOHandlerID?
    @exclusivity(unchecked) private var handshakeTimer: IOTimerID?
    @exclusivity(unchecked) private var closeReason: TransportCloseReason = .localClose
    /// A local close is sending what was queued before it (last responses, GOAWAY, close_notify); the socket
    /// closes once that is out, or after `lingerLimit`.
    @exclusivity(unchecked) private var lingering = false
    @exclusivity(unchecked) private var lingerTimer: IOTimerID?

    private let receiveBuffer: UnsafeMutableRawBufferPointer
    private let plaintextIn: UnsafeMutableRawBufferPointer
    private let plaintextOut: UnsafeMutableRawBufferPointer
    @exclusivity(unchecked) private var plaintextOutCount = 0
    private let ciphertextOut: UnsafeMutableRawBufferPointer
    @exclusivity(unchecked) private var ciphertextOutStart = 0
    @exclusivity(unchecked) private var ciphertextOutCount = 0
    @exclusivity(unchecked) private var address = SocketAddress.unspecified
    /// The CONNECT exchange before TLS, when the connection goes through an HTTP proxy.
    @exclusivity(unchecked) private var tunnel: ProxyTunnel?

    @exclusivity(unchecked) private var recvInFlight = false
    /// The receive in flight proves the socket empty once the loop's `collections` passes this (see `readThrough`).
    @exclusivity(unchecked) private var recvProvesEmptyAfter: UInt64 = 0
    @exclusivity(unchecked) private var sendInFlight = false
    @exclusivity(unchecked) private var connectInFlight = false
    @exclusivity(unchecked) private var closeInFlight = false
    @exclusivity(unchecked) private var needsFlush = false

    /// Ciphertext parked in the TLS write BIO beyond this stops the delegate from producing more.
    @exclusivity(unchecked) public var ciphertextBacklogLimit: Int
    /// When set, nothing is submitted for sending past its end: the bytes stay here (a lease renewed in time lets
    /// them go with the next flush; a node that lost its lease exits).
    @exclusivity(unchecked) public var sendingLease: (any SendingLease)?
    /// The loop's clock reading up to which everything the peer sent has been read, or nil when bytes may be
    /// waiting unread (the last receive filled the buffer, or the loop has not gathered completions since the
    /// receive was armed). Timeouts that blame the peer for silence (a PING, a request's deadline) are judged
    /// only up to here: a thread starved of CPU, or busy in one long tick, reads late, and its timers must not
    /// call a peer dead whose answer is waiting in the socket.
    public var readThrough: UInt64? {
        guard recvInFlight, loop.collections > recvProvesEmptyAfter else { return nil }
        return loop.collectedAt
    }

    /// True while a sending lease has ended: nothing leaves, so nothing sent now can be answered.
    public var isWithholdingSends: Bool {
        guard let sendingLease else { return false }
        let until = sendingLease.sendsUntil
        return until != .max && loop.now >= until
    }

    /// Bytes handed to the kernel so far (for stats).
    @exclusivity(unchecked) public private(set) var bytesSent: UInt64 = 0
    @exclusivity(unchecked) public private(set) var bytesReceived: UInt64 = 0
    @exclusivity(unchecked) public private(set) var sendCalls: UInt64 = 0

    public init(loop: IOLoop, tls: TLSConnection, buffers: TransportBufferSizes = TransportBufferSizes()) {
        self.loop = loop
        self.tls = tls
        self.receiveBuffer = .allocate(byteCount: buffers.receive, alignment: 64)
        self.plaintextIn = .allocate(byteCount: buffers.plaintextIn, alignment: 64)
        self.plaintextOut = .allocate(byteCount: buffers.plaintextOut, alignment: 64)
        self.ciphertextOut = .allocate(byteCount: buffers.ciphertextOut, alignment: 64)
        self.ciphertextBacklogLimit = buffers.ciphertextOut
    }

    deinit {
        // The loop holds a strong reference while any operation is in flight, so the kernel is done with these.
        assert(!recvInFlight && !sendInFlight && !connectInFlight && !closeInFlight)
        if fd >= 0 { Sockets.close(fd) }
        receiveBuffer.deallocate()
        plaintextIn.deallocate()
        plaintextOut.deallocate()
        ciphertextOut.deallocate()
    }

    // MARK: - Starting

    /// Client side: open a socket to `address` and start the TLS handshake once connected. With `tunnel`,
    /// `address` is the proxy's: the tunnel opens first, and `handshakeTimeout` covers it too.
    public func connect(to address: SocketAddress, handshakeTimeout: UInt64, through tunnel: ProxyTunnel? = nil) {
        precondition(state == .idle, "connect on a transport that was already started")
        self.address = address
        self.tunnel = tunnel
        if let tunnel {
            precondition(tunnel.request.count <= ciphertextOut.count, "a CONNECT request larger than the send buffer")
            let named = tunnel.proxy == address.description ? "" : " at \(address)"
            remoteDescription = "proxy \(tunnel.proxy)\(named)"
        } else {
            remoteDescription = address.description
        }
        let socket: Int32
        do {
            socket = try Sockets.makeTCPSocket(for: address)
        } catch {
            state = .connecting
            register()
            finish(.socketError(operation: "socket()", errno: error.errno))
            return
        }
        fd = socket
        state = .connecting
        let id = register()
        connectInFlight = true
        self.address.withSockaddr { pointer, length in
            loop.connect(fd: socket, address: pointer, length: length, handler: id, tag: Tag.connect.rawValue)
        }
        handshakeTimer = loop.schedule(
            at: loop.now &+ handshakeTimeout, handler: id, tag: TimerTag.handshake.rawValue, cookie: 0)
    }

    /// Server side: take an accepted socket and wait for the client's handshake.
    public func adopt(acceptedFD: Int32, remote: String, handshakeTimeout: UInt64) {
        precondition(state == .idle && acceptedFD >= 0)
        fd = acceptedFD
        remoteDescription = remote
        Sockets.setNoDelay(acceptedFD)
        state = .handshaking
        let id = register()
        handshakeTimer = loop.schedule(
            at: loop.now &+ handshakeTimeout, handler: id, tag: TimerTag.handshake.rawValue, cookie: 0)
        armReceive()
    }

    @discardableResult
    private func register() -> IOHandlerID {
        if let handlerID { return handlerID }
        let id = loop.register(self)
        handlerID = id
        loop.addTickHandler(id)
        return id
    }

    // MARK: - Writing (called by the delegate from transportProduce, or any time on the loop thread)

    /// Free room in the plaintext staging buffer before it must be encrypted.
    public var plaintextRoom: Int { plaintextOut.count - plaintextOutCount }

    /// True when enough ciphertext is waiting that the producer should pause (back-pressure into the session).
    public override var isBackedUp: Bool {
        tls.pendingCiphertextCount + plaintextOutCount >= ciphertextBacklogLimit
    }

    /// Queues plaintext for encryption. Returns false once the connection is closing (the bytes are dropped).
    @discardableResult
    public func writePlaintext(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard state == .established else { return false }
        var remaining = bytes
        while remaining.count > 0 {
            if plaintextRoom == 0 {
                guard encryptStaging() else { return false }
            }
            let chunk = min(plaintextRoom, remaining.count)
            (plaintextOut.baseAddress! + plaintextOutCount).copyMemory(from: remaining.baseAddress!, byteCount: chunk)
            plaintextOutCount += chunk
            remaining = UnsafeRawBufferPointer(rebasing: remaining[chunk...])
        }
        needsFlush = true
        return true
    }

    /// The plaintext staging buffer's size: the most one `reservePlaintext` can ask for.
    public override var plaintextCapacity: Int { plaintextOut.count }

    /// Room for `count` bytes of frames written in place (no copy); follow with `commitPlaintext`. Encrypts
    /// what is staged first when the room is short. Nil once the connection is closing.
    public override func reservePlaintext(_ count: Int) -> UnsafeMutableRawPointer? {
        precondition(count <= plaintextOut.count, "a reservation larger than the plaintext buffer")
        guard state == .established else { return nil }
        if plaintextRoom < count {
            guard encryptStaging() else { return nil }
        }
        return plaintextOut.baseAddress! + plaintextOutCount
    }

    /// Adds `count` bytes written after `reservePlaintext` to what the next flush sends.
    public override func commitPlaintext(_ count: Int) {
        assert(count >= 0 && count <= plaintextRoom)
        plaintextOutCount += count
        needsFlush = true
    }

    /// Asks for a flush at the end of this tick (the delegate has frames to send).
    public override func setNeedsFlush() { needsFlush = true }

    /// Lets the delegate produce and puts a send in flight now rather than at the end of the tick (unless a
    /// send is in flight already: the rest then follows its completion). For output made outside this
    /// transport's own completions, e.g. in a timer. Not from inside the delegate's `transportProduce`.
    public func flushNow() {
        guard state == .established else {
            needsFlush = true
            return
        }
        let owner = delegate
        defer { withExtendedLifetime(owner) {} }
        flush()
    }

    /// Sends what is queued (frames written so far, then a TLS close_notify) and then closes the socket.
    ///
    /// A send may be in flight at this moment: the rest goes out when it completes (bounded by
    /// `lingerLimit`), so the peer gets the final frames (last responses, GOAWAY) rather than a bare
    /// disconnect.
    public func close() {
        guard state != .closing && state != .closed else { return }
        if state == .established {
            _ = encryptStaging()
            tls.shutdown()
            lingering = true
            flushCiphertext()
        }
        beginClose(.localClose)
    }

    /// Closes at once with a TCP RST (SO_LINGER 0): nothing queued leaves, no TLS close_notify, operations in
    /// flight are cancelled. The peer sees ECONNRESET with its requests in flight (the simulator's
    /// connection-reset fault).
    public func reset() {
        guard state != .closing && state != .closed else { return }
        if fd >= 0 { _ = Sockets.setAbortiveClose(fd) }
        lingering = false
        beginClose(.localClose)
    }

    // MARK: - IOHandler

    public func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {
        // The delegate is held without reference counting; keep it alive while a completion may close us
        // (its owner can drop it from transportClosed while this call is still on the stack).
        let owner = delegate
        defer { withExtendedLifetime(owner) {} }
        switch Tag(rawValue: tag) {
        case .connect: connectCompleted(result)
        case .recv: receiveCompleted(result)
        case .send: sendCompleted(result)
        case .close:
            closeInFlight = false
            fd = -1
            finishIfDrained()
        case nil:
            assertionFailure("unknown transport tag \(tag)")
        }
    }

    public func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {
        let owner = delegate
        defer { withExtendedLifetime(owner) {} }
        if tag == TimerTag.linger.rawValue {
            lingerTimer = nil
            stopLingering()  // the peer is not reading: give up on the last bytes
            return
        }
        guard tag == TimerTag.handshake.rawValue else { return }
        handshakeTimer = nil
        switch state {
        case .connecting: beginClose(.timeout("connecting to \(remoteDescription)"))
        case .tunnelling:
            beginClose(.timeout("waiting for \(remoteDescription) to answer CONNECT \(tunnel?.target ?? "")"))
        case .handshaking: beginClose(.timeout("in the TLS handshake with \(remoteDescription)"))
        default: break
        }
    }

    public func tick(loop: IOLoop) {
        guard needsFlush else { return }
        let owner = delegate
        defer { withExtendedLifetime(owner) {} }
        flush()
    }

    // MARK: - Completions

    private func connectCompleted(_ result: Int32) {
        connectInFlight = false
        guard state == .connecting else {
            finishIfDrained()
            return
        }
        if result < 0 {
            beginClose(.connectFailed(errno: -result, address: remoteDescription))
            return
        }
        if tunnel != nil {
            startTunnel()
            return
        }
        state = .handshaking
        advanceHandshake()
        armReceive()
    }

    private func receiveCompleted(_ result: Int32) {
        recvInFlight = false
        guard state == .handshaking || state == .established else {
            if state == .tunnelling { tunnelReceived(result) } else { finishIfDrained() }
            return
        }
        if result == 0 {
            beginClose(.peerClosed)
            return
        }
        if result < 0 {
            if result == -EINTR || result == -EAGAIN {
                armReceive()
                return
            }
            beginClose(result == -ECONNRESET ? .peerClosed : .socketError(operation: "recv", errno: -result))
            return
        }
        bytesReceived &+= UInt64(result)
        // A short read emptied the socket at this tick's gathering; after a full one more may be waiting, and only
        // a later gathering with the next receive still pending proves it empty.
        let filledBuffer = Int(result) == receiveBuffer.count
        tls.receiveCiphertext(UnsafeRawBufferPointer(rebasing: receiveBuffer[0..<Int(result)]))
        if state == .handshaking {
            advanceHandshake()
            guard state == .established else {
                if state == .handshaking { armReceive() }
                return
            }
        }
        readDecrypted()
        if state == .established || state == .handshaking {
            armReceive()
            if filledBuffer { recvProvesEmptyAfter = loop.collections &+ 1 }
        }
        flush()
    }

    private func sendCompleted(_ result: Int32) {
        sendInFlight = false
        if state == .closing || state == .closed {
            guard lingering else {
                finishIfDrained()
                return
            }
            if state == .closing && result > 0 {
                bytesSent &+= UInt64(result)
                ciphertextOutStart += Int(result)
                ciphertextOutCount -= Int(result)
                assert(ciphertextOutCount >= 0)
                if ciphertextOutCount > 0 {
                    submitSend()
                } else {
                    flushCiphertext()  // whatever the TLS layer still holds (close_notify)
                }
                if sendInFlight { return }
            }
            stopLingering()  // all out, or the send failed: close now
            return
        }
        if result < 0 {
            if result == -EINTR || result == -EAGAIN {
                submitSend()
                return
            }
            beginClose(
                result == -EPIPE || result == -ECONNRESET
                    ? .peerClosed : .socketError(operation: "send", errno: -result))
            return
        }
        bytesSent &+= UInt64(result)
        ciphertextOutStart += Int(result)
        ciphertextOutCount -= Int(result)
        assert(ciphertextOutCount >= 0)
        if ciphertextOutCount > 0 {
            submitSend()  // a short write: send the rest
        } else {
            ciphertextOutStart = 0
            flush()
        }
    }

    // MARK: - The CONNECT tunnel

    /// Sends the CONNECT request (plain bytes, straight into the send buffer: TLS has written nothing yet) and
    /// reads the proxy's answer.
    private func startTunnel() {
        guard let request = tunnel?.request else { return }
        state = .tunnelling
        request.withUnsafeBytes { ciphertextOut.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        ciphertextOutStart = 0
        ciphertextOutCount = request.count
        submitSend()
        armReceive()
    }

    /// The proxy's answer, as it arrives: on a 2xx TLS starts, with the bytes after the head as its first input.
    private func tunnelReceived(_ result: Int32) {
        guard var tunnel else { return }
        let target = tunnel.target
        if result <= 0 {
            if result == -EINTR || result == -EAGAIN {
                armReceive()
            } else if result == 0 || result == -ECONNRESET {
                let read = tunnel.head.bytesRead
                let partly = read == 0 ? "" : " (after \(read) bytes of its answer)"
                beginClose(
                    .proxy("\(remoteDescription) closed the connection before answering CONNECT \(target)\(partly)"))
            } else {
                beginClose(.socketError(operation: "recv from \(remoteDescription)", errno: -result))
            }
            return
        }
        bytesReceived &+= UInt64(result)
        let bytes = UnsafeRawBufferPointer(rebasing: receiveBuffer[0..<Int(result)])
        self.tunnel = nil  // the head is read in place (no copy of what it kept)
        let progress = tunnel.head.consume(bytes)
        self.tunnel = tunnel
        switch progress {
        case .needMore:
            armReceive()
        case .malformed(let problem):
            beginClose(.proxy("\(remoteDescription) answered CONNECT \(target) with \(problem)"))
        case .complete(let status, let reason, let consumed):
            guard (200..<300).contains(status) else {
                beginClose(.proxy(tunnel.refusal(status: status, reason: reason)))
                return
            }
            remoteDescription = "\(target) through proxy \(tunnel.proxy)"
            state = .handshaking
            // A proxy sends nothing of its own after the head: what follows is the far end's, for TLS.
            if consumed < bytes.count { tls.receiveCiphertext(UnsafeRawBufferPointer(rebasing: bytes[consumed...])) }
            advanceHandshake()
            if state == .established { readDecrypted() }
            if state == .handshaking || state == .established { armReceive() }
            flush()
        }
    }

    // MARK: - TLS

    private func advanceHandshake() {
        switch tls.advanceHandshake() {
        case .inProgress:
            flushCiphertext()
        case .complete:
            flushCiphertext()
            guard tls.negotiatedProtocol == "h2" else {
                beginClose(.tls("peer \(remoteDescription) did not negotiate ALPN h2"))
                return
            }
            if let handshakeTimer { loop.cancelTimer(handshakeTimer) }
            handshakeTimer = nil
            state = .established
            delegate?.transportEstablished(self)
            needsFlush = true
        case .failed(let failure):
            flushCiphertext()  // deliver the alert to the peer, best effort
            // OpenSSL's text can carry what the peer sent (names, alert data): kept printable.
            let message = PrintableText.escaping(failure.description)
            beginClose(failure.kind == .peerCertificateRejected ? .certificateRejected(message) : .tls(message))
        }
    }

    private func readDecrypted() {
        while state == .established {
            switch tls.readPlaintext(into: plaintextIn) {
            case .bytes(let count):
                let ok =
                    delegate?.transportReceived(
                        self, plaintext: UnsafeRawBufferPointer(rebasing: plaintextIn[0..<count])) ?? false
                if !ok {
                    if state == .established {
                        beginClose(.protocolError("the peer sent bytes HTTP/2 could not process"))
                    }
                    return
                }
            case .wantMore:
                return
            case .closed:
                beginClose(.peerClosed)
                return
            case .failed(let failure):
                beginClose(.tls(PrintableText.escaping(failure.description)))
                return
            }
        }
    }

    /// Encrypts the staged plaintext into the TLS write BIO. Returns false if TLS failed (the transport closes).
    @discardableResult
    private func encryptStaging() -> Bool {
        var offset = 0
        while offset < plaintextOutCount {
            let pending = UnsafeRawBufferPointer(rebasing: plaintextOut[offset..<plaintextOutCount])
            switch tls.writePlaintext(pending) {
            case .bytes(let written):
                assert(written > 0)
                offset += written
            case .failed(let failure):
                plaintextOutCount = 0
                beginClose(.tls(PrintableText.escaping(failure.description)))
                return false
            }
        }
        plaintextOutCount = 0
        return true
    }

    // MARK: - Flushing

    /// Lets the delegate produce frames, encrypts them and puts one send in flight.
    private func flush() {
        needsFlush = false
        guard !sendInFlight else { return }
        if state == .established {
            if !isBackedUp { delegate?.transportProduce(self) }
            guard state == .established else { return }
            if !encryptStaging() { return }
        }
        flushCiphertext()
    }

    /// Moves ciphertext from the TLS write BIO into the send buffer and submits one send.
    private func flushCiphertext() {
        guard !sendInFlight, fd >= 0, !closeInFlight else { return }
        if state == .established, let sendingLease {
            // Requests, not the handshake. A fresh reading, not the tick's: the process may have been stopped since
            // the tick began.
            let until = sendingLease.sendsUntil
            if until != .max && IOLoop.monotonicNanoseconds() >= until { return }
        }
        if ciphertextOutCount == 0 {
            ciphertextOutStart = 0
            let taken = tls.takeCiphertext(into: ciphertextOut)
            ciphertextOutCount = taken
        }
        if ciphertextOutCount > 0 { submitSend() }
    }

    private func submitSend() {
        guard let handlerID, fd >= 0 else { return }
        assert(!sendInFlight && ciphertextOutCount > 0)
        sendInFlight = true
        sendCalls &+= 1
        let pending = UnsafeRawBufferPointer(
            rebasing: ciphertextOut[ciphertextOutStart..<(ciphertextOutStart + ciphertextOutCount)])
        loop.send(fd: fd, from: pending, handler: handlerID, tag: Tag.send.rawValue)
    }

    private func armReceive() {
        guard let handlerID, fd >= 0, !recvInFlight else { return }
        recvInFlight = true
        recvProvesEmptyAfter = loop.collections
        loop.recv(fd: fd, into: receiveBuffer, handler: handlerID, tag: Tag.recv.rawValue)
    }

    // MARK: - Closing

    private func beginClose(_ reason: TransportCloseReason) {
        guard state != .closing && state != .closed else { return }
        closeReason = reason
        state = .closing
        if let handshakeTimer { loop.cancelTimer(handshakeTimer) }
        handshakeTimer = nil
        if lingering {
            if reason == .localClose, sendInFlight, let handlerID {
                // Let the in-flight send (and what follows it) finish; the receive is cancelled afterwards.
                lingerTimer = loop.schedule(
                    at: loop.now &+ Self.lingerLimit, handler: handlerID, tag: TimerTag.linger.rawValue, cookie: 0)
                return
            }
            lingering = false
        }
        if fd >= 0 {
            // Cancel what is pending (a handshake alert may not make it; a local close lingered above).
            if recvInFlight || sendInFlight || connectInFlight { loop.cancel(fd: fd) }
        }
        finishIfDrained()
    }

    /// The last bytes are out (or abandoned): cancel what is left on the socket and close it.
    private func stopLingering() {
        lingering = false
        if let lingerTimer { loop.cancelTimer(lingerTimer) }
        lingerTimer = nil
        if state == .closing, fd >= 0, recvInFlight || sendInFlight || connectInFlight { loop.cancel(fd: fd) }
        finishIfDrained()
    }

    private func finishIfDrained() {
        guard state == .closing, !lingering else { return }
        // The kernel may still own our buffers: wait for every in-flight operation to complete.
        if recvInFlight || sendInFlight || connectInFlight { return }
        if fd >= 0 {
            if !closeInFlight, let handlerID {
                closeInFlight = true
                loop.close(fd: fd, handler: handlerID, tag: Tag.close.rawValue)
            }
            return
        }
        if closeInFlight { return }
        finish(closeReason)
    }

    private func finish(_ reason: TransportCloseReason) {
        guard state != .closed else { return }
        state = .closed
        if fd >= 0 {
            Sockets.close(fd)
            fd = -1
        }
        let delegate = self.delegate
        if let handlerID {
            self.handlerID = nil
            loop.unregister(handlerID)
        }
        delegate?.transportClosed(self, reason: reason)
    }
}

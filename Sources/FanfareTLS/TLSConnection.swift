// One TLS connection as a pure state machine over two memory BIOs: the event loop moves the
// ciphertext between the socket and this object; OpenSSL only encrypts and decrypts.
import COpenSSL

public enum TLSHandshakeState: Sendable, Equatable {
    /// Flush `takeCiphertext`, wait for more bytes from the peer, `receiveCiphertext`, call again.
    case inProgress
    /// Handshake done and `h2` negotiated; plaintext may flow.
    case complete
    case failed(TLSFailure)
}

public enum TLSReadResult: Sendable, Equatable {
    /// This many plaintext bytes were written to the front of the buffer.
    case bytes(Int)
    /// No whole record is buffered; receive more ciphertext first.
    case wantMore
    /// The peer sent close_notify: no more plaintext will come.
    case closed
    case failed(TLSFailure)
}

public enum TLSWriteResult: Sendable, Equatable {
    /// This many plaintext bytes were consumed (possibly fewer than offered; offer the rest again).
    case bytes(Int)
    case failed(TLSFailure)
}

/// One `SSL*` between a read BIO (ciphertext from the peer) and a write BIO (ciphertext for the
/// peer). Owned and used by one thread; it never touches a socket.
///
/// Driving it:
/// 1. Handshake: call `advanceHandshake()`, then send everything `takeCiphertext` yields; when
///    bytes arrive, `receiveCiphertext` them and call `advanceHandshake()` again, until `.complete`.
/// 2. Receiving: `receiveCiphertext`, then `readPlaintext` in a loop until `.wantMore`. Reads can
///    *produce* ciphertext (TLS 1.3 session tickets, key-update replies, alerts), so drain
///    `takeCiphertext` after reads too, not only after writes.
/// 3. Sending: `writePlaintext` (each call encrypts what it consumes into the write BIO), then
///    drain `takeCiphertext` into the socket's send buffer.
/// 4. After any `.failed`, drain `takeCiphertext` once more (it may hold an alert) and close.
///
/// Each call performs one OpenSSL operation and allocates nothing in steady state.
public final class TLSConnection {
    /// `SSL*`, owned; it owns both BIOs (through `SSL_set_bio`), so `SSL_free` frees all three.
    private let ssl: OpaquePointer
    /// Memory BIO that OpenSSL reads ciphertext from; we `BIO_write` into it.
    private let readBIO: OpaquePointer
    /// Memory BIO that OpenSSL writes ciphertext to; we `BIO_read` from it.
    private let writeBIO: OpaquePointer
    /// Keeps the configuration alive for as long as this connection refers to it.
    private let context: TLSContext
    private let isClient: Bool
    /// Whether the handshake must end with ALPN `h2` (clients always; h2-selecting servers).
    private let requiresH2: Bool
    /// "peer 'api.push.apple.com'" or "client": names the other side in failure messages.
    private let peerLabel: String
    private var state: State = .handshaking

    private enum State {
        case handshaking
        case established
        case failed(TLSFailure)
    }

    /// A client connection to `serverName`. The name goes into SNI (unless it is an IP literal,
    /// which SNI forbids) and the certificate must match it (DNS name, or IP address SAN).
    /// `session` offers a session from an earlier connection to the same server for resumption.
    public init(
        client context: TLSContext,
        serverName: String,
        resuming session: TLSSession? = nil
    ) throws(TLSSetupError) {
        precondition(context.isClient, "TLSConnection(client:) needs a TLSContext.client(...) context")
        let host =
            serverName.hasPrefix("[") && serverName.hasSuffix("]")
            ? String(serverName.dropFirst().dropLast()) : serverName
        if host.isEmpty || host.utf8.contains(0) { throw .invalidServerName(serverName) }
        let parts = try Self.makeSSL(context)
        ssl = parts.ssl
        readBIO = parts.readBIO
        writeBIO = parts.writeBIO
        self.context = context
        isClient = true
        requiresH2 = true
        peerLabel = "peer '\(serverName)'"

        SSL_set_connect_state(ssl)
        OpenSSLErrorQueue.clear()
        if IPAddressLiteral.matches(host) {
            if X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1 {
                throw .invalidServerName(serverName)
            }
        } else {
            if capns_SSL_set_tlsext_host_name(ssl, host) != 1 {
                throw .invalidServerName(serverName)
            }
            SSL_set_hostflags(ssl, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
            if SSL_set1_host(ssl, host) != 1 { throw .invalidServerName(serverName) }
        }
        if let session, SSL_set_session(ssl, session.pointer) != 1 {
            throw .openSSL(operation: "offer a TLS session for resumption", reason: OpenSSLErrorQueue.drain())
        }
    }

    /// A server connection for the APNs simulator (an accepted socket).
    public init(server context: TLSContext) throws(TLSSetupError) {
        precondition(!context.isClient, "TLSConnection(server:) needs a TLSContext.server(...) context")
        let parts = try Self.makeSSL(context)
        ssl = parts.ssl
        readBIO = parts.readBIO
        writeBIO = parts.writeBIO
        self.context = context
        isClient = false
        requiresH2 = context.selectsH2
        peerLabel = "client"
        SSL_set_accept_state(ssl)
    }

    deinit {
        SSL_free(ssl)
    }

    // MARK: - Handshake

    /// Runs the handshake as far as the buffered ciphertext allows. Idempotent once finished.
    public func advanceHandshake() -> TLSHandshakeState {
        switch state {
        case .established: return .complete
        case .failed(let failure): return .failed(failure)
        case .handshaking: break
        }
        OpenSSLErrorQueue.clear()
        let result = SSL_do_handshake(ssl)
        if result == 1 {
            if let failure = applicationProtocolFailure() {
                state = .failed(failure)
                return .failed(failure)
            }
            state = .established
            return .complete
        }
        let error = SSL_get_error(ssl, result)
        if error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE {
            return .inProgress
        }
        let failure = failure(sslError: error, operation: "handshake")
        state = .failed(failure)
        return .failed(failure)
    }

    public var isHandshakeComplete: Bool {
        if case .established = state { return true }
        return false
    }

    // MARK: - Ciphertext in and out

    /// Hands bytes received from the socket to OpenSSL (copied into the read BIO, all of them).
    public func receiveCiphertext(_ bytes: UnsafeRawBufferPointer) {
        guard var address = bytes.baseAddress else { return }
        var remaining = bytes.count
        while remaining > 0 {
            let chunk = Int32(clamping: remaining)
            let written = BIO_write(readBIO, address, chunk)
            // A memory BIO grows on demand; it only fails when malloc does.
            precondition(written == chunk, "BIO_write to a memory BIO failed (out of memory)")
            address += Int(chunk)
            remaining -= Int(chunk)
        }
    }

    /// Ciphertext waiting to be sent to the peer.
    public var pendingCiphertextCount: Int {
        Int(capns_BIO_pending(writeBIO))
    }

    /// Moves up to `buffer.count` bytes of ciphertext for the peer into `buffer`; returns how many.
    public func takeCiphertext(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let address = buffer.baseAddress, buffer.count > 0 else { return 0 }
        let count = BIO_read(writeBIO, address, Int32(clamping: buffer.count))
        // An empty memory BIO returns -1 with the retry flag set: simply nothing to send.
        let taken = max(0, Int(count))
        assert(taken <= buffer.count)
        return taken
    }

    // MARK: - Plaintext

    /// Decrypts at most one record's worth of plaintext into `buffer` (one `SSL_read_ex`).
    /// Call in a loop until `.wantMore`, and drain `takeCiphertext` afterwards (see type docs).
    public func readPlaintext(into buffer: UnsafeMutableRawBufferPointer) -> TLSReadResult {
        precondition(buffer.count > 0, "readPlaintext needs a non-empty buffer")
        switch state {
        case .handshaking: preconditionFailure("readPlaintext before advanceHandshake() returned .complete")
        case .failed(let failure): return .failed(failure)
        case .established: break
        }
        OpenSSLErrorQueue.clear()
        var count = 0
        if SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &count) == 1 {
            assert(count > 0 && count <= buffer.count)
            return .bytes(count)
        }
        let error = SSL_get_error(ssl, 0)
        switch error {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .wantMore
        case SSL_ERROR_ZERO_RETURN:
            return .closed
        default:
            let failure = failure(sslError: error, operation: "read")
            state = .failed(failure)
            return .failed(failure)
        }
    }

    /// Encrypts plaintext into the write BIO (one `SSL_write_ex`). May consume fewer bytes than
    /// offered; offer the rest again (partial writes and moving buffers are enabled).
    public func writePlaintext(_ bytes: UnsafeRawBufferPointer) -> TLSWriteResult {
        switch state {
        case .handshaking: preconditionFailure("writePlaintext before advanceHandshake() returned .complete")
        case .failed(let failure): return .failed(failure)
        case .established: break
        }
        if bytes.isEmpty { return .bytes(0) }
        OpenSSLErrorQueue.clear()
        var count = 0
        if SSL_write_ex(ssl, bytes.baseAddress, bytes.count, &count) == 1 {
            assert(count > 0 && count <= bytes.count)
            return .bytes(count)
        }
        let error = SSL_get_error(ssl, 0)
        if error == SSL_ERROR_WANT_WRITE {
            return .bytes(0)  // cannot happen with a growing memory BIO; harmless if it does
        }
        // WANT_READ from a write means the peer wants to renegotiate, which we forbid.
        let failure =
            error == SSL_ERROR_WANT_READ
            ? TLSFailure(kind: .protocolError, message: "TLS write failed: peer requested renegotiation (\(peerLabel))")
            : failure(sslError: error, operation: "write")
        state = .failed(failure)
        return .failed(failure)
    }

    /// Queues close_notify in the write BIO (drain `takeCiphertext` to send it). No-op before
    /// the handshake has completed or after a failure.
    public func shutdown() {
        guard case .established = state else { return }
        OpenSSLErrorQueue.clear()
        _ = SSL_shutdown(ssl)
        OpenSSLErrorQueue.clear()
    }

    // MARK: - Negotiated parameters

    /// The ALPN protocol agreed in the handshake ("h2"), or nil if none.
    public var negotiatedProtocol: String? {
        var name: UnsafePointer<UInt8>? = nil
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &name, &length)
        guard let name, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: name, count: Int(length)), as: UTF8.self)
    }

    /// True when the handshake resumed a session offered through `init(client:serverName:resuming:)`.
    public var isResumedSession: Bool {
        SSL_session_reused(ssl) == 1
    }

    /// The session to offer on the next connection to this server, if it can be resumed. With
    /// TLS 1.3 the tickets arrive after the handshake (processed inside `readPlaintext`), so ask
    /// after the first successful read.
    public var session: TLSSession? {
        guard isClient, let session = SSL_get1_session(ssl) else { return nil }
        guard SSL_SESSION_is_resumable(session) == 1 else {
            SSL_SESSION_free(session)
            return nil
        }
        return TLSSession(owning: session)
    }

    // MARK: - Helpers

    private static func makeSSL(
        _ context: TLSContext
    ) throws(TLSSetupError) -> (ssl: OpaquePointer, readBIO: OpaquePointer, writeBIO: OpaquePointer) {
        OpenSSLErrorQueue.clear()
        guard let ssl = SSL_new(context.pointer) else {
            throw .openSSL(operation: "create a TLS connection", reason: OpenSSLErrorQueue.drain())
        }
        guard let readBIO = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw .openSSL(operation: "create a memory BIO", reason: OpenSSLErrorQueue.drain())
        }
        guard let writeBIO = BIO_new(BIO_s_mem()) else {
            BIO_free(readBIO)
            SSL_free(ssl)
            throw .openSSL(operation: "create a memory BIO", reason: OpenSSLErrorQueue.drain())
        }
        // An empty read BIO must mean "retry later", never end of stream.
        _ = capns_BIO_set_mem_eof_return(readBIO, -1)
        _ = capns_BIO_set_mem_eof_return(writeBIO, -1)
        SSL_set_bio(ssl, readBIO, writeBIO)
        return (ssl, readBIO, writeBIO)
    }

    /// After a completed handshake: the connection is useless for APNs unless it speaks h2.
    private func applicationProtocolFailure() -> TLSFailure? {
        guard requiresH2 else { return nil }
        var name: UnsafePointer<UInt8>? = nil
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &name, &length)
        if let name, length == 2, name[0] == UInt8(ascii: "h"), name[1] == UInt8(ascii: "2") { return nil }
        let chosen = negotiatedProtocol.map { "'\($0)' was selected" } ?? "no ALPN protocol was selected"
        let who = isClient ? "peer did not negotiate ALPN h2" : "client did not offer ALPN h2"
        return TLSFailure(kind: .applicationProtocolNotNegotiated, message: "\(who): \(chosen) (\(peerLabel))")
    }

    /// Builds the message for a fatal `SSL_get_error` result; drains the error queue.
    private func failure(sslError: Int32, operation: String) -> TLSFailure {
        let reasons = OpenSSLErrorQueue.drain(fallback: "")
        let verifyResult = SSL_get_verify_result(ssl)
        if isClient && verifyResult != Int(X509_V_OK) && SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER != 0 {
            let reason = String(cString: X509_verify_cert_error_string(verifyResult))
            return TLSFailure(
                kind: .peerCertificateRejected,
                message: "certificate verify failed: \(reason) (\(peerLabel))"
            )
        }
        let detail: String
        switch sslError {
        case SSL_ERROR_SSL:
            detail = reasons.isEmpty ? "protocol error" : reasons
        case SSL_ERROR_SYSCALL:
            detail = reasons.isEmpty ? "unexpected end of stream" : reasons
        default:
            detail = reasons.isEmpty ? "SSL_get_error \(sslError)" : reasons
        }
        return TLSFailure(kind: .protocolError, message: "TLS \(operation) failed: \(detail) (\(peerLabel))")
    }
}

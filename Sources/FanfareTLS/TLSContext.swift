// The shared, immutable TLS configuration (`SSL_CTX*`): one per (role, identity), used by every worker.
import COpenSSL

/// An OpenSSL `SSL_CTX` configured once and then only read, so worker threads may share it
/// (OpenSSL allows concurrent `SSL_new` on a context that is no longer being modified).
public final class TLSContext: @unchecked Sendable {
    /// `SSL_CTX*`. Owned: freed in `deinit`. Each `SSL` made from it holds its own reference.
    let pointer: OpaquePointer
    /// True for `client(...)` contexts; connections assert they are built on the matching side.
    let isClient: Bool
    /// Server contexts only: whether the ALPN callback selects `h2` (false only in tests).
    let selectsH2: Bool

    private init(pointer: OpaquePointer, isClient: Bool, selectsH2: Bool) {
        self.pointer = pointer
        self.isClient = isClient
        self.selectsH2 = selectsH2
    }

    deinit {
        SSL_CTX_free(pointer)
    }

    /// A client context for talking to APNs (or the simulator).
    ///
    /// - TLS 1.2 or newer, ALPN offers `h2` only, no renegotiation, no compression.
    /// - `verifyPeer`: checks the server against the system trust store plus `caFile` (if given),
    ///   so a simulator's private CA can be trusted without touching the system store.
    /// - `certificateFile`/`privateKeyFile`: PEM certificate chain and key for certificate-based
    ///   APNs authentication; both or neither.
    public static func client(
        caFile: String? = nil,
        verifyPeer: Bool = true,
        certificateFile: String? = nil,
        privateKeyFile: String? = nil
    ) throws(TLSSetupError) -> TLSContext {
        try client(
            caFile: caFile, verifyPeer: verifyPeer, certificateFile: certificateFile,
            privateKeyFile: privateKeyFile, offeredProtocols: ["h2"]
        )
    }

    /// As `client(...)`, with a chosen ALPN list. Internal: tests use it to play an h2-less client.
    static func client(
        caFile: String?,
        verifyPeer: Bool,
        certificateFile: String?,
        privateKeyFile: String?,
        offeredProtocols: [String]
    ) throws(TLSSetupError) -> TLSContext {
        let context = try makeContext(method: TLS_client_method(), isClient: true, selectsH2: false)
        let ctx = context.pointer
        try context.offerProtocols(offeredProtocols)

        if verifyPeer {
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
            OpenSSLErrorQueue.clear()
            if SSL_CTX_set_default_verify_paths(ctx) != 1 {
                throw .openSSL(operation: "load the system trust store", reason: OpenSSLErrorQueue.drain())
            }
            if let caFile {
                try requireReadable(caFile, kind: .caFile)
                OpenSSLErrorQueue.clear()
                if SSL_CTX_load_verify_file(ctx, caFile) != 1 {
                    throw .invalidFile(kind: .caFile, path: caFile, reason: OpenSSLErrorQueue.drain())
                }
            }
        } else {
            SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nil)
        }

        switch (certificateFile, privateKeyFile) {
        case (nil, nil):
            break
        case (let certificateFile?, let privateKeyFile?):
            try context.useIdentity(certificateFile: certificateFile, privateKeyFile: privateKeyFile)
        default:
            throw .incompleteClientIdentity
        }

        // Clients resume only sessions handed back explicitly (`TLSConnection.session`), so keep
        // OpenSSL's internal store out of it.
        _ = capns_SSL_CTX_set_session_cache_mode(
            ctx, Int(SSL_SESS_CACHE_CLIENT) | Int(SSL_SESS_CACHE_NO_INTERNAL_STORE)
        )
        return context
    }

    /// A server context for the APNs simulator: TLS 1.2+, certificate chain + key from PEM files,
    /// and ALPN that accepts only `h2` (a client that does not offer it gets a fatal
    /// `no_application_protocol` alert, so h2-less clients fail at once and clearly).
    public static func server(certificateFile: String, privateKeyFile: String) throws(TLSSetupError) -> TLSContext {
        try server(certificateFile: certificateFile, privateKeyFile: privateKeyFile, selectsH2: true)
    }

    /// As `server(...)`; `selectsH2: false` negotiates no ALPN at all. Internal: for tests.
    static func server(
        certificateFile: String,
        privateKeyFile: String,
        selectsH2: Bool
    ) throws(TLSSetupError) -> TLSContext {
        let context = try makeContext(method: TLS_server_method(), isClient: false, selectsH2: selectsH2)
        try context.useIdentity(certificateFile: certificateFile, privateKeyFile: privateKeyFile)
        if selectsH2 {
            SSL_CTX_set_alpn_select_cb(context.pointer, fanfareSelectH2, nil)
        }
        return context
    }

    // MARK: - Set-up steps

    /// Creates the `SSL_CTX` with the settings both sides share.
    private static func makeContext(
        method: OpaquePointer?,
        isClient: Bool,
        selectsH2: Bool
    ) throws(TLSSetupError) -> TLSContext {
        OpenSSLErrorQueue.clear()
        guard let method, let ctx = SSL_CTX_new(method) else {
            throw .openSSL(operation: "create a TLS context", reason: OpenSSLErrorQueue.drain())
        }
        let context = TLSContext(pointer: ctx, isClient: isClient, selectsH2: selectsH2)  // frees ctx if we throw
        if capns_SSL_CTX_set_min_proto_version(ctx, capns_TLS1_2_VERSION()) != 1 {
            throw .openSSL(operation: "require TLS 1.2 or newer", reason: OpenSSLErrorQueue.drain())
        }
        _ = SSL_CTX_set_options(ctx, capns_SSL_OP_NO_RENEGOTIATION | capns_SSL_OP_NO_COMPRESSION)
        // Partial writes + moving buffers: a write retried after a short write need not repeat the
        // same pointer/length. No SSL_MODE_RELEASE_BUFFERS: it frees and re-mallocs the record buffers
        // whenever a connection drains, i.e. every loop tick under load (a malloc per record); APNs senders
        // keep few, busy connections, so the 2 x ~17 KiB per connection is the better trade.
        let mode = Int(SSL_MODE_ENABLE_PARTIAL_WRITE) | Int(SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER)
        let appliedMode = capns_SSL_CTX_set_mode(ctx, mode)
        assert(appliedMode & mode == mode)
        return context
    }

    /// Sets the client's ALPN list (wire format: length-prefixed names).
    private func offerProtocols(_ protocols: [String]) throws(TLSSetupError) {
        var wire: [UInt8] = []
        for name in protocols {
            precondition(!name.isEmpty && name.utf8.count < 256, "ALPN names are 1...255 bytes")
            wire.append(UInt8(name.utf8.count))
            wire.append(contentsOf: name.utf8)
        }
        OpenSSLErrorQueue.clear()
        // Unlike most of OpenSSL, this returns 0 on success.
        if SSL_CTX_set_alpn_protos(pointer, wire, UInt32(wire.count)) != 0 {
            throw .openSSL(operation: "set the ALPN protocol list", reason: OpenSSLErrorQueue.drain())
        }
    }

    /// Loads a PEM certificate chain and its private key, and checks they belong together.
    private func useIdentity(certificateFile: String, privateKeyFile: String) throws(TLSSetupError) {
        try Self.requireReadable(certificateFile, kind: .certificateFile)
        try Self.requireReadable(privateKeyFile, kind: .privateKeyFile)
        OpenSSLErrorQueue.clear()
        if SSL_CTX_use_certificate_chain_file(pointer, certificateFile) != 1 {
            throw .invalidFile(kind: .certificateFile, path: certificateFile, reason: OpenSSLErrorQueue.drain())
        }
        // Parse the key ourselves so "not a key" and "the wrong key" get different messages:
        // SSL_CTX_use_PrivateKey fails for both.
        let key = try Self.readPrivateKey(privateKeyFile)
        defer { EVP_PKEY_free(key) }
        OpenSSLErrorQueue.clear()
        if SSL_CTX_use_PrivateKey(pointer, key) != 1 || SSL_CTX_check_private_key(pointer) != 1 {
            OpenSSLErrorQueue.clear()
            throw .certificateKeyMismatch(certificateFile: certificateFile, privateKeyFile: privateKeyFile)
        }
    }

    private static func readPrivateKey(_ path: String) throws(TLSSetupError) -> OpaquePointer {
        let bytes: [UInt8]
        switch LocalFile.read(path) {
        case .success(let contents): bytes = contents
        case .failure(let error): throw .cannotReadFile(kind: .privateKeyFile, path: path, reason: error.reason)
        }
        OpenSSLErrorQueue.clear()
        let key: OpaquePointer? = bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            // The callback refuses passphrases: never let OpenSSL prompt on the terminal.
            return PEM_read_bio_PrivateKey(bio, nil, fanfareRefusePassphrase, nil)
        }
        guard let key else {
            throw .invalidFile(kind: .privateKeyFile, path: path, reason: OpenSSLErrorQueue.drain())
        }
        return key
    }

    private static func requireReadable(_ path: String, kind: TLSFileKind) throws(TLSSetupError) {
        if let reason = LocalFile.unreadableReason(path) {
            throw .cannotReadFile(kind: kind, path: path, reason: reason)
        }
    }
}

/// ALPN selection for server contexts: pick `h2` from the client's list or end the handshake with
/// a fatal `no_application_protocol` alert. Called by OpenSSL on the handshaking thread; must not
/// throw or trap.
nonisolated func fanfareSelectH2(
    _ ssl: OpaquePointer?,
    _ selected: UnsafeMutablePointer<UnsafePointer<UInt8>?>?,
    _ selectedLength: UnsafeMutablePointer<UInt8>?,
    _ offered: UnsafePointer<UInt8>?,
    _ offeredLength: UInt32,
    _ argument: UnsafeMutableRawPointer?
) -> Int32 {
    guard let selected, let selectedLength, let offered else { return SSL_TLSEXT_ERR_ALERT_FATAL }
    var index = 0
    let end = Int(offeredLength)
    while index < end {
        let length = Int(offered[index])
        let nameStart = index + 1
        if nameStart + length > end { break }  // malformed list
        if length == 2 && offered[nameStart] == UInt8(ascii: "h") && offered[nameStart + 1] == UInt8(ascii: "2") {
            // OpenSSL copies the selection before `offered` goes away.
            selected.pointee = offered + nameStart
            selectedLength.pointee = 2
            return SSL_TLSEXT_ERR_OK
        }
        index = nameStart + length
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL
}

/// PEM passphrase callback that supplies none, so an encrypted key fails instead of prompting.
nonisolated func fanfareRefusePassphrase(
    _ buffer: UnsafeMutablePointer<CChar>?,
    _ size: Int32,
    _ writing: Int32,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    -1
}

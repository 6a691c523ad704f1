import FanfareCore
import FanfareHTTP2
import FanfareIO
import FanfareTLS
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/2 connection to the channel management host: TLS over an io_uring socket and the client's own
/// HTTP/2 session, with a few numbered request slots (the session's request numbers). Loop thread only.
final class ChannelManagementConnection: HTTP2ClientSessionDelegate, SecureTransportDelegate {
    unowned(unsafe) let worker: ChannelManagementWorker  // the worker keeps its connections until they close
    let transport: SecureTransport
    /// Addresses still to try if this connect fails.
    let remainingAddresses: [SocketAddress]
    private var session: HTTP2ClientSession?
    private var calls: [ChannelManagementCall?]
    private var authority: HPACKCachedField?
    private var authorization: HPACKCachedField?
    private var authorizationGeneration: UInt64 = 0
    private(set) var isReady = false
    private var isClosed = false
    /// A GOAWAY arrived: no new calls; closes when the last one ends.
    private var isDraining = false
    private var closeCause: String?
    private(set) var lastActivityAt: UInt64 = 0

    /// The key this connection signs with for its whole life.
    let providerTokens: ProviderTokenSource?

    init(worker: ChannelManagementWorker, tls: TLSConnection, remainingAddresses: [SocketAddress]) {
        providerTokens = worker.currentProviderTokens
        self.worker = worker
        self.remainingAddresses = remainingAddresses
        transport = SecureTransport(loop: worker.loop, tls: tls, buffers: .small)
        calls = Array(repeating: nil, count: worker.configuration.maximumConcurrentCalls)
        super.init()
        transport.delegate = self
    }

    func start(address: SocketAddress) {
        lastActivityAt = worker.loop.now
        transport.connect(
            to: address, handshakeTimeout: worker.configuration.connectTimeout.nanoseconds, through: worker.tunnel)
    }

    var hasFreeSlot: Bool { !isClosed && calls.contains { $0 == nil } }
    var isIdle: Bool { calls.allSatisfy { $0 == nil } }

    /// Sends `call` on a new stream; false when the session takes no more requests.
    func submit(_ call: ChannelManagementCall) -> Bool {
        guard let session, isReady, let slot = calls.firstIndex(where: { $0 == nil }) else { return false }
        refreshAuthorization()
        call.status = 0
        call.answeredChannel = nil
        call.responseBody.removeAll()
        call.bodyTooLarge = false
        calls[slot] = call
        guard session.submit(request: slot) else {
            calls[slot] = nil
            return false
        }
        lastActivityAt = worker.loop.now
        return true
    }

    /// A JWT re-minted since the last call goes out with the next one (the source re-mints on schedule).
    private func refreshAuthorization() {
        guard let source = providerTokens, let authorization, let session else { return }
        let (token, generation) = source.snapshot()
        guard generation != authorizationGeneration else { return }
        session.updateRepeatedField(authorization, value: token.authorizationHeaderValue)
        authorizationGeneration = generation
    }

    func close(reason: String) {
        if closeCause == nil { closeCause = reason }
        isReady = false
        session?.terminate()
        transport.close()
    }

    /// Ends calls past their deadline (their streams are cancelled) and those whose answer grew too large.
    func sweep(now: UInt64) {
        for slot in calls.indices {
            guard let call = calls[slot] else { continue }
            if now >= call.deadline {
                call.fail(.timedOut)
            } else if call.bodyTooLarge {
                call.fail(.badAnswer("the answer's body is over \(worker.configuration.maximumResponseBody) bytes"))
            } else {
                continue
            }
            // Finished first, so the stream's close does not send it again.
            if let session { session.cancel(request: slot) } else { calls[slot] = nil }
        }
    }

    /// After the thread is gone: every call still here ends with `kind`.
    func failAll(_ kind: ChannelManagementError.Kind) {
        for slot in calls.indices {
            calls[slot]?.fail(kind)
            calls[slot] = nil
        }
    }

    // MARK: - SecureTransportDelegate

    func transportEstablished(_ transport: SecureTransport) {
        var settings = HTTP2ClientSession.LocalSettings()
        settings.maxConcurrentStreams = calls.count
        let newSession = HTTP2ClientSession(
            transport: transport, delegate: self, capacity: calls.count, settings: settings)
        let configuration = worker.configuration
        let authorityValue =
            configuration.port == 443 ? configuration.host : "\(configuration.host):\(configuration.port)"
        authority = newSession.registerRepeatedField(
            nameIndex: HPACKStaticTable.authority, name: ":authority", value: authorityValue)
        if providerTokens != nil {
            authorization = newSession.registerRepeatedField(
                nameIndex: HPACKStaticTable.authorization, name: "authorization", value: "")
        }
        session = newSession
        newSession.start()
        isReady = true
        lastActivityAt = worker.loop.now
        worker.connectionReady(self)
    }

    func transportReceived(_ transport: SecureTransport, plaintext: UnsafeRawBufferPointer) -> Bool {
        guard let session else { return false }
        lastActivityAt = worker.loop.now
        do {
            try session.receive(plaintext)
        } catch {
            close(reason: "HTTP/2 error: \(error)")
        }
        return true
    }

    func transportProduce(_ transport: SecureTransport) {
        session?.produce()
    }

    func transportClosed(_ transport: SecureTransport, reason: TransportCloseReason) {
        let established = session != nil
        isReady = false
        isClosed = true
        if closeCause == nil || reason != .localClose {
            closeCause = closeCause.map { "\($0); \(reason)" } ?? reason.description
        }
        // Every call still here ends through http2StreamClosed: never written → sent again elsewhere;
        // written → no answer.
        session?.connectionLost()
        session = nil
        for slot in calls.indices where calls[slot] != nil {
            calls[slot]?.fail(.transport(closeCause ?? "connection ended", mayHaveBeenProcessed: false))
            calls[slot] = nil
        }
        worker.connectionClosed(
            self, cause: closeCause ?? reason.description, established: established,
            connectFailed: reason.isConnectFailure)
    }

    // MARK: - HTTP2ClientSessionDelegate

    override func http2WriteRequestHeaders(request: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter)
    {
        guard let call = calls[request], let authority else { preconditionFailure("headers for an empty request slot") }
        switch call.operation {
        case .create: writer.writeIndexed(HPACKStaticTable.methodPOST)
        case .read, .list: writer.writeIndexed(HPACKStaticTable.methodGET)
        case .delete:
            Self.withBytes("DELETE") {
                writer.writeLiteralWithoutIndexing(nameIndex: HPACKStaticTable.methodGET, value: $0, huffman: false)
            }
        }
        writer.writeIndexed(HPACKStaticTable.schemeHTTPS)
        Self.withBytes(call.operation.path(bundleID: worker.configuration.bundleID)) {
            writer.writeLiteralWithoutIndexing(nameIndex: HPACKStaticTable.path, value: $0, huffman: true)
        }
        table.write(authority, into: &writer)
        if let authorization { table.write(authorization, into: &writer) }
        if let channel = call.operation.channel {
            channel.withUnsafeBytes { id in
                Self.withBytes("apns-channel-id") { writer.writeLiteralWithoutIndexing(name: $0, value: id) }
            }
        }
        call.requestID.withUnsafeBytes { id in
            Self.withBytes("apns-request-id") { writer.writeLiteralWithoutIndexing(name: $0, value: id) }
        }
        if call.body.count > 0 {
            Self.withBytes("application/json") {
                writer.writeLiteralWithoutIndexing(nameIndex: HPACKStaticTable.contentType, value: $0, huffman: true)
            }
        }
    }

    private static func withBytes(_ text: String, _ body: (UnsafeRawBufferPointer) -> Void) {
        var text = text
        text.withUTF8 { body(UnsafeRawBufferPointer($0)) }
    }

    override func http2RequestBody(request: Int) -> UnsafeRawBufferPointer {
        guard let call = calls[request] else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(call.body)
    }

    override func http2ResponseHeader(request: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        guard let call = calls[request] else { return }
        if Self.equals(name, ":status") {
            // Three digits (RFC 9110 §15); anything else is garbage (-1: malformed).
            var status = -1
            if value.count == 3, let base = value.baseAddress {
                let parsed = HTTP2.parseDecimal(base.assumingMemoryBound(to: UInt8.self), 3)
                if parsed >= 100 { status = parsed }
            }
            // An informational (1xx) block is followed by the real one.
            if call.status == 0 || (100..<200).contains(call.status) { call.status = status }
        } else if Self.equals(name, "apns-channel-id") {
            call.answeredChannel = Array(value.prefix(BroadcastChannelID.maximumByteCount + 1))
        } else if Self.equals(name, "apns-request-id"), value.count == PushIdentifier.byteCount,
            APNsIDGenerator.isValidAPNsID(value)
        {
            var identifier = PushIdentifier()
            identifier.withUnsafeMutableBytes { $0.copyMemory(from: value) }
            identifier.lowercase()
            call.requestID = identifier
        }
    }

    private static func equals(_ bytes: UnsafeRawBufferPointer, _ text: StaticString) -> Bool {
        bytes.count == text.utf8CodeUnitCount && memcmp(bytes.baseAddress!, text.utf8Start, bytes.count) == 0
    }

    override func http2ResponseData(request: Int, bytes: UnsafeRawBufferPointer) {
        guard let call = calls[request], !call.bodyTooLarge else { return }
        // Bounded: a hostile server's endless body ends the call at the next sweep, never grows without limit.
        let room = worker.configuration.maximumResponseBody - call.responseBody.count
        guard bytes.count <= room else {
            call.bodyTooLarge = true
            return
        }
        call.responseBody.append(contentsOf: bytes)
    }

    override func http2StreamClosed(request: Int, errorCode: UInt32, processed: Bool) {
        guard let call = calls[request] else { return }
        calls[request] = nil
        lastActivityAt = worker.loop.now
        defer {
            // A draining connection (GOAWAY) closes once its last call ended.
            if isDraining && isIdle && !isClosed { close(reason: closeCause ?? "GOAWAY") }
        }
        guard !call.isFinished else { return }
        if errorCode == HTTP2ErrorCode.noError && call.status != 0 && processed {
            call.finishWithAnswer(maximumBody: worker.configuration.maximumResponseBody)
        } else if !processed {
            worker.requeue(call, cause: "\(closeCause ?? HTTP2ErrorCode.name(errorCode)) (request not processed)")
        } else if isClosed || session?.lost == true {
            call.fail(
                .transport("connection ended before the answer: \(closeCause ?? "closed")", mayHaveBeenProcessed: true))
        } else {
            call.fail(
                .transport("stream reset by the server (\(HTTP2ErrorCode.name(errorCode)))", mayHaveBeenProcessed: true)
            )
        }
    }

    override func http2GoAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: UnsafeRawBufferPointer) {
        var reason = "GOAWAY \(HTTP2ErrorCode.name(errorCode))"
        if !debugData.isEmpty { reason += " " + PrintableText.escaping(debugData, limit: 256) }
        closeCause = reason
        isReady = false
        isDraining = true
        // Streams above lastStreamID come back unprocessed (requeued); the rest finish, then it closes.
        worker.connectionDraining(self)
        if isIdle { close(reason: reason) }
    }
}

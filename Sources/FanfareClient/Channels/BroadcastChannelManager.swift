import FanfareCore
import FanfareIO
import Glibc
import Synchronization

/// A client of APNs' broadcast channel management API (apns-spec.md §8.2): create, read, list and delete the
/// app's channels on the management host and port of an environment.
///
/// It runs on the same data plane as the push client: one io_uring thread of its own, TLS over memory BIOs
/// and the client's own HTTP/2 session (`HTTP2ClientSession`), one connection opened on the first call and
/// closed after `idleTimeout` without one. Token authentication uses the push client's
/// `ProviderTokenSource` (share it: one JWT per team and key). Every call carries an `apns-request-id`
/// (given, or a random UUID) that comes back with its reply or error. Calls may come from any thread or
/// task; each ends exactly once, with its reply or a `ChannelManagementError`.
public final class BroadcastChannelManager: Sendable {
    public let configuration: ChannelManagementConfiguration
    private let worker: ChannelManagementWorker
    private let thread: IOThread
    private let resolver: HostResolver
    private let isShutDown = Atomic<Bool>(false)

    /// Starts the manager's thread; no connection opens before the first call.
    /// - Throws: `ClientConfigurationError` for a configuration it cannot work with, `IOError` when its thread
    ///   or ring cannot be created.
    public init(configuration: ChannelManagementConfiguration) throws {
        try configuration.validate()
        self.configuration = configuration
        let resolver = try HostResolver(name: "fanfare-chan-dns")
        self.resolver = resolver
        let worker = ChannelManagementWorker(configuration: configuration, resolver: resolver)
        self.worker = worker
        do {
            thread = try IOThread(name: "fanfare-channels") { loop in worker.attach(to: loop) }
        } catch {
            resolver.stop()
            throw error
        }
    }

    deinit {
        shutdown()
    }

    /// Creates a channel (push type LiveActivity) and returns its id.
    public func create(
        storagePolicy: ChannelStoragePolicy, requestID: PushIdentifier? = nil
    ) async throws(ChannelManagementError)
        -> BroadcastChannelID
    {
        let reply = try await perform(.create(storagePolicy), requestID: requestID)
        guard let channel = reply.createdChannel else {
            // `perform` checks this; a reply without it is not returned.
            throw ChannelManagementError(
                operation: reply.operation, kind: .badAnswer("no apns-channel-id"), requestID: reply.requestID)
        }
        return channel
    }

    /// A channel's storage policy and push type.
    public func read(
        _ channel: BroadcastChannelID, requestID: PushIdentifier? = nil
    ) async throws(ChannelManagementError)
        -> BroadcastChannelInfo
    {
        let reply = try await perform(.read(channel), requestID: requestID)
        guard let info = reply.info else {
            throw ChannelManagementError(
                operation: reply.operation, kind: .badAnswer("no channel settings"), requestID: reply.requestID)
        }
        return info
    }

    /// Every channel of the app in this environment.
    public func list(requestID: PushIdentifier? = nil) async throws(ChannelManagementError) -> [BroadcastChannelID] {
        try await perform(.list, requestID: requestID).channels
    }

    /// Deletes a channel (its id is never reused).
    public func delete(
        _ channel: BroadcastChannelID, requestID: PushIdentifier? = nil
    ) async throws(ChannelManagementError) {
        _ = try await perform(.delete(channel), requestID: requestID)
    }

    /// Any call, with the whole reply (status, request id and what the answer carried).
    public func perform(
        _ operation: ChannelManagementOperation, requestID: PushIdentifier? = nil
    ) async throws(ChannelManagementError)
        -> ChannelManagementReply
    {
        var identifier = requestID ?? PushIdentifier()
        if requestID == nil {
            var generator = APNsIDGenerator()
            identifier.withUnsafeMutableBytes { generator.write(to: $0.baseAddress!) }
        }
        let sentID = identifier
        let deadline = IOLoop.monotonicNanoseconds() &+ configuration.requestTimeout.nanoseconds
        let result: Result<ChannelManagementReply, ChannelManagementError> = await withCheckedContinuation {
            continuation in
            let call = ChannelManagementCall(operation: operation, requestID: sentID, deadline: deadline) {
                continuation.resume(returning: $0)
            }
            if isShutDown.load(ordering: .acquiring) || !worker.enqueue(call) {
                call.finish(.failure(ChannelManagementError(operation: operation, kind: .shutDown, requestID: sentID)))
            }
        }
        return try result.get()
    }

    /// Ends every call not yet answered (`.shutDown`), closes the connection and stops the thread. Idempotent.
    public func shutdown() {
        guard !isShutDown.exchange(true, ordering: .acquiringAndReleasing) else { return }
        worker.requestStop()
        let deadline = IOLoop.monotonicNanoseconds() &+ 5_000_000_000
        while !worker.isStopped && IOLoop.monotonicNanoseconds() < deadline { usleep(1000) }
        thread.stop()
        thread.join()
        // The thread is gone: calls it left (a stop that timed out) end here.
        worker.finishRemainingAfterStop()
        resolver.stop()
    }
}

/// One call on its way: what to send, what came back, and the continuation to end, once.
final class ChannelManagementCall: @unchecked Sendable {
    let operation: ChannelManagementOperation
    var requestID: PushIdentifier
    let deadline: UInt64
    /// The request body and path, kept at fixed addresses until the stream closes.
    let body: UnsafeMutableRawBufferPointer
    private let completion: @Sendable (Result<ChannelManagementReply, ChannelManagementError>) -> Void
    private let finished = Atomic<Bool>(false)
    /// Sends after a connection ended with the request provably unprocessed.
    var resends = 0

    // The answer (loop thread only).
    var status = 0
    var answeredChannel: [UInt8]?
    var responseBody: [UInt8] = []
    var bodyTooLarge = false

    init(
        operation: ChannelManagementOperation, requestID: PushIdentifier, deadline: UInt64,
        completion: @escaping @Sendable (Result<ChannelManagementReply, ChannelManagementError>) -> Void
    ) {
        self.operation = operation
        self.requestID = requestID
        self.deadline = deadline
        self.completion = completion
        let bytes = operation.body
        body = .allocate(byteCount: bytes.count, alignment: 1)
        body.copyBytes(from: bytes)
    }

    deinit { body.deallocate() }

    var isFinished: Bool { finished.load(ordering: .acquiring) }

    /// Ends the call; later calls are ignored (exactly one result).
    func finish(_ result: Result<ChannelManagementReply, ChannelManagementError>) {
        guard !finished.exchange(true, ordering: .acquiringAndReleasing) else { return }
        completion(result)
    }

    func fail(_ kind: ChannelManagementError.Kind) {
        finish(.failure(ChannelManagementError(operation: operation, kind: kind, requestID: requestID)))
    }

    /// Decides what the complete answer means (apns-spec.md §8.2, §7.5).
    func finishWithAnswer(maximumBody: Int) {
        guard status >= 100 else { return fail(.badAnswer("a malformed :status")) }
        guard (200..<300).contains(status) else {
            let parsed = responseBody.withUnsafeBytes { APNsErrorBody.parse($0) }
            let reason = parsed?.knownReason
            var raw: String?
            if reason == nil, let text = parsed?.reason, !text.isEmpty {
                raw = PrintableText.escaping(text, limit: 200)
            }
            if parsed == nil && !responseBody.isEmpty {
                raw =
                    "(body is not APNs' error JSON: "
                    + responseBody.withUnsafeBytes { PrintableText.escaping($0, limit: 120) } + ")"
            }
            return fail(.rejected(status: status, reason: reason, rawReason: raw))
        }
        guard !bodyTooLarge else { return fail(.badAnswer("the answer's body is over \(maximumBody) bytes")) }
        var reply = ChannelManagementReply(
            operation: operation, status: status, requestID: requestID, createdChannel: nil, info: nil, channels: [])
        switch operation {
        case .create:
            guard let header = answeredChannel else {
                return fail(.badAnswer("\(status) without an apns-channel-id header"))
            }
            let parsed = header.withUnsafeBytes { bytes -> Result<BroadcastChannelID, BroadcastChannelIDError> in
                do throws(BroadcastChannelIDError) { return .success(try BroadcastChannelID(bytes: bytes)) } catch {
                    return .failure(error)
                }
            }
            switch parsed {
            case .success(let channel): reply.createdChannel = channel
            case .failure(let error):
                let text = header.withUnsafeBytes { PrintableText.escaping($0, limit: 120) }
                return fail(.badAnswer("apns-channel-id '\(text)' is not a channel id: \(error)"))
            }
        case .read:
            let parsed = responseBody.withUnsafeBytes { bytes -> Result<BroadcastChannelInfo, ChannelBodyError> in
                do throws(ChannelBodyError) { return .success(try BroadcastChannelMessages.parseInfo(bytes)) } catch {
                    return .failure(error)
                }
            }
            switch parsed {
            case .success(let info): reply.info = info
            case .failure(let error): return fail(.badAnswer(error.description))
            }
        case .list:
            let parsed = responseBody.withUnsafeBytes { bytes -> Result<[BroadcastChannelID], ChannelBodyError> in
                do throws(ChannelBodyError) {
                    return .success(try BroadcastChannelMessages.parseChannelList(bytes))
                } catch { return .failure(error) }
            }
            switch parsed {
            case .success(let channels): reply.channels = channels
            case .failure(let error): return fail(.badAnswer(error.description))
            }
        case .delete:
            break
        }
        finish(.success(reply))
    }
}

import ArgumentParser
import FanfareClient
import FanfareCore
import Foundation

/// `fanfare push`: one Live Activity push from flags; exit 0 only on 200.
public struct PushCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Send one Live Activity push and print APNs' answer.",
        discussion: """
            Exits 0 and prints the apns-id when APNs answers 200. Otherwise prints the status, the reason and \
            what to do about it (drop the token, retry later, fix the configuration, ...) and exits non-zero: \
            1 rejected by APNs, 2 no answer (connection or deadline; a rejected server certificate is \
            reported at once, with the reason), 64 bad flags or files.
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var payload: PayloadOptions

    @Option(help: "The device / activity push token in hex (32 to 100 bytes).")
    var token: String?

    @Option(
        help:
            "Publish on this broadcast channel instead of pushing to a token (iOS 18+; --event update or end, priority 5 or 10, --expiration defaults to 0)."
    )
    var channelId: String?

    @Option(help: "The header a broadcast's request id goes in: apns-request-id or apns-id (Apple's samples disagree).")
    var requestIdHeader: String = BroadcastRequestIDHeader.apnsRequestID.rawValue

    @Flag(help: "Print the encoded JSON payload before sending.")
    var showPayload = false

    public init() {}

    public func run() async throws {
        let job: PushJob
        let client: APNsClient
        do {
            job = try makeJob()
            var configuration = try connection.makeClientConfiguration()
            guard let header = BroadcastRequestIDHeader(rawValue: requestIdHeader) else {
                throw UsageError("--request-id-header '\(requestIdHeader)' must be apns-request-id or apns-id")
            }
            configuration.broadcastRequestIDHeader = header
            client = try APNsClient(configuration: configuration)
        } catch {
            printError("\(error)")
            throw ExitCode(64)
        }
        if showPayload {
            print(String(decoding: job.payload.bytes, as: UTF8.self))
        }
        let result: PushResult
        do {
            result = try await Self.send(job, with: client)
        } catch let rejection as CertificateRejected {
            await client.shutdown()
            printError("cannot connect to APNs securely: \(rejection.reason)")
            printError(
                "what to do: check --endpoint and --ca-file (the server's certificate must chain to a trusted CA and name the host)"
            )
            throw ExitCode(2)
        }
        let connectionError = client.lastConnectionError
        await client.shutdown()
        switch result.disposition {
        case .delivered:
            print("200 delivered \(idLabel): \(result.apnsID)")
        case .rejected(let status, let reason, let rawReason, let action, let timestamp):
            var line =
                "\(status) \(reason?.rawValue ?? rawReason ?? "(no reason given)") \(idLabel): \(result.apnsID) action: \(action.rawValue)"
            if let timestamp { line += " token-inactive-since-ms: \(timestamp)" }
            printError(line)
            printError("what to do: \(Self.advice(for: action))")
            throw ExitCode(1)
        case .failed(let failure):
            var line = "no answer from APNs: \(failure)"
            if let connectionError { line += "; last connection error: \(connectionError)" }
            printError(line)
            throw ExitCode(2)
        }
    }

    private struct CertificateRejected: Error {
        let reason: String
    }

    /// Waits for the push's result, or stops early when a connection rejected the server's certificate:
    /// that is a configuration error, and waiting for the deadline would not fix it.
    private static func send(_ job: PushJob, with client: APNsClient) async throws -> PushResult {
        try await withThrowingTaskGroup(of: PushResult?.self) { group in
            group.addTask { try await client.send(job) }
            group.addTask {
                while !Task.isCancelled {
                    if let rejection = client.certificateRejection {
                        await client.shutdown()  // ends the waiting push (.shutdown), so the group can finish
                        throw CertificateRejected(reason: rejection)
                    }
                    try? await Task.sleep(for: .milliseconds(20))
                }
                return nil
            }
            defer { group.cancelAll() }
            while let outcome = try await group.next() {
                if let result = outcome { return result }
            }
            preconditionFailure("the send task always returns a result")
        }
    }

    /// How the result names the request's id.
    private var idLabel: String { channelId == nil ? "apns-id" : requestIdHeader }

    private func makeJob() throws -> PushJob {
        if let channelId {
            guard token == nil else { throw UsageError("give --token or --channel-id, not both") }
            return try makeBroadcast(channelId)
        }
        guard let tokenText = self.token else {
            throw UsageError("give --token (a push to one activity) or --channel-id (a broadcast)")
        }
        let token: DeviceToken
        do {
            token = try DeviceToken(hex: tokenText)
        } catch {
            throw UsageError("--token: \(error)")
        }
        let content = try payload.makeContent(now: Int64(Date().timeIntervalSince1970))
        let bytes: PushPayload
        do {
            bytes = try PushPayload(liveActivity: content)
        } catch {
            throw UsageError("payload: \(error)")
        }
        var apnsID: PushIdentifier?
        if let text = payload.apnsId {
            guard let parsed = PushIdentifier(text) else {
                throw UsageError("--apns-id '\(text)' is not a UUID (8-4-4-4-12 hex)")
            }
            apnsID = parsed
        }
        return PushJob(
            token: token, payload: bytes, priority: try payload.makePriority(), expiration: payload.expiration,
            collapseID: try payload.validatedCollapseID(), apnsID: apnsID)
    }

    /// A broadcast (apns-spec.md §8.3): `update` or `end` only, priority 5 or 10, `apns-expiration` 0 unless
    /// given, no collapse id, payload up to 5120 bytes.
    private func makeBroadcast(_ text: String) throws -> PushJob {
        let channel: BroadcastChannelID
        do {
            channel = try BroadcastChannelID(pathSafe: text)
        } catch {
            throw UsageError("--channel-id '\(PrintableText.escaping(text, limit: 120))': \(error)")
        }
        guard payload.event != "start" else {
            throw UsageError(
                "--event start: a broadcast cannot start a Live Activity; send a push-to-start to a token with --input-push-channel"
            )
        }
        let priority = try payload.makePriority()
        guard priority != .powerSaving else { throw UsageError("--priority 1: a broadcast's priority must be 5 or 10") }
        guard payload.collapseId == nil else { throw UsageError("--collapse-id is not sent on a broadcast") }
        let content = try payload.makeContent(now: Int64(Date().timeIntervalSince1970))
        let bytes: PushPayload
        do {
            bytes = try PushPayload(liveActivity: content, limit: PayloadLimits.broadcast)
        } catch {
            throw UsageError("payload: \(error)")
        }
        var requestID: PushIdentifier?
        if let text = payload.apnsId {
            guard let parsed = PushIdentifier(text) else {
                throw UsageError("--apns-id '\(text)' is not a UUID (8-4-4-4-12 hex)")
            }
            requestID = parsed
        }
        return PushJob(
            channel: channel, payload: bytes, priority: priority, expiration: payload.expiration ?? 0, apnsID: requestID
        )
    }

    static func advice(for action: PushAction) -> String {
        switch action {
        case .delivered: return "nothing"
        case .dropToken: return "remove this token; it will not work again (unless re-registered after the timestamp)"
        case .retryLater: return "send again later (with back-off), preferably the newest state"
        case .retryOnNewConnection: return "send again on a new connection"
        case .refreshProviderToken: return "mint a new provider token and send again on a new connection"
        case .fixConfiguration: return "fix the request or the configuration; sending it again as-is fails again"
        case .discardMessage: return "this message cannot be delivered; change the payload"
        }
    }
}

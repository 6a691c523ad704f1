import FanfareCore
import FanfareFanout
import FanfareStorage
internal import Foundation
internal import OpenAPIRuntime

/// `/v1/channels/{channel}/broadcast`: a channel's link to an APNs broadcast channel (docs/fanout.md, "the
/// audience planner"). Channel ids are base64 (`/ + =`): they travel in JSON bodies, never in paths.
extension FanfareAPI {
    package func linkBroadcastChannel(
        _ input: Operations.LinkBroadcastChannel.Input
    ) async throws
        -> Operations.LinkBroadcastChannel.Output
    {
        guard case .json(let body) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        return .ok(.init(body: .json(try await link(input.path.channel, body, in: try app(nil)))))
    }

    package func linkBroadcastChannelInApp(
        _ input: Operations.LinkBroadcastChannelInApp.Input
    ) async throws -> Operations.LinkBroadcastChannelInApp.Output {
        guard case .json(let body) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        return .ok(.init(body: .json(try await link(input.path.channel, body, in: try app(input.path.app)))))
    }

    /// The engine of `app` in the environment a request names (production by default, or the app's only one):
    /// broadcast channels, like tokens, belong to one environment.
    func engine(
        of app: ServedApp, _ environment: Components.Schemas.Environment?, field: String = "environment"
    ) throws(ServiceProblem) -> FanoutEngine {
        guard let environment else {
            return app.engine(for: .production) ?? app.primaryEngine
        }
        guard let engine = app.engine(for: APNsEnvironment(environment)) else {
            throw ServiceProblem(
                .unprocessableContent, .environmentNotServed,
                "app \(app.id) does not send in \(environment.rawValue) (no provider key of it may sign there)",
                field: field)
        }
        return engine
    }

    private func link(
        _ channel: String, _ body: Components.Schemas.BroadcastLinkRequest, in app: ServedApp
    ) async throws -> Components.Schemas.BroadcastLink {
        try Validation.channel(channel)
        // Every check before anything changes.
        let given = try checkLinkRequest(body, channel: channel)
        let engine = try engine(of: app, body.environment)
        let existing = try await offPool { try engine.broadcastLink(of: channel) }
        if body.channelId == nil, let existing, existing.createdByUs, existing.storagePolicy == body.storagePolicy {
            // PUT is idempotent: the channel already has the APNs channel it asks for; no second one is made.
            return Self.link(existing)
        }
        if let existing, existing.createdByUs, existing.channelID != body.channelId {
            // Another APNs channel replaces one the service created: that one is deleted first (its subscribers
            // follow its id, not the new one), so replacing never leaves channels behind at APNs.
            do {
                _ = try await engine.unlinkBroadcastChannel(channel)
            } catch {
                throw ErrorMapping.fromFanout(error, retryAfter: retryAfter)
            }
        }
        let link = try await makeLink(
            channel, to: given, storagePolicy: body.storagePolicy, existing: existing, on: engine)
        return Self.link(link)
    }

    /// Refuses a link request the service cannot carry out (the storage policy, a draining service, a channel
    /// id that is not one); returns the APNs channel id it names, if any.
    private func checkLinkRequest(
        _ body: Components.Schemas.BroadcastLinkRequest, channel: String
    ) throws -> BroadcastChannelID? {
        guard body.storagePolicy == 0 || body.storagePolicy == 1 else {
            throw ServiceProblem.badRequest(
                .invalidRequest,
                "storage_policy \(body.storagePolicy): APNs knows 0 (no message stored) and 1 (the most recent stored)",
                field: "storage_policy")
        }
        guard !lifecycle.isDraining else {
            throw ServiceProblem.unavailable(
                .shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        }
        guard let text = body.channelId else { return nil }
        do {
            return try BroadcastChannelID(text)
        } catch {
            throw ServiceProblem.badRequest(
                .invalidChannelId,
                "channel_id is not an APNs broadcast channel id (\(error)): it is the base64 text APNs answered in "
                    + "apns-channel-id, 1 to \(BroadcastChannelID.maximumByteCount) characters", field: "channel_id"
            )
        }
    }

    /// Links `channel` to the APNs channel the request named, or to a new one the engine creates.
    private func makeLink(
        _ channel: String, to given: BroadcastChannelID?, storagePolicy: Int, existing: BroadcastLink?,
        on engine: FanoutEngine
    ) async throws -> BroadcastLink {
        if let channelID = given {
            // The service's own channel given back by id stays the service's to delete.
            let ours = existing?.createdByUs == true && existing?.channelID == channelID.description
            return try await offPool {
                try engine.linkBroadcastChannel(channel, to: channelID, storagePolicy: storagePolicy, createdByUs: ours)
            }
        }
        guard let policy = ChannelStoragePolicy(rawValue: storagePolicy) else {
            throw ServiceProblem.badRequest(
                .invalidRequest, "storage_policy must be 0 or 1", field: "storage_policy")
        }
        do {
            return try await engine.createBroadcastChannel(for: channel, storagePolicy: policy)
        } catch {
            throw ErrorMapping.fromFanout(error, retryAfter: retryAfter)
        }
    }

    package func getBroadcastLink(
        _ input: Operations.GetBroadcastLink.Input
    ) async throws -> Operations.GetBroadcastLink.Output {
        .ok(.init(body: .json(try await broadcastLink(input.path.channel, input.query.environment, in: try app(nil)))))
    }

    package func getBroadcastLinkInApp(
        _ input: Operations.GetBroadcastLinkInApp.Input
    ) async throws -> Operations.GetBroadcastLinkInApp.Output {
        let app = try app(input.path.app)
        return .ok(.init(body: .json(try await broadcastLink(input.path.channel, input.query.environment, in: app))))
    }

    private func broadcastLink(
        _ channel: String, _ environment: Components.Schemas.Environment?, in app: ServedApp
    ) async throws -> Components.Schemas.BroadcastLink {
        try Validation.channel(channel)
        let engine = try engine(of: app, environment)
        let link = try await offPool { try engine.broadcastLink(of: channel) }
        guard let link else { throw Self.noLink(channel) }
        return Self.link(link)
    }

    package func unlinkBroadcastChannel(
        _ input: Operations.UnlinkBroadcastChannel.Input
    ) async throws
        -> Operations.UnlinkBroadcastChannel.Output
    {
        try await unlink(input.path.channel, input.query.environment, in: try app(nil))
        return .noContent(.init())
    }

    package func unlinkBroadcastChannelInApp(
        _ input: Operations.UnlinkBroadcastChannelInApp.Input
    ) async throws -> Operations.UnlinkBroadcastChannelInApp.Output {
        try await unlink(input.path.channel, input.query.environment, in: try app(input.path.app))
        return .noContent(.init())
    }

    private func unlink(
        _ channel: String, _ environment: Components.Schemas.Environment?, in app: ServedApp
    ) async throws {
        try Validation.channel(channel)
        guard !lifecycle.isDraining else {
            throw ServiceProblem.unavailable(
                .shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        }
        let engine = try engine(of: app, environment)
        let removed: BroadcastLink?
        do {
            removed = try await engine.unlinkBroadcastChannel(channel)
        } catch {
            throw ErrorMapping.fromFanout(error, retryAfter: retryAfter)
        }
        guard removed != nil else { throw Self.noLink(channel) }
    }

    static func noLink(_ channel: String) -> ServiceProblem {
        ServiceProblem(
            .notFound, .notFound,
            "channel \(channel) is not linked to an APNs broadcast channel (PUT /v1/channels/\(channel)/broadcast links it)"
        )
    }

    static func link(_ link: BroadcastLink) -> Components.Schemas.BroadcastLink {
        .init(
            channel: link.channel, channelId: link.channelID, storagePolicy: link.storagePolicy,
            createdByUs: link.createdByUs, createdAt: link.createdAt, deleteAfter: link.deleteAfter)
    }

    static func broadcast(_ report: BroadcastReport) -> Components.Schemas.WaveBroadcast {
        .init(
            channelId: report.channelID, subscribers: report.subscribers, outcome: .init(report.outcome),
            failureReason: report.failureReason, requests: report.requests, priority: report.priority,
            downgraded: report.downgraded, resentAfterRestart: report.resentAfterRestart)
    }
}

extension Components.Schemas.WaveBroadcast.OutcomePayload {
    init(_ outcome: BroadcastOutcome) {
        switch outcome {
        case .pending: self = .pending
        case .delivered: self = .delivered
        case .failed: self = .failed
        case .superseded: self = .superseded
        case .expired: self = .expired
        }
    }
}

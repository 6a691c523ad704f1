import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareStorage

extension FanfareAPI {
    package func sendPush(_ input: Operations.SendPush.Input) async throws -> Operations.SendPush.Output {
        guard case .json(let body) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        return .ok(.init(body: .json(try await push(body, in: try app(nil)))))
    }

    package func sendPushInApp(_ input: Operations.SendPushInApp.Input) async throws -> Operations.SendPushInApp.Output
    {
        guard case .json(let body) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        return .ok(.init(body: .json(try await push(body, in: try app(input.path.app)))))
    }

    /// One push to a token of `app`, in the environment the body names (production by default).
    private func push(
        _ body: Components.Schemas.PushRequest, in app: ServedApp
    ) async throws -> Components.Schemas.PushOutcome {
        let engine = try engine(of: app, body.environment)
        guard !lifecycle.isDraining else {
            throw ServiceProblem.unavailable(
                .shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        }
        let token = try Validation.token(body.token, field: "token")
        try Validation.unixSeconds(body.expiration, field: "expiration")
        try Validation.length(body.collapseId, field: "collapse_id", min: 1, max: 64)
        let fields = ContentFields(
            event: LiveActivityEvent(body.event), contentState: body.contentState, alert: body.alert,
            timestamp: body.timestamp, staleDate: body.staleDate, dismissalDate: body.dismissalDate,
            relevanceScore: body.relevanceScore, attributesType: body.attributesType, attributes: body.attributes,
            inputPushToken: body.inputPushToken, inputPushChannel: body.inputPushChannel)
        let content = try fields.content(now: nowSeconds)
        let requested = UpdatePriority(rawValue: (body.priority ?? .auto).rawValue) ?? .auto
        let priority = requested.pushPriority(for: content)
        let result: PushResult
        do {
            result = try await engine.push(
                content, to: token, priority: priority, expiration: body.expiration, collapseID: body.collapseId)
        } catch {
            if case .backPressure = error { metrics.refused("push") }
            var problem = ErrorMapping.fromPublish(error, retryAfter: retryAfter)
            if case .shardElsewhere(let shard) = error, let cluster = app.clusters.first,
                let holder = try? await offPool({ try cluster.holder(ofShard: shard) })
            {
                problem.detail += " (node \(holder) serves it)"
            }
            throw problem
        }
        switch result.disposition {
        case .delivered:
            return .init(status: 200, apnsId: result.apnsID.description, action: .delivered)
        case .rejected(let status, let reason, let rawReason, let action, let timestamp):
            metrics.pushFailed(reason: reason?.rawValue ?? "UnknownReason")
            return .init(
                status: status, apnsId: result.apnsID.description, reason: reason?.rawValue ?? rawReason,
                action: .init(rawValue: action.rawValue) ?? .fixConfiguration, inactiveSinceMs: timestamp)
        case .failed(.shutdown):
            metrics.pushFailed(reason: "Shutdown")
            throw ServiceProblem.unavailable(
                .shuttingDown, "the service shut down before APNs answered", retryAfter: retryAfter)
        case .failed(let failure):
            metrics.pushFailed(reason: Self.failureReason(failure))
            throw ServiceProblem(.gatewayTimeout, .apnsNoAnswer, "APNs did not answer: \(failure)")
        }
    }

    /// The name a local failure has in wave reports' `failed_by_reason`.
    static func failureReason(_ failure: PushFailure) -> String {
        switch failure {
        case .deadlineExceeded: "DeadlineExceeded"
        case .resendLimitReached: "ResendLimitReached"
        case .shutdown: "Shutdown"
        case .unconfirmed: "Unconfirmed"
        }
    }
}

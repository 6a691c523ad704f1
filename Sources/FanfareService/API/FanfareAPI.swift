import FanfareCluster
import FanfareCore
import FanfareFanout
import FanfareRegistry
internal import Foundation
internal import OpenAPIRuntime

/// The API's handlers (`APIProtocol`, generated from the OpenAPI document). The generated server decodes each
/// request into its `Input` and encodes the `Output`; problems are thrown as `ServiceProblem` and rendered by
/// the front door. Blocking registry work runs on `blocking`.
package struct FanfareAPI: APIProtocol {
    let engine: FanoutEngine
    let store: any ServiceStorage
    let blocking: BlockingWork
    let configuration: ServiceConfiguration
    let metrics: ServiceMetrics
    let monitor: WaveMonitor
    let lifecycle: ServiceLifecycleState
    /// On PostgreSQL: this node's leases (nil on SQLite).
    var cluster: ClusterNode? = nil

    var bundleID: String { configuration.fanout.bundleID }
    var environment: APNsEnvironment { configuration.fanout.environment }
    var retryAfter: Int { configuration.retryAfterSeconds }

    var nowSeconds: Int64 { configuration.wallClockMilliseconds() / 1000 }

    /// Runs `body` on the blocking threads; a refused pool (shutting down) is a 503.
    func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        do {
            return try await blocking.run(body)
        } catch let error as ServiceProblem {
            throw error
        } catch let error as FanoutError {
            throw fanoutProblem(error)
        } catch let error as RegistryError {
            throw ErrorMapping.fromRegistry(error)
        } catch {
            throw ServiceProblem.unavailable(.shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        }
    }

    func fanoutProblem(_ error: FanoutError) -> ServiceProblem {
        switch error {
        case .registry(let registry): return ErrorMapping.fromRegistry(registry)
        case .wrongApp(let index, _, _):
            return .badRequest(.invalidRegistration, "tokens[\(index)] is for another app", index: index)
        case .shutDown:
            return .unavailable(.shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        case .tooManyChannels(let limit):
            return .unavailable(
                .tooManyChannels,
                "the engine tracks \(limit) channels in use; channels nothing follows are forgotten at the next maintenance pass",
                retryAfter: 60)
        case .client(let message), .invalidConfiguration(_, let message):
            return ServiceProblem(.internalServerError, ._internal, message)
        case .environmentMismatch, .topicMismatch:
            return ServiceProblem(.internalServerError, ._internal, "\(error)")
        case .invalidBroadcastLink(let message):
            return .badRequest(.invalidRequest, message)
        case .noChannelManagement:
            return ServiceProblem(
                .conflict, .channelManagementNotConfigured,
                "the service cannot create or delete APNs broadcast channels: start it with --channel-management "
                    + "HOST:PORT (APNs' management host and port are the default with real APNs), or link a channel "
                    + "you created with {\"channel_id\": ...}")
        case .broadcast(let management):
            switch management.kind {
            case .timedOut:
                return ServiceProblem(.gatewayTimeout, .apnsNoAnswer, "APNs' channel management API: \(management)")
            case .rejected, .badAnswer:
                return ServiceProblem(.badGateway, .apnsChannelRefused, "APNs' channel management API: \(management)")
            case .transport, .shutDown:
                return ServiceProblem(.badGateway, .apnsChannelUnreachable, "APNs' channel management API: \(management)")
            }
        }
    }

    func publishProblem(_ error: PublishError) -> ServiceProblem {
        switch error {
        case .emptyChannel, .channelNameTooLong:
            return .badRequest(.invalidChannel, "\(error)", field: "channel")
        case .invalidPayload(.tooLarge(let bytes, let limit)):
            var problem = ServiceProblem.badRequest(
                .payloadTooLarge,
                "the APNs payload would be \(bytes) bytes, over APNs' \(limit)-byte limit; shrink content_state, attributes or the alert")
            problem.size = bytes
            problem.limit = limit
            return problem
        case .invalidPayload(.invalid(let message)):
            return .badRequest(.invalidPayload, message)
        case .olderThanCurrent:
            return ServiceProblem(.conflict, .olderThanCurrent, "\(error); send a newer timestamp")
        case .alreadyExpired(let freshUntil, let now):
            return .badRequest(.alreadyExpired, "fresh_until \(freshUntil) is in the past (now \(now))", field: "fresh_until")
        case .freshUntilTooFar(let freshUntil, let now, let limit):
            return .badRequest(
                .freshUntilTooFar,
                "fresh_until \(freshUntil) is more than \(limit / 86_400) days after now (\(now)), longer than APNs keeps a "
                    + "push: it must be UNIX seconds (not milliseconds)", field: "fresh_until")
        case .tooManyUnfinishedWaves, .backPressure:
            return .unavailable(.backPressure, "\(error)", retryAfter: retryAfter)
        case .invalidCollapseID:
            return .badRequest(.invalidRequest, "\(error)", field: "collapse_id")
        case .tooManyChannels:
            return .unavailable(.tooManyChannels, "\(error)", retryAfter: 60)
        case .shutDown:
            return .unavailable(.shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        case .storage:
            // The wave could not be made durable (a full or failing disk): nothing was sent; retry later.
            return .unavailable(.notReady, "\(error)", retryAfter: retryAfter)
        case .sharedStore:
            // The service publishes with publishShared when its engine leases shards: this is a wiring bug.
            return ServiceProblem(.internalServerError, ._internal, "\(error)")
        }
    }

    // MARK: - Operations

    package func getHealth(_ input: Operations.GetHealth.Input) async throws -> Operations.GetHealth.Output {
        .ok(.init(body: .json(.init(status: .ok))))
    }

    package func getReadiness(_ input: Operations.GetReadiness.Input) async throws -> Operations.GetReadiness.Output {
        if lifecycle.isDraining {
            throw ServiceProblem.unavailable(.notReady, "the service is shutting down", retryAfter: retryAfter)
        }
        let open = engine.statistics.client.connectionsOpen
        guard open > 0 else {
            var detail = "no APNs connection is up yet"
            if let error = engine.statistics.lastConnectionError { detail += " (last error: \(error.prefix(200)))" }
            throw ServiceProblem.unavailable(.notReady, detail, retryAfter: retryAfter)
        }
        let tokens = try await offPool { [store] in try store.count() }
        let clusterStatus = cluster.map { node in
            let status = node.status
            return Components.Schemas.ClusterStatus(
                node: status.node, heldShards: status.heldShards, lostShards: status.lostShards, takeovers: status.takeovers,
                shardTokens: engine.heldShardTokens)
        }
        return .ok(.init(body: .json(.init(status: .ready, tokens: tokens, apnsConnections: open, cluster: clusterStatus))))
    }

    package func getMetrics(_ input: Operations.GetMetrics.Input) async throws -> Operations.GetMetrics.Output {
        let tokens = try? await offPool { [store] in try store.count() }
        let clusterFigures = cluster.map { node in
            let status = node.status
            return ServiceMetrics.ClusterFigures(
                heldShards: status.heldShards.count, shardTokens: engine.heldShardTokens, lostShards: status.lostShards.count,
                takeovers: status.takeovers, fencedSessions: status.fencedSessions)
        }
        let text = metrics.render(statistics: engine.statistics, registryTokens: tokens, cluster: clusterFigures)
        return .ok(.init(body: .plainText(HTTPBody(text))))
    }

    package func getOperatorPage(_ input: Operations.GetOperatorPage.Input) async throws -> Operations.GetOperatorPage.Output {
        .ok(.init(body: .html(HTTPBody(OperatorPage.html))))
    }

    package func getOpenAPIDocument(_ input: Operations.GetOpenAPIDocument.Input) async throws
        -> Operations.GetOpenAPIDocument.Output
    {
        .ok(.init(body: .yaml(HTTPBody(OpenAPIDocument.yaml))))
    }
}

/// What the handlers and the front door share about where the service is in its life.
package final class ServiceLifecycleState: Sendable {
    private let draining = StopSignal()
    /// Long-running answers (event streams) end.
    package let stopping = StopSignal()

    package init() {}

    /// Writes are refused from now on (503 shutting_down); reads go on while waves finish.
    package var isDraining: Bool { draining.isSet }
    package func beginDraining() { draining.set() }
}

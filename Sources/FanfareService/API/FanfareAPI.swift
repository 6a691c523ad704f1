import FanfareCluster
import FanfareCore
import FanfareFanout
import FanfareStorage
internal import Foundation
import NIOPosix
internal import OpenAPIRuntime

/// The API's handlers (`APIProtocol`, generated from the OpenAPI document). The generated server decodes each
/// request into its `Input` and encodes the `Output`; problems are thrown as `ServiceProblem` (the engine's
/// errors mapped by `ErrorMapping`) and rendered by `ProblemMiddleware`. Blocking registry work runs on `blocking`.
package struct FanfareAPI: APIProtocol {
    /// The apps served: today's routes act on the default one, `/v1/apps/{app}/...` on the one named.
    let apps: ServedApps
    /// Reads the apps file again (`POST /v1/apps/reload`).
    let reloader: AppReloader
    let store: any ServiceStorage
    let blocking: BlockingWork
    let configuration: ServiceConfiguration
    let metrics: ServiceMetrics
    let monitor: WaveMonitor
    /// The registry's token count for the probes (at most one count at a time, a reading kept a second).
    let census: RegistryCensus
    let lifecycle: ServiceLifecycleState
    /// Wave event streams open (`--max-event-streams`).
    let eventStreams: EventStreamLimiter
    /// Several nodes: the running waves' reports, read once per event interval for every stream of a wave.
    let sharedReports: SharedReportCache

    var retryAfter: Int { configuration.retryAfterSeconds }

    /// The app a request names (nil: today's routes, the default app). An app unknown, or out of the API key's
    /// reach (`apps=` in the keys file), is 404 alike: a key learns nothing of apps it may not use.
    func app(_ id: String?) throws(ServiceProblem) -> ServedApp {
        let app = id.map { apps.app(id: $0) } ?? apps.defaultApp
        guard let app, Principal.current.reaches(app: app.id) else {
            let name = ServiceProblem.printable(String((id ?? "default").prefix(64)))
            throw ServiceProblem(
                .notFound, .notFound, "no app '\(name)' here (GET /v1/apps lists the apps this key reaches)")
        }
        return app
    }

    var nowSeconds: Int64 { configuration.wallClockMilliseconds() / 1000 }

    /// Runs `body` on the blocking threads; a refused pool (shutting down) is a 503.
    func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        do {
            return try await blocking.run(body)
        } catch let error as ServiceProblem {
            throw error
        } catch let error as FanoutError {
            throw ErrorMapping.fromFanout(error, retryAfter: retryAfter)
        } catch let error as RegistryError {
            throw ErrorMapping.fromRegistry(error)
        } catch let error as PublishError {
            throw ErrorMapping.fromPublish(error, retryAfter: retryAfter)
        } catch is NIOThreadPoolError.ThreadPoolInactive {
            throw ServiceProblem.unavailable(
                .shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        }
        // Anything else is the handler's to map, or the error map's (ProblemMiddleware): never "shutting down".
    }

    // MARK: - Operations

    package func getHealth(_ input: Operations.GetHealth.Input) async throws -> Operations.GetHealth.Output {
        .ok(.init(body: .json(.init(status: .ok))))
    }

    package func getReadiness(_ input: Operations.GetReadiness.Input) async throws -> Operations.GetReadiness.Output {
        if lifecycle.isDraining {
            throw ServiceProblem.unavailable(.notReady, "the service is shutting down", retryAfter: retryAfter)
        }
        // Ready once every app has a connection up in every environment it sends in.
        var open = 0
        for app in apps.all {
            for engine in app.engines {
                let statistics = engine.statistics
                guard statistics.client.connectionsOpen > 0 else {
                    var detail = "no APNs connection is up yet"
                    if apps.all.count > 1 || app.engines.count > 1 {
                        detail += " for app \(app.id) (\(engine.configuration.environment))"
                    }
                    if let error = statistics.lastConnectionError { detail += " (last error: \(error.prefix(200)))" }
                    throw ServiceProblem.unavailable(.notReady, detail, retryAfter: retryAfter)
                }
                open += statistics.client.connectionsOpen
            }
        }
        let tokens = try await census.tokens()
        let primary = apps.defaultApp
        let clusterStatus = primary.clusters.first.map { node in
            let status = node.status
            return Components.Schemas.ClusterStatus(
                node: status.node, heldShards: status.heldShards, lostShards: status.lostShards,
                handedOverShards: status.handedOverShards, takeovers: status.takeovers,
                shardTokens: primary.primaryEngine.heldShardTokens)
        }
        let readiness = Components.Schemas.Readiness(
            status: .ready, tokens: tokens, apnsConnections: open, cluster: clusterStatus)
        return .ok(.init(body: .json(readiness)))
    }

    package func getMetrics(_ input: Operations.GetMetrics.Input) async throws -> Operations.GetMetrics.Output {
        let tokens = try? await census.tokens()
        let primary = apps.defaultApp
        let clusterFigures = primary.clusters.first.map { node in
            let status = node.status
            return ServiceMetrics.ClusterFigures(
                heldShards: status.heldShards.count, shardTokens: primary.primaryEngine.heldShardTokens,
                lostShards: status.lostShards.count,
                takeovers: status.takeovers, fencedSessions: status.fencedSessions)
        }
        let served = apps.all
        // One app in one environment: the metrics as they always were; several: each engine's labelled.
        let labelled = served.count > 1 || served.contains { $0.engines.count > 1 }
        let engines = served.flatMap { app in
            app.engines.map { engine in
                ServiceMetrics.EngineFigures(
                    labels: labelled ? [("app", app.id), ("environment", "\(engine.configuration.environment)")] : [],
                    statistics: engine.statistics, keyRefused: engine.providerKeyRefusal != nil)
            }
        }
        let text = metrics.render(engines: engines, registryTokens: tokens, cluster: clusterFigures)
        return .ok(.init(body: .plainText(HTTPBody(text))))
    }

    package func getOperatorPage(
        _ input: Operations.GetOperatorPage.Input
    ) async throws -> Operations.GetOperatorPage.Output {
        .ok(.init(body: .html(HTTPBody(OperatorPage.bytes))))
    }

    package func getOpenAPIDocument(
        _ input: Operations.GetOpenAPIDocument.Input
    ) async throws
        -> Operations.GetOpenAPIDocument.Output
    {
        .ok(.init(body: .yaml(HTTPBody(OpenAPIDocument.yaml))))
    }
}

/// What the handlers and the middlewares share about where the service is in its life.
package final class ServiceLifecycleState: Sendable {
    private let draining = StopSignal()
    /// Long-running answers (event streams) end.
    package let stopping = StopSignal()

    package init() {}

    /// Writes are refused from now on (503 shutting_down); reads go on while waves finish.
    package var isDraining: Bool { draining.isSet }
    package func beginDraining() { draining.set() }
}

import FanfareClient
import FanfareCluster
import FanfareFanout
import FanfarePostgres
import FanfareSQLite
import FanfareStorage
internal import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import NIOPosix
import Logging
internal import OpenAPIRuntime
import ServiceLifecycle
import Synchronization

/// Why the service could not start.
public enum ServiceStartError: Error, Sendable, CustomStringConvertible {
    /// A setting that cannot work (the message says what to do).
    case configuration(String)
    case registry(RegistryError)
    case engine(FanoutError)
    /// Joining the cluster of nodes on the database failed.
    case cluster(String)

    public var description: String {
        switch self {
        case .configuration(let message): return message
        case .registry(let error): return "\(error)"
        case .engine(let error): return "\(error)"
        case .cluster(let message): return message
        }
    }
}

/// `fanfare serve`: the fan-out engine on its registry (a SQLite file, or PostgreSQL) behind the HTTP/JSON API
/// (Hummingbird 2; routes and types generated from the OpenAPI document).
///
/// `init` opens the registry and starts the engine on it (loading every token; the registry is also the
/// engine's `WaveStore`, so unfinished waves of an earlier run resume); `run()` serves until `shutdown()`: then
/// writes are refused (503 + Retry-After), the engine shuts down gracefully (in-flight pushes answered, every
/// unfinished wave checkpointed and left `interrupted`, to resume at the next start with no duplicate), event
/// streams end, the HTTP server stops accepting and closes its connections once their answers are out
/// (`Connection: close` meanwhile), and the registry closes; all within `shutdownTimeout`. A second
/// `shutdown()` stops waiting for the engine.
public final class FanfareServer: Sendable {
    public let configuration: ServiceConfiguration
    /// The apps served, each with an engine per environment.
    package let apps: ServedApps
    package let reloader: AppReloader
    /// The default app's first engine (the only one of a single-app service).
    public var engine: FanoutEngine { apps.defaultApp.primaryEngine }
    /// On PostgreSQL: this node's shard leases and feeds (nil on SQLite).
    public var cluster: ClusterNode? { apps.defaultApp.clusters.first }
    package let store: any ServiceStorage
    package let metrics: ServiceMetrics
    package let lifecycle = ServiceLifecycleState()
    /// What the generated code registered with the router (checked against the document by the tests).
    package let registeredRoutes = RegisteredRoutes()
    private let monitor: WaveMonitor
    private let blocking: BlockingWork
    private let idempotency: IdempotencyGate
    private let logger: Logger
    private let listening = ListeningPort()
    private let shutdownRequests = Atomic<Int>(0)
    private let shutdownStream: AsyncStream<Void>
    private let shutdownContinuation: AsyncStream<Void>.Continuation
    /// Set when the engines' graceful shutdown (on a thread of its own) has returned.
    private let engineStopped = StopSignal()
    /// Set when `stopEngine` began the engines' graceful shutdown (writes may be refused before it).
    private let engineStopping = StopSignal()

    public init(configuration: ServiceConfiguration) throws(ServiceStartError) {
        if let problem = configuration.problem() { throw .configuration(problem) }
        self.configuration = configuration
        logger = configuration.logger
        let store = try Self.openStore(configuration)
        self.store = store
        let metrics = ServiceMetrics(registry: configuration.metricsRegistry)
        self.metrics = metrics
        var served: [ServedApp] = []
        let numbering = WaveNumbering()
        for app in configuration.servedApps {
            do {
                served.append(
                    try AppEngines.start(
                        app, configuration: configuration, store: store, metrics: metrics, numbering: numbering))
            } catch {
                for started in served { AppEngines.stop(started) }
                try? store.close()
                throw error
            }
        }
        apps = ServedApps(served)
        reloader = AppReloader(
            apps: apps, configuration: configuration, store: store, metrics: metrics, numbering: numbering)
        monitor = WaveMonitor(
            logger: configuration.logger, metrics: metrics, wallClockMilliseconds: configuration.wallClockMilliseconds)
        // A fresh engine's waves are the ones it resumed from an earlier run.
        for engine in apps.engines { for wave in engine.waves { monitor.resumed(wave) } }
        blocking = BlockingWork(threads: configuration.blockingThreads)
        idempotency = IdempotencyGate(
            store: store, lifetime: configuration.idempotencyLifetime,
            wallClockMilliseconds: configuration.wallClockMilliseconds)
        (shutdownStream, shutdownContinuation) = AsyncStream.makeStream(of: Void.self)
        _ = try? idempotency.purgeExpired()
    }

    /// The registry the configuration names: a SQLite file, or PostgreSQL.
    private static func openStore(
        _ configuration: ServiceConfiguration
    ) throws(ServiceStartError) -> any ServiceStorage {
        do {
            switch configuration.database {
            case .sqlite(let path):
                return try SQLiteTokenStore(path: path, historyRetention: configuration.ledgerRetention)
            case .postgres(let url):
                var storeLogger = configuration.logger
                storeLogger[metadataKey: "component"] = "postgres"
                // This run of the cluster node, named by every session it opens, this store's first (the
                // ClusterNode takes it from here): a live node ends them all if this one stalls.
                return try PostgresTokenStore(
                    url: url, incarnation: NodeIncarnation(), callTimeout: configuration.databaseTimeout,
                    logger: storeLogger)
            }
        } catch {
            throw .registry(error)
        }
    }

    /// Starts a graceful shutdown (returns at once; `run()` returns when it is done). A second call stops
    /// waiting for the engine's graceful shutdown.
    public func shutdown() {
        // Writes are refused from the moment this returns, not from when the run loop gets to it: a request
        // that arrives a moment later (the test that found it did, on a loaded machine) must not be taken.
        lifecycle.beginDraining()
        if shutdownRequests.add(1, ordering: .acquiringAndReleasing).newValue == 1 {
            shutdownContinuation.yield()
        }
    }

    /// Reads the apps file again and applies it (SIGHUP): what changed, or why nothing did. Blocks while engines
    /// stop and start.
    public func reloadApps() -> Result<[String], any Error> {
        do { return .success(try reloader.reload()) } catch { return .failure(error) }
    }

    /// The port the server listens on, once it does (nil if it stopped before, e.g. the address was in use).
    public func listeningPort() async -> Int? { await listening.value() }

    /// Serves until a shutdown completes. Throws if the server cannot listen. Call once.
    public func run() async throws {
        let router = Router(context: ServiceRequestContext.self)
        let middlewares = MiddlewareStack(
            keyring: configuration.apiKeys, maxBodyBytes: configuration.maxBodyBytes,
            retryAfter: configuration.retryAfterSeconds, lifecycle: lifecycle, idempotency: idempotency,
            blocking: blocking, metrics: metrics, logger: logger)
        middlewares.addShared(to: router)
        let api = FanfareAPI(
            apps: apps, reloader: reloader, store: store, blocking: blocking, configuration: configuration,
            metrics: metrics, monitor: monitor, census: makeCensus(), lifecycle: lifecycle,
            eventStreams: EventStreamLimiter(limit: configuration.maxEventStreams),
            sharedReports: makeSharedReports())
        let transport = FastPathTransport(
            router: router, middlewares: middlewares, api: api, recorded: registeredRoutes)
        try api.registerHandlers(on: transport)
        var httpLogger = logger
        httpLogger[metadataKey: "component"] = "http"
        let listening = self.listening
        let maxBodyBytes = configuration.maxBodyBytes
        let http = HTTPServerBuilder.http1(
            configuration: .init(
                additionalChannelHandlers: [ExpectContinueHandler(maxBodyBytes: maxBodyBytes)],
                idleTimeout: .seconds(75)))
        let application = Application(
            router: router,
            server: try configuration.tls.map { try .tls(http, tlsConfiguration: $0.configuration) } ?? http,
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.port), serverName: nil,
                availableConnectionsDelegate: .maximum(configuration.maxAPIConnections, logger: httpLogger)),
            onServerRunning: { channel in listening.resolve(channel.localAddress?.port) }, logger: httpLogger)
        let group = ServiceGroup(
            configuration: .init(
                services: [application], gracefulShutdownSignals: [], cancellationSignals: [], logger: httpLogger))

        let monitorTask = Task { [self] in await self.monitorLoop() }
        let serving = Task { try await group.run() }
        let shutdownTask = Task { [self] in
            for await _ in shutdownStream { break }
            guard !Task.isCancelled else { return }
            let deadline = ContinuousClock.now + configuration.shutdownTimeout
            await stopEngine(until: deadline)
            lifecycle.stopping.set()
            await group.triggerGracefulShutdown()
            // Requests get what is left of the timeout (at least a second) to finish; then connections still open
            // (a client that never sends its body) are closed.
            try? await Task.sleep(until: max(deadline, ContinuousClock.now + .seconds(1)))
            guard !Task.isCancelled else { return }
            logger.warning("requests still open after the shutdown timeout: closing their connections")
            serving.cancel()
        }
        defer {
            monitorTask.cancel()
            shutdownTask.cancel()
            shutdownContinuation.finish()
            listening.resolve(nil)
        }
        do {
            try await withTaskCancellationHandler {
                try await serving.value
            } onCancel: {
                serving.cancel()
            }
        } catch {
            lifecycle.stopping.set()
            await finish()
            throw error
        }
        await finish()
    }

    /// Writes are refused from now on; the engine shuts down gracefully (in-flight pushes answered, a final
    /// checkpoint of every unfinished wave) on a thread of its own, waited for until `deadline` or a second
    /// `shutdown()`. Waves are not waited for: they resume at the next start.
    private func stopEngine(until deadline: ContinuousClock.Instant) async {
        lifecycle.beginDraining()
        engineStopping.set()
        let engines = apps.engines
        let unfinished = engines.reduce(0) { $0 + $1.statistics.unfinishedWaves }
        logger.notice(
            "shutting down: writes are refused, unfinished waves are checkpointed and resume at the next start",
            metadata: [
                "unfinished_waves": "\(unfinished)",
                "timeout_s": "\(configuration.shutdownTimeout.components.seconds)",
            ])
        let served = apps.all
        let stopped = engineStopped
        let thread = Thread {
            // Every engine drains at once: one app's waves do not wait for another's.
            let group = DispatchGroup()
            for engine in served.flatMap(\.engines) {
                DispatchQueue.global().async(group: group) { engine.shutdown() }
            }
            group.wait()
            // Then the leases go at once, so other nodes resume this node's waves from its last checkpoints.
            for node in served.flatMap(\.clusters) { node.stop() }
            stopped.set()
        }
        thread.name = "fanfare-engine-shutdown"
        thread.start()
        while !stopped.isSet && ContinuousClock.now < deadline && shutdownRequests.load(ordering: .acquiring) < 2 {
            try? await Task.sleep(for: .milliseconds(20))
        }
        if !stopped.isSet {
            logger.warning(
                """
                the engine's graceful shutdown did not finish in time: unfinished waves resume from their last durable \
                checkpoint, and pushes sent since may be sent again
                """)
        }
    }

    /// The registry's token count for the probes, counted on the blocking threads.
    private func makeSharedReports() -> SharedReportCache {
        SharedReportCache(interval: configuration.eventInterval) { [blocking, engine] id in
            (try? await blocking.run { try engine.report(id: id) }) ?? nil
        }
    }

    private func makeCensus() -> RegistryCensus {
        let retryAfter = configuration.retryAfterSeconds
        return RegistryCensus { [blocking, store] in
            do {
                return try await blocking.run { try store.count() }
            } catch is NIOThreadPoolError.ThreadPoolInactive {
                throw ServiceProblem.unavailable(
                    .shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
            }
        }
    }

    /// After the HTTP server stopped: the engine (a no-op after `stopEngine`) and the registry.
    private func finish() async {
        if engineStopping.isSet && !engineStopped.isSet {
            // The engine may still be writing its last checkpoints: the registry stays open until the process
            // exits (SQLite keeps every committed transaction; the next start resumes from what is there).
            logger.warning("stopping while the engine still shuts down; the registry is left to the process exit")
        } else {
            for app in apps.all {
                for engine in app.engines {
                    await engine.shutdown()
                    monitor.check(engine: engine)
                }
                for node in app.clusters { await node.stop() }
            }
            monitor.stopped()
            do {
                try store.close()
            } catch {
                logger.error("closing the registry failed", metadata: ["error": "\(error)"])
            }
        }
        await blocking.shutdown()
        logger.notice("stopped")
    }

    private func monitorLoop() async {
        var lastPurge = ContinuousClock.now
        var lastSharedCheck = ContinuousClock.now
        while !Task.isCancelled {
            for engine in apps.engines { monitor.check(engine: engine) }
            // Several nodes: the waves published here, from the store once a second (their shards run anywhere).
            let shared = monitor.sharedWaves
            if !shared.isEmpty, ContinuousClock.now - lastSharedCheck >= .seconds(1) {
                lastSharedCheck = ContinuousClock.now
                let engine = self.engine
                let reports = (try? await blocking.run { shared.compactMap { try? engine.report(id: $0) } }) ?? []
                for report in reports { monitor.sharedProgress(report) }
            }
            if ContinuousClock.now - lastPurge > .seconds(3600) {
                lastPurge = ContinuousClock.now
                let gate = idempotency
                _ = try? await blocking.run { try gate.purgeExpired() }
            }
            try? await Task.sleep(for: .milliseconds(100))
        }
    }
}

/// The port, once the server listens (or nil when it will not).
final class ListeningPort: Sendable {
    private struct State {
        var resolved = false
        var port: Int?
        var waiters: [CheckedContinuation<Int?, Never>] = []
    }
    private let state = Mutex(State())

    func resolve(_ port: Int?) {
        let waiters = state.withLock { state -> [CheckedContinuation<Int?, Never>] in
            guard !state.resolved else { return [] }
            state.resolved = true
            state.port = port
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: port) }
    }

    func value() async -> Int? {
        await withCheckedContinuation { continuation in
            let ready: Int?? = state.withLock { state in
                if state.resolved { return .some(state.port) }
                state.waiters.append(continuation)
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

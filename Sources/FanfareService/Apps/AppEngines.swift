import FanfareCluster
import FanfareFanout
import FanfarePostgres
import FanfareStorage
import Logging

/// Starts and stops the engines of one app: an engine per environment on the service's registry, each with its
/// environment's client and the service's template for everything else, and on PostgreSQL its cluster node.
enum AppEngines {
    static func start(
        _ app: ServiceApp, configuration: ServiceConfiguration, store: any ServiceStorage, metrics: ServiceMetrics,
        numbering: WaveNumbering
    ) throws(ServiceStartError) -> ServedApp {
        var engines: [FanoutEngine] = []
        var clusters: [ClusterNode] = []
        func stopStarted() {
            for node in clusters { node.stop() }
            for engine in engines { engine.shutdown() }
        }
        for environment in app.environments {
            var fanout = engineConfiguration(app, environment, configuration: configuration, metrics: metrics)
            fanout.waveNumbering = numbering
            // PostgreSQL: one node of a cluster (of one, if alone): the engine sends the shards this node leases.
            let shared = store as? PostgresTokenStore
            var cluster: ClusterConfiguration?
            if shared != nil {
                let chosen =
                    configuration.cluster
                    ?? ClusterConfiguration(
                        nodeID: ClusterConfiguration.defaultNodeID(), shardCount: fanout.client.workerCount)
                fanout.leasedShards = true
                fanout.client.workerCount = chosen.shardCount
                cluster = chosen
            }
            let engine: FanoutEngine
            do {
                engine = try FanoutEngine(configuration: fanout, store: store, waveStore: store)
            } catch {
                stopStarted()
                throw .engine(error)
            }
            engines.append(engine)
            if let shared, let cluster, case .postgres(let url) = configuration.database {
                var clusterLogger = configuration.logger
                clusterLogger[metadataKey: "component"] = "cluster"
                do {
                    let node = try ClusterNode(
                        url: url, engine: engine, configuration: cluster, logger: clusterLogger,
                        checkpointStore: shared, onLeaseLost: configuration.onLeaseLost ?? { _ in })
                    node.start()
                    clusters.append(node)
                } catch {
                    stopStarted()
                    throw .cluster("\(error)")
                }
            }
        }
        return ServedApp(app: app, engines: engines, clusters: clusters)
    }

    /// Stops an app's engines and cluster nodes (a start that failed part-way, a reload that dropped the app).
    static func stop(_ app: ServedApp) {
        for engine in app.engines { engine.shutdown() }
        for node in app.clusters { node.stop() }
    }

    /// The service's template with this app's client, bundle id, environment and channel management.
    private static func engineConfiguration(
        _ app: ServiceApp, _ environment: ServiceApp.Environment, configuration: ServiceConfiguration,
        metrics: ServiceMetrics
    ) -> FanoutConfiguration {
        var fanout = configuration.fanout
        fanout.client = environment.client
        // As `FanoutConfiguration.init` does: autoscaled connections unless the client chose a count.
        if !environment.client.connectionCountChosen { fanout.client.autoscaling = .standard }
        fanout.bundleID = app.bundleID
        fanout.environment = environment.environment
        fanout.channelManagement = environment.channelManagement
        var logger = configuration.logger
        logger[metadataKey: "component"] = "fanout"
        if configuration.servedApps.count > 1 || app.environments.count > 1 {
            logger[metadataKey: "app"] = "\(app.id)"
            logger[metadataKey: "environment"] = "\(environment.environment)"
        }
        fanout.logger = logger
        fanout.metricsFactory = metrics.factory
        // At a shutdown the engine waits for the pushes in flight for half of the service's shutdown timeout:
        // the rest is for the last checkpoints and the requests still open.
        fanout.shutdownDrainTimeout = configuration.shutdownTimeout / 2
        return fanout
    }
}

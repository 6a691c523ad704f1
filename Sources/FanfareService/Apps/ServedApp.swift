import FanfareCluster
import FanfareFanout
import FanfareStorage

/// An app the running service sends for: an engine per environment on the shared registry (one registry
/// transaction per batch and one publication per publish across them, `FanoutEngine.register(_:on:)`).
package final class ServedApp: Sendable {
    package let app: ServiceApp
    /// In the app's environment order.
    package let engines: [FanoutEngine]
    /// On PostgreSQL: each engine's node in the cluster (same order; empty on SQLite).
    package let clusters: [ClusterNode]

    init(app: ServiceApp, engines: [FanoutEngine], clusters: [ClusterNode]) {
        precondition(engines.count == app.environments.count, "an engine per environment")
        self.app = app
        self.engines = engines
        self.clusters = clusters
    }

    package var id: String { app.id }
    package var bundleID: String { app.bundleID }
    package var environments: [APNsEnvironment] { engines.map(\.configuration.environment) }

    package func engine(for environment: APNsEnvironment) -> FanoutEngine? {
        engines.first { $0.configuration.environment == environment }
    }

    /// The engine that serves a request naming no environment: production when the app sends there, else its
    /// only one.
    package var primaryEngine: FanoutEngine { engines[0] }
}

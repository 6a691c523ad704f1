import CoreMetrics
import FanfareFanout
import Metrics
import Prometheus
import Synchronization

/// The service's metrics (swift-metrics, exported by swift-prometheus at GET /metrics). Totals the engine
/// keeps (pushes, connections, queue depth, ...) are read at scrape time and turned into counters and gauges;
/// per-request and per-wave values are recorded as they happen.
///
/// Names (Prometheus conventions):
/// - `fanfare_pushes_total{outcome}`: push attempts by result (`delivered`, `rejected` by APNs, `failed` locally),
///   from the client's totals (nothing is added to the per-push path); `fanfare_push_failures_total{reason}`:
///   targeted tokens of completed waves and single pushes that did not end delivered, by APNs reason or local
///   cause; `fanfare_pushes_in_flight`, `fanfare_pushes_pending`, `fanfare_push_resends_total`
/// - `fanfare_apns_connections_open`, `fanfare_apns_connections_draining`, `fanfare_apns_connections_opened_total`
///   (attempts), `fanfare_apns_connections_closed_total`, `fanfare_apns_reconnect_backoffs_total`,
///   `fanfare_apns_certificate_rejections_total`; the autoscaler's `fanfare_apns_connections_target` (connections
///   the workers aim at) and `fanfare_apns_connection_scaling_total{decision}` (`up`, `down`, `failed`: a new
///   connection that failed before it proved usable)
/// - `fanfare_waves_running`, `fanfare_waves_published_total`, `fanfare_waves_completed_total`,
///   `fanfare_waves_resumed_total` (unfinished waves of an earlier run, resumed at start),
///   `fanfare_pushes_resent_after_restart_total` (a completed wave's `resentAfterRestart`),
///   `fanfare_wave_outcomes_total{outcome}` (tokens of completed waves), `fanfare_broadcasts_total{outcome}`
///   (the broadcast part of completed waves on linked channels), `fanfare_wave_makespan_seconds` and
///   `fanfare_wave_content_age_seconds` (histograms, per completed wave)
/// - `fanfare_registry_tokens`, `fanfare_channels_in_use`, `fanfare_invalid_tokens_held`,
///   `fanfare_invalid_tokens_removed_total` (from the engine), `fanfare_engine_queue_depth`,
///   `fanfare_backpressure_refusals_total{operation}`
/// - `fanfare_http_requests_total{route,method,status}`, `fanfare_http_request_duration_seconds{route,method}`
/// - Several nodes (PostgreSQL): `fanfare_cluster_shards_held`, `fanfare_cluster_shard_tokens` (tokens in the held
///   shards), `fanfare_cluster_shards_lost` (leases another node took from this one: it exits at once),
///   `fanfare_cluster_takeovers_total` (expired leases this node took over), `fanfare_cluster_sessions_fenced_total`
///   (database sessions of stalled nodes this node ended)
package final class ServiceMetrics: Sendable {
    package let registry: PrometheusCollectorRegistry
    package let factory: PrometheusMetricsFactory

    private struct Cumulative {
        var values: [String: Int] = [:]
    }
    /// The last totals exported, so each scrape adds the difference.
    private let exported = Mutex(Cumulative())

    private let wavesPublished: CoreMetrics.Counter
    private let wavesCompleted: CoreMetrics.Counter
    private let wavesResumed: CoreMetrics.Counter
    private let resentAfterRestart: CoreMetrics.Counter
    private let makespan: Recorder
    private let contentAge: Recorder

    package static let durationBuckets: [Duration] = [
        .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
        .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .seconds(2), .seconds(5), .seconds(10),
    ]
    package static let waveSecondsBuckets: [Double] = [
        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
    ]

    package init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets["fanfare_http_request_duration_seconds"] = Self.durationBuckets
        factory.valueHistogramBuckets["fanfare_wave_makespan_seconds"] = Self.waveSecondsBuckets
        factory.valueHistogramBuckets["fanfare_wave_content_age_seconds"] = Self.waveSecondsBuckets
        self.factory = factory
        wavesPublished = CoreMetrics.Counter(label: "fanfare_waves_published_total", factory: factory)
        wavesCompleted = CoreMetrics.Counter(label: "fanfare_waves_completed_total", factory: factory)
        wavesResumed = CoreMetrics.Counter(label: "fanfare_waves_resumed_total", factory: factory)
        resentAfterRestart = CoreMetrics.Counter(label: "fanfare_pushes_resent_after_restart_total", factory: factory)
        makespan = Recorder(label: "fanfare_wave_makespan_seconds", aggregate: true, factory: factory)
        contentAge = Recorder(label: "fanfare_wave_content_age_seconds", aggregate: true, factory: factory)
    }

    // MARK: - As things happen

    package func requestServed(route: String, method: String, status: Int, duration: Duration) {
        CoreMetrics.Counter(
            label: "fanfare_http_requests_total",
            dimensions: [("route", route), ("method", method), ("status", "\(status)")],
            factory: factory
        ).increment()
        Metrics.Timer(
            label: "fanfare_http_request_duration_seconds", dimensions: [("route", route), ("method", method)],
            factory: factory
        )
        .recordNanoseconds(Self.nanoseconds(duration))
    }

    package func waveStarted() { wavesPublished.increment() }

    package func waveResumed() { wavesResumed.increment() }

    package func waveCompleted(_ report: WaveReport, contentAgeSeconds: Double) {
        wavesCompleted.increment()
        if let makespan = report.makespan { self.makespan.record(Double(makespan) / 1e9) }
        contentAge.record(max(0, contentAgeSeconds))
        if report.resentAfterRestart > 0 { resentAfterRestart.increment(by: Int64(report.resentAfterRestart)) }
        for (outcome, count) in [
            ("delivered", report.delivered), ("failed", report.failed), ("superseded", report.superseded),
            ("expired", report.expired), ("invalidated", report.invalidated),
        ] where count > 0 {
            CoreMetrics.Counter(
                label: "fanfare_wave_outcomes_total", dimensions: [("outcome", outcome)], factory: factory
            )
            .increment(by: Int64(count))
        }
        for (reason, count) in report.failedByReason where count > 0 { pushFailed(reason: reason, count: count) }
        if let broadcast = report.broadcast {
            CoreMetrics.Counter(
                label: "fanfare_broadcasts_total", dimensions: [("outcome", "\(broadcast.outcome)")], factory: factory
            )
            .increment()
        }
    }

    /// A push that did not end delivered (a wave's token at completion, or a single push's answer).
    package func pushFailed(reason: String, count: Int = 1) {
        CoreMetrics.Counter(label: "fanfare_push_failures_total", dimensions: [("reason", reason)], factory: factory)
            .increment(by: Int64(count))
    }

    package func refused(_ operation: String) {
        CoreMetrics.Counter(
            label: "fanfare_backpressure_refusals_total", dimensions: [("operation", operation)], factory: factory
        ).increment()
    }

    // MARK: - At scrape time

    /// This node's part of a cluster at scrape time (nil: not one).
    package struct ClusterFigures: Sendable {
        package var heldShards: Int
        package var shardTokens: Int
        package var lostShards: Int
        package var takeovers: Int
        package var fencedSessions: Int
        package init(heldShards: Int, shardTokens: Int, lostShards: Int, takeovers: Int, fencedSessions: Int) {
            (self.heldShards, self.shardTokens, self.lostShards, self.takeovers) = (
                heldShards, shardTokens, lostShards, takeovers
            )
            self.fencedSessions = fencedSessions
        }
    }

    /// Exports the engine's totals and gauges, then renders every metric in the text format.
    /// One engine's figures for `render`, with the labels its series carry (none for a single engine).
    package struct EngineFigures {
        package var labels: [(String, String)]
        package var statistics: FanoutStatistics
        /// APNs refused the newest provider key (the one before it signs).
        package var keyRefused = false

        package init(labels: [(String, String)], statistics: FanoutStatistics, keyRefused: Bool = false) {
            self.labels = labels
            self.statistics = statistics
            self.keyRefused = keyRefused
        }
    }

    package func render(
        engines: [EngineFigures], registryTokens: Int?, cluster: ClusterFigures? = nil
    ) -> String {
        for engine in engines { renderGauges(engine) }
        if let registryTokens { gauge("fanfare_registry_tokens", registryTokens) }
        if let cluster {
            gauge("fanfare_cluster_shards_held", cluster.heldShards)
            gauge("fanfare_cluster_shard_tokens", cluster.shardTokens)
            gauge("fanfare_cluster_shards_lost", cluster.lostShards)
        }
        var totals: [(String, [(String, String)], Int)] = engines.flatMap(Self.totals)
        if let cluster {
            totals.append(("fanfare_cluster_takeovers_total", [], cluster.takeovers))
            totals.append(("fanfare_cluster_sessions_fenced_total", [], cluster.fencedSessions))
        }
        exported.withLock { exported in
            for (label, dimensions, value) in totals {
                let key = label + dimensions.map { "|\($0.0)=\($0.1)" }.joined()
                let delta = value - exported.values[key, default: 0]
                guard delta > 0 else { continue }
                exported.values[key] = value
                CoreMetrics.Counter(label: label, dimensions: dimensions, factory: factory).increment(by: Int64(delta))
            }
        }
        return registry.emitToString()
    }

    private func renderGauges(_ engine: EngineFigures) {
        let statistics = engine.statistics
        let client = statistics.client
        let labels = engine.labels
        gauge("fanfare_pushes_in_flight", client.inFlight, labels)
        gauge("fanfare_pushes_pending", client.pending, labels)
        gauge("fanfare_apns_connections_open", client.connectionsOpen, labels)
        gauge("fanfare_apns_connections_draining", client.connectionsDraining, labels)
        gauge("fanfare_apns_connections_target", client.connectionsTarget, labels)
        gauge("fanfare_waves_running", statistics.unfinishedWaves, labels)
        gauge("fanfare_channels_in_use", statistics.channelsInUse, labels)
        gauge("fanfare_invalid_tokens_held", statistics.invalidTokensHeld, labels)
        gauge("fanfare_engine_queue_depth", statistics.queuedCommands, labels)
        gauge("fanfare_provider_key_refused", engine.keyRefused ? 1 : 0, labels)
    }

    /// An engine's counters as (name, labels, total).
    private static func totals(_ engine: EngineFigures) -> [(String, [(String, String)], Int)] {
        let client = engine.statistics.client
        let labels = engine.labels
        var totals: [(String, [(String, String)], Int)] = [
            ("fanfare_push_resends_total", labels, client.resends),
            ("fanfare_apns_connections_opened_total", labels, client.connectionsOpened),
            ("fanfare_apns_connections_closed_total", labels, client.connectionsClosed),
            ("fanfare_apns_reconnect_backoffs_total", labels, client.reconnectBackoffs),
            ("fanfare_apns_certificate_rejections_total", labels, client.certificateRejections),
            ("fanfare_apns_connection_scaling_total", labels + [("decision", "up")], client.scaleUps),
            ("fanfare_apns_connection_scaling_total", labels + [("decision", "down")], client.scaleDowns),
            ("fanfare_apns_connection_scaling_total", labels + [("decision", "failed")], client.scaleUpFailures),
        ]
        for (outcome, count) in [
            ("delivered", client.delivered), ("rejected", client.rejected), ("failed", client.failed),
        ] {
            totals.append(("fanfare_pushes_total", labels + [("outcome", outcome)], count))
        }
        return totals
    }

    private func gauge(_ label: String, _ value: Int, _ dimensions: [(String, String)] = []) {
        Gauge(label: label, dimensions: dimensions, factory: factory).record(value)
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}

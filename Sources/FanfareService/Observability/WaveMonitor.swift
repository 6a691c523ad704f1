import FanfareClient
import FanfareFanout
import Logging
import Synchronization

/// Watches what the log and the metrics report over time: waves published through the API or resumed at start
/// (one line when a wave starts or resumes, one when it completes, with its counts; makespan and content-age
/// histograms; one per wave left unfinished at shutdown), and APNs
/// connection events (from the client's totals: one line per connection that came up or ended).
package final class WaveMonitor: Sendable {
    private let logger: Logger
    private let metrics: ServiceMetrics
    private let wallClockMilliseconds: @Sendable () -> Int64
    private struct State {
        var running: [Wave] = []
        /// Several nodes: waves published through this node, followed in the shared store (no node's memory
        /// has a whole one). This node logs and counts their completion; the others do not, so the cluster's
        /// metrics add up.
        var shared: [UInt64: String] = [:]
        /// Per engine (an app in one environment): its connection counts at the last check.
        var connections: [ObjectIdentifier: ConnectionCounts] = [:]
        /// Per engine: the provider key refusal last logged.
        var keyRefusals: [ObjectIdentifier: ProviderKeyRotation.Refusal] = [:]
    }
    private let state = Mutex(State())

    package init(logger: Logger, metrics: ServiceMetrics, wallClockMilliseconds: @escaping @Sendable () -> Int64) {
        self.logger = logger
        self.metrics = metrics
        self.wallClockMilliseconds = wallClockMilliseconds
    }

    package func started(_ wave: Wave, priority: UpdatePriority) {
        state.withLock { $0.running.append(wave) }
        metrics.waveStarted()
        logger.info(
            "wave started",
            metadata: [
                "wave": "\(wave.id)", "channel": "\(wave.channel)", "event": "\(wave.event.rawValue)",
                "timestamp": "\(wave.timestamp)", "priority": "\(priority.rawValue)",
            ])
    }

    /// Several nodes: a wave this node published into the shared store.
    package func publishedShared(id: UInt64, channel: String, event: String, timestamp: Int64, priority: UpdatePriority)
    {
        state.withLock { $0.shared[id] = channel }
        metrics.waveStarted()
        logger.info(
            "wave started",
            metadata: [
                "wave": "\(id)", "channel": "\(channel)", "event": "\(event)", "timestamp": "\(timestamp)",
                "priority": "\(priority.rawValue)", "shared": "true",
            ])
    }

    /// The shared waves this node published and has not seen complete.
    package var sharedWaves: [UInt64] { state.withLock { Array($0.shared.keys) } }

    /// A shared wave's report from the store: once complete, logged and counted (once).
    package func sharedProgress(_ report: WaveReport) {
        guard report.state == .complete, state.withLock({ $0.shared.removeValue(forKey: report.id) }) != nil else {
            return
        }
        completed(report)
    }

    /// A wave the engine resumed at start (from an earlier run on the same registry).
    package func resumed(_ wave: Wave) {
        state.withLock { $0.running.append(wave) }
        metrics.waveResumed()
        let report = wave.report
        logger.notice(
            "wave resumed",
            metadata: [
                "wave": "\(report.id)", "channel": "\(report.channel)", "event": "\(report.event.rawValue)",
                "timestamp": "\(report.timestamp)", "restarts": "\(report.restarts)", "targeted": "\(report.targeted)",
                "accounted": "\(report.accounted)",
            ])
    }

    /// At the end (after the engine shut down): one line per wave left unfinished, which the next start resumes.
    package func stopped() {
        let left = state.withLock { state in state.running.filter { !$0.isComplete } }
        for wave in left {
            let report = wave.report
            logger.notice(
                "wave interrupted: it resumes at the next start",
                metadata: [
                    "wave": "\(report.id)", "channel": "\(report.channel)", "state": "\(report.state.rawValue)",
                    "targeted": "\(report.targeted)", "accounted": "\(report.accounted)",
                    "delivered": "\(report.delivered)",
                ])
        }
    }

    private func completed(_ report: WaveReport) {
        let nowSeconds = Double(wallClockMilliseconds()) / 1000
        metrics.waveCompleted(report, contentAgeSeconds: nowSeconds - Double(report.timestamp))
        var metadata: Logger.Metadata = [
            "wave": "\(report.id)", "channel": "\(report.channel)", "targeted": "\(report.targeted)",
            "delivered": "\(report.delivered)", "superseded": "\(report.superseded)", "failed": "\(report.failed)",
            "expired": "\(report.expired)", "invalidated": "\(report.invalidated)",
        ]
        if let makespan = report.makespan { metadata["makespan_ms"] = "\(makespan / 1_000_000)" }
        if report.restarts > 0 {
            metadata["restarts"] = "\(report.restarts)"
            metadata["resent_after_restart"] = "\(report.resentAfterRestart)"
        }
        if !report.failedByReason.isEmpty {
            metadata["failed_by_reason"] = .dictionary(report.failedByReason.mapValues { .stringConvertible($0) })
        }
        logger.info("wave complete", metadata: metadata)
    }

    private struct ConnectionCounts {
        var established = 0
        var closed = 0
        var certificateRejections = 0
    }

    /// One pass: completed waves and one engine's connection changes. Called every ~100 ms and once at the end.
    package func check(engine: FanoutEngine) {
        let completed: [Wave] = state.withLock { state in
            let done = state.running.filter(\.isComplete)
            state.running.removeAll(where: \.isComplete)
            return done
        }
        for wave in completed { self.completed(wave.report) }
        let statistics = engine.statistics
        let client = statistics.client
        let (newlyUp, newlyClosed, newRejections) = state.withLock { state in
            let key = ObjectIdentifier(engine)
            let last = state.connections[key] ?? ConnectionCounts()
            state.connections[key] = ConnectionCounts(
                established: client.connectionsEstablished, closed: client.connectionsClosed,
                certificateRejections: client.certificateRejections)
            return (
                client.connectionsEstablished - last.established, client.connectionsClosed - last.closed,
                client.certificateRejections - last.certificateRejections
            )
        }
        var logger = self.logger
        logger[metadataKey: "apns"] = "\(engine.configuration.client.host):\(engine.configuration.client.port)"
        logger[metadataKey: "topic"] = "\(engine.configuration.client.topic)"
        logger[metadataKey: "environment"] = "\(engine.configuration.environment)"
        for _ in 0..<max(0, min(newlyUp, 100)) {
            logger.info("apns connection up", metadata: ["open": "\(client.connectionsOpen)"])
        }
        for _ in 0..<max(0, min(newlyClosed, 100)) {
            var metadata: Logger.Metadata = [
                "open": "\(client.connectionsOpen)", "draining": "\(client.connectionsDraining)",
            ]
            if let error = statistics.lastConnectionError { metadata["last_error"] = "\(error)" }
            logger.notice("apns connection closed", metadata: metadata)
        }
        if let refusal = engine.providerKeyRefusal,
            state.withLock({ $0.keyRefusals.updateValue(refusal, forKey: ObjectIdentifier(engine)) }) != refusal
        {
            logger.error(
                "apns refused the new provider key: the previous key signs again; check the key's id, team and environments",
                metadata: ["key_id": "\(refusal.keyID)", "reason": "\(refusal.reason)"])
        }
        if newRejections > 0 {
            logger.error(
                "apns server certificate rejected: check --endpoint and --ca-file",
                metadata: ["rejections": "\(client.certificateRejections)"])
        }
    }
}

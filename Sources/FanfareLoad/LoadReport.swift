import Foundation
import Histogram

/// The summary of a load run, in h2load's spirit: counts by outcome, rate, latency percentiles.
public struct LoadReport: Sendable {
    /// Pushes handed to the client.
    public let pushes: Int
    /// Pushes with a result (always equals `pushes` once the client has shut down).
    public let completed: Int
    public let seconds: Double
    public let counts: [LoadOutcome: Int]
    /// Submission (or scheduled time) to answer, in microseconds.
    public let latencyMicroseconds: Histogram<UInt64>
    public let resends: Int
    public let connectionsOpened: Int
    /// The most connections the workers kept at once (the autoscaler's highest target, or the fixed count),
    /// and the autoscaler's decisions.
    public var connectionsPeak = 0
    public var scaleUps = 0
    public var scaleDowns = 0
    public let interrupted: Bool
    public let connectionError: String?
    /// Why the run ended before its plan was done (e.g. no connection could be made), if it did.
    public let stopReason: String?

    public var delivered: Int { counts[.delivered] ?? 0 }
    public var pushesPerSecond: Double { seconds > 0 ? Double(completed) / seconds : 0 }

    public func percentile(_ p: Double) -> Double {
        Double(latencyMicroseconds.valueAtPercentile(p)) / 1000
    }

    /// Rows sorted by count, then name.
    public var outcomeRows: [(String, Int)] {
        counts.map { ($0.key.description, $0.value) }.sorted { $0.1 != $1.1 ? $0.1 > $1.1 : $0.0 < $1.0 }
    }

    public func text() -> String {
        var lines: [String] = []
        lines.append(String(format: "finished in %.2fs, %.0f pushes/s", seconds, pushesPerSecond))
        lines.append(
            "pushes: \(pushes) sent, \(completed) answered, \(delivered) delivered, \(completed - delivered) not delivered, \(resends) resends"
        )
        for (name, count) in outcomeRows { lines.append("  \(name): \(count)") }
        if latencyMicroseconds.totalCount > 0 {
            lines.append(
                String(
                    format: "latency ms: min %.2f  p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f",
                    Double(latencyMicroseconds.min) / 1000, percentile(50), percentile(90), percentile(99),
                    percentile(99.9),
                    Double(latencyMicroseconds.max) / 1000))
        }
        lines.append(
            "connections opened: \(connectionsOpened), at most \(connectionsPeak) at once (\(scaleUps) scale-ups, \(scaleDowns) scale-downs)"
        )
        if let connectionError, delivered < completed { lines.append("last connection error: \(connectionError)") }
        if interrupted { lines.append("interrupted: pushes still unanswered were ended as 'shut down'") }
        if let stopReason { lines.append("stopped early: \(stopReason)") }
        return lines.joined(separator: "\n")
    }

    public func json() -> String {
        var outcomes: [String: Int] = [:]
        for (outcome, count) in counts { outcomes[outcome.description] = count }
        let object: [String: Any] = [
            "pushes": pushes, "completed": completed, "delivered": delivered, "seconds": seconds,
            "pushes_per_second": pushesPerSecond, "resends": resends, "connections_opened": connectionsOpened,
            "connections_peak": connectionsPeak, "scale_ups": scaleUps, "scale_downs": scaleDowns,
            "interrupted": interrupted, "outcomes": outcomes, "stop_reason": stopReason ?? NSNull(),
            "latency_ms": [
                "min": Double(latencyMicroseconds.min) / 1000, "p50": percentile(50), "p90": percentile(90),
                "p99": percentile(99), "p99_9": percentile(99.9), "max": Double(latencyMicroseconds.max) / 1000,
            ],
        ]
        let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}

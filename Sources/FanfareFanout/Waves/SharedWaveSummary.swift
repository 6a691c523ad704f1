import FanfareCore
import FanfareStorage
import Logging

/// A wave run by several nodes, as the sum of its shards' checkpoints in the shared store: what any node
/// answers for its status, and the final report once every shard's part is finished.
struct SharedWaveSummary {
    let record: WaveRecord
    /// Decoded checkpoints by shard (nil: that shard has saved none yet).
    private(set) var parts: [ShardCheckpoint?]

    init(record: WaveRecord, checkpoints: [WaveCheckpoint], logger: Logger) {
        self.record = record
        parts = Array(repeating: nil, count: max(0, record.shardCount))
        for stored in checkpoints where stored.shard >= 0 && stored.shard < parts.count {
            do {
                parts[stored.shard] = try ShardCheckpoint(decoding: stored.data)
            } catch {
                // A part that cannot be read is not finished: the wave stays running, and says so in the log.
                logger.error("shared waves: wave \(record.id), shard \(stored.shard): \(error)")
            }
        }
    }

    /// Every shard's part is finished.
    var isFinished: Bool { !parts.isEmpty && parts.allSatisfy { $0?.finished == true } }

    /// The totals so far (running) or final (complete), as the stored report's fields.
    func totals(completedAt: Int64) -> WaveReportRecord {
        var report = WaveReportRecord(
            id: record.id, bundleID: record.bundleID, environment: record.environment, channel: record.channel,
            event: record.event, timestamp: record.timestamp, publishedAt: record.publishedAt, completedAt: completedAt)
        var firstAck: UInt64 = .max
        var lastAck: UInt64 = 0
        for case let part? in parts {
            let counters = part.counters
            report.targeted += counters.targeted
            report.sent += counters.sent
            report.delivered += counters.delivered
            report.failed += counters.failed
            report.superseded += counters.superseded
            report.downgraded += counters.downgraded
            report.expired += counters.expired
            report.invalidated += counters.invalidated
            report.retried += counters.retried
            report.possibleDuplicates += counters.possibleDuplicates
            report.resentAfterRestart += counters.resentAfterRestart
            report.restarts = max(report.restarts, part.restarts)
            for (reason, count) in part.failures { report.failedByReason[reason, default: 0] += count }
            if part.firstAck != 0 { firstAck = min(firstAck, part.firstAck) }
            lastAck = max(lastAck, part.lastAck)
            if let broadcast = part.broadcast, let channelID = record.broadcastChannelID {
                report.broadcast = BroadcastPartRecord(
                    channelID: channelID, subscribers: record.broadcastSubscribers ?? 0, requests: broadcast.requests,
                    outcome: (BroadcastOutcome(rawValue: broadcast.outcome) ?? .failed).description,
                    reason: broadcast.reason,
                    priority: broadcast.priority == 0 ? nil : broadcast.priority, downgraded: broadcast.downgraded,
                    resentAfterRestart: broadcast.resent)
            }
        }
        report.timeToFirstAck = firstAck == .max ? nil : firstAck
        report.makespan = lastAck == 0 ? nil : lastAck
        return report
    }

    /// The report that completes the wave, once every shard's part is finished.
    func finalReport(completedAt: Int64) -> WaveReportRecord? {
        isFinished ? totals(completedAt: completedAt) : nil
    }

    /// What any node answers while the wave runs.
    func runningReport() -> WaveReport {
        var report = WaveReport(record: totals(completedAt: 0))
        report.state = .running
        return report
    }
}

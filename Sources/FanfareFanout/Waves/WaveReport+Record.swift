import FanfareCore
import FanfareStorage

extension WaveReport {
    /// A final report the wave store kept.
    public init(record: WaveReportRecord) {
        id = record.id
        channel = record.channel
        event = LiveActivityEvent(rawValue: record.event) ?? .update
        timestamp = record.timestamp
        state = .complete
        targeted = record.targeted
        sent = record.sent
        delivered = record.delivered
        failed = record.failed
        superseded = record.superseded
        downgraded = record.downgraded
        expired = record.expired
        invalidated = record.invalidated
        retried = record.retried
        possibleDuplicates = record.possibleDuplicates
        resentAfterRestart = record.resentAfterRestart
        restarts = record.restarts
        failedByReason = record.failedByReason
        timeToFirstAck = record.timeToFirstAck
        makespan = record.makespan
        broadcast = record.broadcast.map { part in
            BroadcastReport(
                channelID: part.channelID, subscribers: part.subscribers,
                outcome: BroadcastOutcome(name: part.outcome) ?? .failed, failureReason: part.reason,
                requests: part.requests,
                priority: part.priority, downgraded: part.downgraded, resentAfterRestart: part.resentAfterRestart)
        }
    }

    /// The record the wave store keeps for a complete wave.
    func record(
        bundleID: String, environment: APNsEnvironment, publishedAt: Int64, completedAt: Int64
    ) -> WaveReportRecord {
        var record = WaveReportRecord(
            id: id, bundleID: bundleID, environment: environment, channel: channel, event: event.rawValue,
            timestamp: timestamp, publishedAt: publishedAt, completedAt: completedAt)
        record.targeted = targeted
        record.sent = sent
        record.delivered = delivered
        record.failed = failed
        record.superseded = superseded
        record.downgraded = downgraded
        record.expired = expired
        record.invalidated = invalidated
        record.retried = retried
        record.possibleDuplicates = possibleDuplicates
        record.resentAfterRestart = resentAfterRestart
        record.restarts = restarts
        record.failedByReason = failedByReason
        record.timeToFirstAck = timeToFirstAck
        record.makespan = makespan
        record.broadcast = broadcast.map { part in
            BroadcastPartRecord(
                channelID: part.channelID, subscribers: part.subscribers, requests: part.requests,
                outcome: part.outcome.description, reason: part.failureReason, priority: part.priority,
                downgraded: part.downgraded, resentAfterRestart: part.resentAfterRestart)
        }
        return record
    }
}

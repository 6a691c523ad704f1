/// What the wave store refuses from a caller, checked before anything is written (`.invalidWave`): values the
/// file cannot hold as given. Meaning (event names, priorities, shard counts matching start keys) is the
/// engine's business; the store keeps those as they come.
package enum WaveValidation {
    /// The longest BLOB or text the store binds: SQLite's default SQLITE_MAX_LENGTH (and well inside the
    /// 32-bit length its C API takes).
    package static let maximumValueBytes = 1_000_000_000

    /// A wave id as a row id (SQLite and PostgreSQL keep signed 64-bit integers).
    package static func rowID(_ id: UInt64) throws(RegistryError) -> Int64 {
        guard let rowID = Int64(exactly: id) else {
            throw .invalidWave(id: id, reason: "the id is above \(Int64.max), the largest a store keeps")
        }
        return rowID
    }

    /// The wave's row id.
    package static func check(_ wave: WaveRecord) throws(RegistryError) -> Int64 {
        let id = try rowID(wave.id)
        guard wave.shardCount >= 0 else {
            throw .invalidWave(id: wave.id, reason: "shardCount is negative (\(wave.shardCount))")
        }
        try checkLength(wave.id, "payload", wave.payload.count)
        try checkLength(wave.id, "startKeys", wave.startKeys.count * 8)
        try checkLength(wave.id, "bundleID", wave.bundleID.utf8.count)
        try checkLength(wave.id, "channel", wave.channel.utf8.count)
        try checkLength(wave.id, "event", wave.event.utf8.count)
        try checkLength(wave.id, "priority", wave.priority.utf8.count)
        try checkLength(wave.id, "collapseID", wave.collapseID?.utf8.count ?? 0)
        try checkLength(wave.id, "broadcastChannelID", wave.broadcastChannelID?.utf8.count ?? 0)
        try checkLength(wave.id, "channelPayload", wave.channelPayload?.count ?? 0)
        return id
    }

    /// The checkpoint's wave row id, or nil for an id no saved wave can have (the checkpoint is ignored, as for
    /// any unknown wave).
    package static func check(_ checkpoint: WaveCheckpoint) throws(RegistryError) -> Int64? {
        guard checkpoint.shard >= 0 else {
            throw .invalidWave(id: checkpoint.waveID, reason: "a checkpoint's shard is negative (\(checkpoint.shard))")
        }
        try checkLength(checkpoint.waveID, "checkpoint data", checkpoint.data.count)
        return Int64(exactly: checkpoint.waveID)
    }

    /// The report's wave row id.
    package static func check(_ report: WaveReportRecord) throws(RegistryError) -> Int64 {
        let id = try rowID(report.id)
        let counters = [
            ("targeted", report.targeted), ("sent", report.sent), ("delivered", report.delivered),
            ("failed", report.failed), ("superseded", report.superseded), ("downgraded", report.downgraded),
            ("expired", report.expired), ("invalidated", report.invalidated), ("retried", report.retried),
            ("possibleDuplicates", report.possibleDuplicates), ("resentAfterRestart", report.resentAfterRestart),
            ("restarts", report.restarts),
        ]
        for (name, value) in counters where value < 0 {
            throw .invalidWave(id: report.id, reason: "the report's \(name) is negative (\(value))")
        }
        for (reason, count) in report.failedByReason where count < 0 {
            throw .invalidWave(id: report.id, reason: "the report's failedByReason['\(reason)'] is negative (\(count))")
        }
        try checkLength(
            report.id, "failedByReason", report.failedByReason.reduce(0) { $0 + $1.key.utf8.count * 3 + 21 })
        for (name, value) in [("timeToFirstAck", report.timeToFirstAck), ("makespan", report.makespan)] {
            if let value, value > UInt64(Int64.max) {
                throw .invalidWave(id: report.id, reason: "the report's \(name) is above \(Int64.max) ns")
            }
        }
        if let broadcast = report.broadcast {
            guard broadcast.subscribers >= 0, broadcast.requests >= 0 else {
                throw .invalidWave(id: report.id, reason: "the report's broadcast subscribers or requests are negative")
            }
            try checkLength(report.id, "broadcast.channelID", broadcast.channelID.utf8.count)
            try checkLength(report.id, "broadcast.outcome", broadcast.outcome.utf8.count)
            try checkLength(report.id, "broadcast.reason", broadcast.reason?.utf8.count ?? 0)
        }
        return id
    }

    private static func checkLength(_ id: UInt64, _ field: String, _ bytes: Int) throws(RegistryError) {
        guard bytes <= maximumValueBytes else {
            throw .invalidWave(
                id: id, reason: "\(field) is \(bytes) bytes, over the \(maximumValueBytes) a store keeps")
        }
    }
}

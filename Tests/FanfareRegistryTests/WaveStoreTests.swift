import FanfareCore
import Foundation
import Testing

@testable import FanfareRegistry

/// A wave of `testBundle` (production) on `channel`, with every optional set.
private func makeWave(
    _ id: UInt64, channel: String = "match-1", timestamp: Int64 = 1_700_000_000, bundleID: String = testBundle,
    environment: APNsEnvironment = .production, payloadBytes: Int = 64
) -> WaveRecord {
    WaveRecord(
        id: id, bundleID: bundleID, environment: environment, channel: channel, event: "update",
        timestamp: timestamp, priority: "auto", hasAlert: true,
        payload: (0..<payloadBytes).map { UInt8(truncatingIfNeeded: $0 &* 7) &+ UInt8(truncatingIfNeeded: id) },
        freshUntil: timestamp + 60, collapseID: "goal-\(id)", dismissalDate: timestamp + 3_600,
        publishedAt: 1_700_000_000_000 + Int64(id % 1_000), shardCount: 2, startKeys: [id, UInt64.max - id])
}

/// The report of `wave` with its identity and a few counters set.
private func makeReport(_ wave: WaveRecord, completedAt: Int64 = 1_700_000_100_000) -> WaveReportRecord {
    var report = WaveReportRecord(
        id: wave.id, bundleID: wave.bundleID, environment: wave.environment, channel: wave.channel,
        event: wave.event, timestamp: wave.timestamp, publishedAt: wave.publishedAt, completedAt: completedAt)
    report.targeted = 10
    report.sent = 9
    report.delivered = 8
    report.failed = 1
    report.expired = 1
    report.failedByReason = ["BadTopic": 1]
    return report
}

private func checkpoint(_ waveID: UInt64, shard: Int, byte: UInt8, bytes: Int = 16, savedAt: Int64 = 1)
    -> WaveCheckpoint
{
    WaveCheckpoint(waveID: waveID, shard: shard, data: [UInt8](repeating: byte, count: bytes), savedAt: savedAt)
}

/// Runs `body` and returns the `.storage` message it threw (nil if it threw something else or nothing).
private func storageMessage(_ body: () throws -> Void) -> String? {
    do {
        try body()
        return nil
    } catch let RegistryError.storage(message) {
        return message
    } catch {
        return nil
    }
}

@Suite("WaveStore: SQLite")
struct WaveStoreTests {
    @Test func roundTripsEveryField() throws {
        try withStore { store, _ in
            let full = makeWave(3, payloadBytes: 4_096)
            let bare = WaveRecord(
                id: 4, bundleID: testBundle, environment: .production, channel: "match-ü", event: "end",
                timestamp: -5, priority: "normal", hasAlert: false, payload: [], freshUntil: nil, collapseID: nil,
                dismissalDate: nil, publishedAt: 0, shardCount: 0, startKeys: [])
            try store.saveWave(full)
            try store.saveWave(bare)
            let unfinished = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
            #expect(unfinished == [UnfinishedWave(record: full, checkpoints: []), UnfinishedWave(record: bare, checkpoints: [])])
            #expect(unfinished.first?.record.payload.count == 4_096)
            #expect(unfinished.first?.record.startKeys == [3, UInt64.max - 3])

            var every = makeReport(full)
            every.targeted = 100
            every.sent = 101
            every.delivered = 90
            every.failed = 4
            every.superseded = 3
            every.downgraded = 7
            every.expired = 2
            every.invalidated = 1
            every.retried = 12
            every.possibleDuplicates = 5
            every.resentAfterRestart = 6
            every.restarts = 2
            // Names with the encoding's own separators and a control character round-trip too.
            every.failedByReason = ["BadTopic": 2, "Unconfirmed": 1, "odd=name;50%\n": 1, "Shutdown": 0]
            every.timeToFirstAck = 1_234_567
            every.makespan = UInt64(Int64.max)
            var none = WaveReportRecord(
                id: 4, bundleID: testBundle, environment: .production, channel: "match-ü", event: "end",
                timestamp: -5, publishedAt: 0, completedAt: 9)
            none.failedByReason = [:]
            try store.completeWave(every)
            try store.completeWave(none)
            #expect(try store.waveReport(id: 3) == every)
            #expect(try store.waveReport(id: 4) == none)
            #expect(try store.unfinishedWaves(bundleID: testBundle, environment: .production).isEmpty)
        }
    }

    @Test func latestTimestampOnlyRises() throws {
        try withStore { store, _ in
            try store.saveWave(makeWave(1, channel: "match-1", timestamp: 200))
            try store.saveWave(makeWave(2, channel: "match-1", timestamp: 150))  // late and older: kept lower
            try store.saveWave(makeWave(3, channel: "match-2", timestamp: 10))
            #expect(try store.latestTimestamps(bundleID: testBundle, environment: .production)
                    == ["match-1": 200, "match-2": 10])
            try store.saveWave(makeWave(4, channel: "match-1", timestamp: 201))
            #expect(try store.latestTimestamps(bundleID: testBundle, environment: .production)["match-1"] == 201)
        }
    }

    @Test func checkpointsReplacePerWaveAndShardAndVanishAtCompletion() throws {
        try withStore { store, _ in
            let first = makeWave(1)
            let second = makeWave(2)
            try store.saveWave(first)
            try store.saveWave(second)
            try store.saveCheckpoints([
                checkpoint(1, shard: 1, byte: 0xA1), checkpoint(1, shard: 0, byte: 0xA0), checkpoint(2, shard: 0, byte: 0xB0),
            ])
            try store.saveCheckpoints([checkpoint(1, shard: 1, byte: 0xA2, bytes: 3, savedAt: 2)])
            try store.saveCheckpoints([])
            var unfinished = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
            #expect(unfinished.map(\.record.id) == [1, 2])
            #expect(unfinished[0].checkpoints == [
                checkpoint(1, shard: 0, byte: 0xA0), checkpoint(1, shard: 1, byte: 0xA2, bytes: 3, savedAt: 2),
            ])
            #expect(unfinished[1].checkpoints == [checkpoint(2, shard: 0, byte: 0xB0)])

            try store.completeWave(makeReport(first))
            unfinished = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
            #expect(unfinished.map(\.record.id) == [2])
            #expect(unfinished[0].checkpoints == [checkpoint(2, shard: 0, byte: 0xB0)])
            #expect(try store.rows("SELECT count(*) FROM wave_checkpoints WHERE wave_id = 1") == 0)
        }
    }

    @Test func checkpointsOfCompleteOrUnknownWavesAreIgnored() throws {
        try withStore { store, _ in
            let wave = makeWave(1)
            try store.saveWave(wave)
            try store.completeWave(makeReport(wave))
            // A late write after completion, a wave never saved, and an id no store can hold: all ignored,
            // and the rest of the batch is written.
            try store.saveWave(makeWave(2))
            try store.saveCheckpoints([
                checkpoint(1, shard: 0, byte: 1), checkpoint(99, shard: 0, byte: 2),
                checkpoint(UInt64.max, shard: 0, byte: 3), checkpoint(2, shard: 5, byte: 4),
            ])
            #expect(try store.rows("SELECT count(*) FROM wave_checkpoints") == 1)
            #expect(try store.waveReport(id: 1) == makeReport(wave))
            let unfinished = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
            #expect(unfinished.map(\.record.id) == [2])
            #expect(unfinished[0].checkpoints == [checkpoint(2, shard: 5, byte: 4)])
        }
    }

    @Test func unfinishedWavesSurviveReopeningInIDOrder() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("fanfare.db")
        do {
            let store = try SQLiteTokenStore(path: path)
            try store.register([updateRegistration(1)])
            for id: UInt64 in [5, 2, 9, 7] { try store.saveWave(makeWave(id, timestamp: Int64(id))) }
            try store.saveCheckpoints([
                checkpoint(9, shard: 1, byte: 91), checkpoint(2, shard: 0, byte: 20), checkpoint(9, shard: 0, byte: 90),
            ])
            try store.completeWave(makeReport(makeWave(7, timestamp: 7)))
            try store.close()
        }
        let store = try SQLiteTokenStore(path: path)
        let unfinished = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
        #expect(unfinished.map(\.record) == [2, 5, 9].map { makeWave($0, timestamp: Int64($0)) })
        #expect(unfinished.map(\.checkpoints) == [
            [checkpoint(2, shard: 0, byte: 20)], [], [checkpoint(9, shard: 0, byte: 90), checkpoint(9, shard: 1, byte: 91)],
        ])
        #expect(try store.waveReport(id: 7) == makeReport(makeWave(7, timestamp: 7)))
        #expect(try store.latestTimestamps(bundleID: testBundle, environment: .production) == ["match-1": 9])
        #expect(try store.count() == 1)
    }

    @Test func reportsAreListedNewestFirstAndLimited() throws {
        try withStore { store, _ in
            for id: UInt64 in 1...6 {
                try store.saveWave(makeWave(id))
                if id != 5 { try store.completeWave(makeReport(makeWave(id), completedAt: Int64(id))) }
            }
            let reports = try store.waveReports(bundleID: testBundle, environment: .production, limit: 3)
            #expect(reports.map(\.id) == [6, 4, 3])
            #expect(reports.first == makeReport(makeWave(6), completedAt: 6))
            #expect(try store.waveReports(bundleID: testBundle, environment: .production, limit: 100).map(\.id)
                    == [6, 4, 3, 2, 1])
            #expect(try store.waveReports(bundleID: testBundle, environment: .production, limit: 0).isEmpty)
            #expect(try store.waveReports(bundleID: testBundle, environment: .production, limit: -1).isEmpty)
            #expect(try store.waveReport(id: 5) == nil)  // unfinished
            #expect(try store.waveReport(id: 77) == nil)  // unknown
            #expect(try store.waveReport(id: UInt64.max) == nil)
        }
    }

    @Test func completingAgainReplacesTheReport() throws {
        try withStore { store, _ in
            let wave = makeWave(1)
            try store.saveWave(wave)
            try store.completeWave(makeReport(wave))
            var later = makeReport(wave, completedAt: 1_700_000_200_000)
            later.delivered = 9
            later.failed = 0
            later.failedByReason = [:]
            try store.completeWave(later)
            #expect(try store.waveReport(id: 1) == later)
        }
    }

    @Test func appsAreIsolated() throws {
        try withStore { store, _ in
            let other = "com.example.other"
            try store.saveWave(makeWave(1, timestamp: 100))
            try store.saveWave(makeWave(2, timestamp: 300, environment: .sandbox))
            try store.saveWave(makeWave(3, timestamp: 200, bundleID: other))
            try store.saveCheckpoints([checkpoint(1, shard: 0, byte: 1), checkpoint(3, shard: 0, byte: 3)])
            try store.completeWave(makeReport(makeWave(2, timestamp: 300, environment: .sandbox)))
            try store.saveRetirement(bundleID: other, environment: .production, channel: "match-1", dueAt: 50)
            try store.saveRetirement(bundleID: testBundle, environment: .production, channel: "match-1", dueAt: 60)

            let production = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
            #expect(production.map(\.record.id) == [1])
            #expect(production[0].checkpoints == [checkpoint(1, shard: 0, byte: 1)])
            #expect(try store.unfinishedWaves(bundleID: other, environment: .production).map(\.record.id) == [3])
            #expect(try store.unfinishedWaves(bundleID: testBundle, environment: .sandbox).isEmpty)
            #expect(try store.unfinishedWaves(bundleID: "com.example.none", environment: .production).isEmpty)

            #expect(try store.latestTimestamps(bundleID: testBundle, environment: .production) == ["match-1": 100])
            #expect(try store.latestTimestamps(bundleID: testBundle, environment: .sandbox) == ["match-1": 300])
            #expect(try store.latestTimestamps(bundleID: other, environment: .production) == ["match-1": 200])
            #expect(try store.latestTimestamps(bundleID: other, environment: .sandbox).isEmpty)

            #expect(try store.waveReports(bundleID: testBundle, environment: .sandbox, limit: 10).map(\.id) == [2])
            #expect(try store.waveReports(bundleID: testBundle, environment: .production, limit: 10).isEmpty)
            #expect(try store.waveReport(id: 2)?.environment == .sandbox)

            try store.removeRetirements(bundleID: testBundle, environment: .production, channels: ["match-1"])
            #expect(try store.pendingRetirements(bundleID: testBundle, environment: .production).isEmpty)
            #expect(try store.pendingRetirements(bundleID: other, environment: .production) == ["match-1": 50])
        }
    }

    @Test func retirementsAreSavedReplacedAndRemoved() throws {
        try withStore { store, _ in
            #expect(try store.pendingRetirements(bundleID: testBundle, environment: .production).isEmpty)
            // An app with no token yet gets its row, as registration would create it.
            try store.saveRetirement(bundleID: testBundle, environment: .production, channel: "match-1", dueAt: 100)
            try store.saveRetirement(bundleID: testBundle, environment: .production, channel: "match-2", dueAt: 200)
            try store.saveRetirement(bundleID: testBundle, environment: .production, channel: "match-1", dueAt: 150)
            #expect(try store.pendingRetirements(bundleID: testBundle, environment: .production)
                    == ["match-1": 150, "match-2": 200])
            try store.removeRetirements(bundleID: testBundle, environment: .production, channels: ["match-1", "unknown"])
            try store.removeRetirements(bundleID: "com.example.none", environment: .production, channels: ["match-2"])
            try store.removeRetirements(bundleID: testBundle, environment: .production, channels: [])
            #expect(try store.pendingRetirements(bundleID: testBundle, environment: .production) == ["match-2": 200])
        }
    }

    @Test func retirementsSurviveReopening() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("fanfare.db")
        try SQLiteTokenStore(path: path).saveRetirement(
            bundleID: testBundle, environment: .sandbox, channel: "match-9", dueAt: 1_700_000_000)
        #expect(try SQLiteTokenStore(path: path).pendingRetirements(bundleID: testBundle, environment: .sandbox)
                == ["match-9": 1_700_000_000])
    }

    @Test func pruningKeepsTheNewestReportsOfEachApp() throws {
        try withStore { store, _ in
            let other = "com.example.other"
            for id: UInt64 in 1...6 {
                try store.saveWave(makeWave(id))
                if id != 6 { try store.completeWave(makeReport(makeWave(id))) }
            }
            for id: UInt64 in 7...8 {
                try store.saveWave(makeWave(id, bundleID: other))
                try store.completeWave(makeReport(makeWave(id, bundleID: other)))
            }
            #expect(try store.pruneWaveReports(keeping: 3) == 2)
            #expect(try store.waveReports(bundleID: testBundle, environment: .production, limit: 10).map(\.id) == [5, 4, 3])
            #expect(try store.waveReports(bundleID: other, environment: .production, limit: 10).map(\.id) == [8, 7])
            #expect(try store.pruneWaveReports(keeping: 3) == 0)
            #expect(try store.pruneWaveReports(keeping: 0) == 5)
            #expect(try store.waveReports(bundleID: other, environment: .production, limit: 10).isEmpty)
            // Unfinished waves are never pruned, and ids are not reused after their reports go.
            #expect(try store.unfinishedWaves(bundleID: testBundle, environment: .production).map(\.record.id) == [6])
            #expect(try store.lastWaveID() == 8)
        }
    }

    @Test func lastWaveIDSurvivesReopeningAndPruning() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("fanfare.db")
        do {
            let store = try SQLiteTokenStore(path: path)
            #expect(try store.lastWaveID() == 0)
            try store.saveWave(makeWave(41))
            try store.saveWave(makeWave(12))
            #expect(try store.lastWaveID() == 41)
            try store.completeWave(makeReport(makeWave(41)))
            try store.completeWave(makeReport(makeWave(12)))
            #expect(try store.pruneWaveReports(keeping: 0) == 2)
        }
        let store = try SQLiteTokenStore(path: path)
        #expect(try store.lastWaveID() == 41)
        try store.saveWave(makeWave(UInt64(Int64.max)))
        #expect(try store.lastWaveID() == UInt64(Int64.max))
    }

    @Test func refusedCallsChangeNothing() throws {
        try withStore { store, _ in
            let wave = makeWave(1, timestamp: 100)
            try store.saveWave(wave)

            // The same id again (even with a newer timestamp): refused, and the channel's latest is not raised.
            #expect(throws: RegistryError.invalidWave(id: 1, reason: "a wave with this id is already saved")) {
                try store.saveWave(makeWave(1, timestamp: 500))
            }
            #expect(try store.latestTimestamps(bundleID: testBundle, environment: .production) == ["match-1": 100])

            #expect(throws: RegistryError.unknownWave(id: 2)) { try store.completeWave(makeReport(makeWave(2))) }
            var elsewhere = makeReport(wave)
            elsewhere.bundleID = "com.example.other"
            elsewhere.timestamp = 101
            #expect(throws: RegistryError.invalidWave(id: 1, reason: "the report's app, timestamp differ from the saved wave's")) {
                try store.completeWave(elsewhere)
            }
            #expect(try store.waveReport(id: 1) == nil)

            var negative = makeReport(wave)
            negative.resentAfterRestart = -1
            #expect(throws: RegistryError.invalidWave(id: 1, reason: "the report's resentAfterRestart is negative (-1)")) {
                try store.completeWave(negative)
            }
            var negativeReason = makeReport(wave)
            negativeReason.failedByReason = ["BadTopic": -2]
            #expect(throws: RegistryError.self) { try store.completeWave(negativeReason) }
            var tooLong = makeReport(wave)
            tooLong.makespan = UInt64(Int64.max) + 1
            #expect(throws: RegistryError.self) { try store.completeWave(tooLong) }
            #expect(try store.waveReport(id: 1) == nil)

            let huge = UInt64(Int64.max) + 1
            #expect(throws: RegistryError.invalidWave(id: huge, reason: "the id is above \(Int64.max), the largest a store keeps")) {
                try store.saveWave(makeWave(huge))
            }
            var report = makeReport(wave)
            report.id = huge
            #expect(throws: RegistryError.self) { try store.completeWave(report) }
            var negativeShards = makeWave(3)
            negativeShards.shardCount = -1
            #expect(throws: RegistryError.self) { try store.saveWave(negativeShards) }
            // A bad checkpoint refuses the whole batch: the good one before it is not written either.
            #expect(throws: RegistryError.invalidWave(id: 1, reason: "a checkpoint's shard is negative (-1)")) {
                try store.saveCheckpoints([checkpoint(1, shard: 0, byte: 1), checkpoint(1, shard: -1, byte: 2)])
            }
            #expect(try store.rows("SELECT count(*) FROM wave_checkpoints") == 0)
            #expect(try store.unfinishedWaves(bundleID: testBundle, environment: .production) == [
                UnfinishedWave(record: wave, checkpoints: [])
            ])
            #expect(try store.lastWaveID() == 1)
            #expect(RegistryError.unknownWave(id: 2).description == "wave 2 is unknown (never saved, or pruned)")
        }
    }

    /// Rows changed behind the store's back (raw SQL): each read that meets one fails with a `.storage` error
    /// naming the wave, and nothing traps.
    @Test(arguments: [
        ("UPDATE apps SET environment = 9", "environment is unknown (9)"),
        ("UPDATE waves SET failed_by_reason = 'BadTopic=x' WHERE id = 7", "failed_by_reason has a count that is not"),
        ("UPDATE waves SET failed_by_reason = 'A=1;A=2' WHERE id = 7", "failed_by_reason names 'A' twice"),
        ("UPDATE waves SET failed_by_reason = '%G1=1' WHERE id = 7", "failed_by_reason has a malformed %-escape"),
        ("UPDATE waves SET failed_by_reason = '%FF=1' WHERE id = 7", "failed_by_reason has a name that is not UTF-8"),
        ("UPDATE waves SET failed_by_reason = 'noequals' WHERE id = 7", "failed_by_reason has an entry without '='"),
        ("UPDATE waves SET failed_by_reason = 'A=99999999999999999999' WHERE id = 7", "failed_by_reason has a count"),
        ("UPDATE waves SET failed_by_reason = x'00' WHERE id = 7", "failed_by_reason is not text"),
        ("UPDATE waves SET delivered = -3 WHERE id = 7", "delivered is negative (-3)"),
        ("UPDATE waves SET sent = 'many' WHERE id = 7", "sent is not an integer"),
        ("UPDATE waves SET makespan = -1 WHERE id = 7", "makespan is negative (-1)"),
        ("UPDATE waves SET channel = x'41' WHERE id = 7", "channel is not text"),
    ])
    func corruptReportRowsAreStorageErrors(sql: String, problem: String) throws {
        try withStore { store, _ in
            try store.saveWave(makeWave(7))
            try store.completeWave(makeReport(makeWave(7)))
            try store.execute(sql: sql)
            let byID = storageMessage { _ = try store.waveReport(id: 7) }
            let listed = storageMessage { _ = try store.waveReports(bundleID: testBundle, environment: .production, limit: 5) }
            #expect(byID?.contains("wave 7 is corrupt in the database: \(problem)") == true, "\(byID ?? "no error")")
            #expect(listed == byID)
        }
    }

    @Test(arguments: [
        ("UPDATE wave_checkpoints SET shard = -1", "a checkpoint of wave 7 is corrupt in the database: shard is negative (-1)"),
        ("UPDATE wave_checkpoints SET data = 'text'", "a checkpoint of wave 7 is corrupt in the database: data is not a BLOB"),
        ("UPDATE waves SET start_keys = x'0102030405'", "wave 7 is corrupt in the database: start_keys holds 5 bytes, not a multiple of 8"),
        ("UPDATE waves SET start_keys = 'text'", "wave 7 is corrupt in the database: start_keys is not a BLOB"),
        ("UPDATE waves SET payload = 'text'", "wave 7 is corrupt in the database: payload is not a BLOB"),
        ("UPDATE waves SET has_alert = 7", "wave 7 is corrupt in the database: has_alert is 7, not 0 or 1"),
        ("UPDATE waves SET shard_count = -2", "wave 7 is corrupt in the database: shard_count is negative (-2)"),
        ("UPDATE waves SET fresh_until = 'soon'", "wave 7 is corrupt in the database: fresh_until is not an integer"),
        ("UPDATE waves SET collapse_id = x'41'", "wave 7 is corrupt in the database: collapse_id is not text"),
        ("UPDATE waves SET id = -7", "wave -7 is corrupt in the database: id is negative (-7)"),
    ])
    func corruptUnfinishedRowsAreStorageErrors(sql: String, expected: String) throws {
        try withStore { store, _ in
            try store.saveWave(makeWave(7))
            try store.saveCheckpoints([checkpoint(7, shard: 0, byte: 1)])
            try store.execute(sql: sql)
            let message = storageMessage { _ = try store.unfinishedWaves(bundleID: testBundle, environment: .production) }
            #expect(message?.contains(expected) == true, "\(message ?? "no error")")
        }
    }

    @Test func corruptChannelRowsAreStorageErrors() throws {
        try withStore { store, _ in
            try store.saveWave(makeWave(1))
            try store.saveRetirement(bundleID: testBundle, environment: .production, channel: "match-1", dueAt: 5)
            try store.execute(sql: "UPDATE channel_latest SET timestamp = 'late'")
            try store.execute(sql: "UPDATE pending_retirements SET channel = x'41'")
            let latest = storageMessage { _ = try store.latestTimestamps(bundleID: testBundle, environment: .production) }
            #expect(latest?.contains("a row of channel_latest is corrupt in the database: value is not an integer") == true)
            let pending = storageMessage { _ = try store.pendingRetirements(bundleID: testBundle, environment: .production) }
            #expect(pending?.contains("a row of pending_retirements is corrupt in the database: channel is not text") == true)
        }
    }

    /// A registry written before the wave tables existed (schema v2, tokens in it) opens, gets them, and keeps
    /// its tokens.
    @Test func aVersion2RegistryGainsTheWaveTablesAndKeepsItsTokens() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("fanfare.db")
        let registrations = (0..<300).map { updateRegistration($0, channels: ["match-\($0 % 4)"]) }
        do {
            // Back to what v2 left: no wave tables, no sqlite_sequence row, v3 not recorded as applied.
            let store = try SQLiteTokenStore(path: path)
            try store.register(registrations)
            try store.rewindToVersion3()
            for table in ["waves", "wave_checkpoints", "channel_latest", "pending_retirements"] {
                try store.execute(sql: "DROP TABLE \(table)")
            }
            try store.execute(sql: "DELETE FROM sqlite_sequence")
            try store.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'v3: waves'")
            #expect(try store.rows("SELECT count(*) FROM sqlite_master WHERE name LIKE '%wave%'") == 0)
            #expect(try store.rows("SELECT count(*) FROM grdb_migrations") == 2)
            try store.close()
        }
        let store = try SQLiteTokenStore(path: path)
        #expect(try store.rows("SELECT count(*) FROM grdb_migrations WHERE identifier = 'v3: waves'") == 1)
        #expect(try store.rows("SELECT count(*) FROM grdb_migrations") == 4)
        #expect(try store.count() == 300)
        let stored = try store.all()
        for registration in registrations { #expect(stored[registration.token] == registration) }
        try store.saveWave(makeWave(1))
        #expect(try store.unfinishedWaves(bundleID: testBundle, environment: .production).count == 1)
        #expect(try store.lastWaveID() == 1)
    }

    /// A value longer than SQLite keeps (its limit lowered here; 1 GB by default) is a `.storage` error, not a
    /// trap and not a parameter silently left unset; nothing of the call is written.
    @Test func valuesOverSQLitesLengthLimitAreRefused() throws {
        try withStore { store, _ in
            try store.limitValueLength(toBytes: 1_000)
            let message = storageMessage { try store.saveWave(makeWave(1, payloadBytes: 1_001)) }
            #expect(message?.contains("saving wave 1 failed: a value of 1001 bytes is longer than SQLite stores") == true,
                    "\(message ?? "no error")")
            let long = String(repeating: "c", count: 1_001)
            #expect(storageMessage {
                try store.saveRetirement(bundleID: testBundle, environment: .production, channel: long, dueAt: 1)
            }?.contains("a value of 1001 bytes") == true)
            try store.saveWave(makeWave(2, payloadBytes: 100))
            #expect(storageMessage { try store.saveCheckpoints([checkpoint(2, shard: 0, byte: 1, bytes: 1_001)]) } != nil)
            #expect(try store.unfinishedWaves(bundleID: testBundle, environment: .production).map(\.record.id) == [2])
            #expect(try store.rows("SELECT count(*) FROM wave_checkpoints") == 0)
            #expect(try store.pendingRetirements(bundleID: testBundle, environment: .production).isEmpty)
        }
    }

    @Test func closedStoreRefusesWaveCalls() throws {
        try withStore { store, _ in
            try store.close()
            let message = storageMessage { try store.saveWave(makeWave(1)) }
            #expect(message?.contains("saving wave 1 failed") == true)
            #expect(throws: RegistryError.self) { try store.lastWaveID() }
        }
    }
}

@Suite("WaveStore: column encodings")
struct WaveColumnEncodingTests {
    @Test func startKeysAreBigEndianEightBytesEach() throws {
        let bytes = WaveColumnEncoding.startKeys([0x0102_0304_0506_0708, 0, UInt64.max])
        #expect(bytes.count == 24)
        #expect(Array(bytes[0..<8]) == [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(try bytes.withUnsafeBytes { try WaveColumnEncoding.startKeys($0) } == [0x0102_0304_0506_0708, 0, UInt64.max])
        #expect(try [UInt8]().withUnsafeBytes { try WaveColumnEncoding.startKeys($0) } == [])
    }

    @Test func failureCountsAreReadableAndRoundTrip() throws {
        #expect(WaveColumnEncoding.failureCounts(["Unconfirmed": 1, "BadTopic": 2]) == "BadTopic=2;Unconfirmed=1")
        #expect(WaveColumnEncoding.failureCounts([:]) == "")
        let odd = ["a=b": 1, "c;d": 2, "50%": 3, "tab\tnew\nline\u{7F}": 4, "ü": Int.max, "zero": 0]
        let text = WaveColumnEncoding.failureCounts(odd)
        #expect(text == "50%25=3;a%3Db=1;c%3Bd=2;tab%09new%0Aline%7F=4;zero=0;ü=\(Int.max)")
        #expect(try WaveColumnEncoding.failureCounts(text) == odd)
        #expect(try WaveColumnEncoding.failureCounts("") == [:])
    }

    @Test(arguments: [";", "A=1;", "=1", "A=", "A=-1", "A=+1", "A= 1", "A=1.0", "A\n=1", "%4=1", "%4a=1", "A=1=2"])
    func malformedFailureCountsAreRefused(text: String) {
        #expect(throws: WaveColumnEncoding.Malformed.self) { try WaveColumnEncoding.failureCounts(text) }
    }
}

extension SQLiteTokenStore {
    /// The single integer a query returns (a count).
    fileprivate func rows(_ sql: String) throws -> Int64 { try scalar(sql: sql) ?? 0 }
}

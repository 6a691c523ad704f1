import FanfareCore
import FanfareStorage
import Foundation
import Testing

/// A wave of `testBundle` (production) on `channel`, with every optional set.
func makeWave(
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
func makeReport(_ wave: WaveRecord, completedAt: Int64 = 1_700_000_100_000) -> WaveReportRecord {
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

func checkpoint(
    _ waveID: UInt64, shard: Int, byte: UInt8, bytes: Int = 16, savedAt: Int64 = 1
)
    -> WaveCheckpoint
{
    WaveCheckpoint(waveID: waveID, shard: shard, data: [UInt8](repeating: byte, count: bytes), savedAt: savedAt)
}

/// Runs `body` and returns the `.storage` message it threw (nil if it threw something else or nothing).
func storageMessage(_ body: () throws -> Void) -> String? {
    do {
        try body()
        return nil
    } catch let RegistryError.storage(message) {
        return message
    } catch {
        return nil
    }
}

/// The wave store's expectations against SQLiteTokenStore and PostgresTokenStore: round trips, checkpoints,
/// completion, reports, retirements, pruning, refusals and reopening.
extension PostgresSuites {
    @Suite("WaveStore conformance: SQLite and PostgreSQL", .serialized)
    struct WaveStoreConformanceTests {
        @Test(arguments: StoreKind.allCases)
        func roundTripsEveryField(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
                let full = makeWave(3, payloadBytes: 4_096)
                let bare = WaveRecord(
                    id: 4, bundleID: testBundle, environment: .production, channel: "match-ü", event: "end",
                    timestamp: -5, priority: "normal", hasAlert: false, payload: [], freshUntil: nil, collapseID: nil,
                    dismissalDate: nil, publishedAt: 0, shardCount: 0, startKeys: [])
                try store.saveWave(full)
                try store.saveWave(bare)
                let unfinished = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
                #expect(
                    unfinished == [
                        UnfinishedWave(record: full, checkpoints: []), UnfinishedWave(record: bare, checkpoints: []),
                    ])
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

        @Test(arguments: StoreKind.allCases)
        func latestTimestampOnlyRises(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
                try store.saveWave(makeWave(1, channel: "match-1", timestamp: 200))
                try store.saveWave(makeWave(2, channel: "match-1", timestamp: 150))  // late and older: kept lower
                try store.saveWave(makeWave(3, channel: "match-2", timestamp: 10))
                #expect(
                    try store.latestTimestamps(bundleID: testBundle, environment: .production)
                        == ["match-1": 200, "match-2": 10])
                try store.saveWave(makeWave(4, channel: "match-1", timestamp: 201))
                #expect(try store.latestTimestamps(bundleID: testBundle, environment: .production)["match-1"] == 201)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func checkpointsReplacePerWaveAndShardAndVanishAtCompletion(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
                let first = makeWave(1)
                let second = makeWave(2)
                try store.saveWave(first)
                try store.saveWave(second)
                try store.saveCheckpoints([
                    checkpoint(1, shard: 1, byte: 0xA1), checkpoint(1, shard: 0, byte: 0xA0),
                    checkpoint(2, shard: 0, byte: 0xB0),
                ])
                try store.saveCheckpoints([checkpoint(1, shard: 1, byte: 0xA2, bytes: 3, savedAt: 2)])
                try store.saveCheckpoints([])
                var unfinished = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
                #expect(unfinished.map(\.record.id) == [1, 2])
                #expect(
                    unfinished[0].checkpoints == [
                        checkpoint(1, shard: 0, byte: 0xA0), checkpoint(1, shard: 1, byte: 0xA2, bytes: 3, savedAt: 2),
                    ])
                #expect(unfinished[1].checkpoints == [checkpoint(2, shard: 0, byte: 0xB0)])

                try store.completeWave(makeReport(first))
                unfinished = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
                #expect(unfinished.map(\.record.id) == [2])
                #expect(unfinished[0].checkpoints == [checkpoint(2, shard: 0, byte: 0xB0)])
                #expect(try database.scalar("SELECT count(*) FROM wave_checkpoints WHERE wave_id = 1", store) == 0)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func checkpointsOfCompleteOrUnknownWavesAreIgnored(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
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
                #expect(try database.scalar("SELECT count(*) FROM wave_checkpoints", store) == 1)
                #expect(try store.waveReport(id: 1) == makeReport(wave))
                let unfinished = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
                #expect(unfinished.map(\.record.id) == [2])
                #expect(unfinished[0].checkpoints == [checkpoint(2, shard: 5, byte: 4)])
            }
        }

        @Test(arguments: StoreKind.allCases)
        func unfinishedWavesSurviveReopeningInIDOrder(_ kind: StoreKind) throws {
            try withDatabase(kind) { database in
                do {
                    let store = try database.open()
                    try store.register([updateRegistration(1)])
                    for id: UInt64 in [5, 2, 9, 7] { try store.saveWave(makeWave(id, timestamp: Int64(id))) }
                    try store.saveCheckpoints([
                        checkpoint(9, shard: 1, byte: 91), checkpoint(2, shard: 0, byte: 20),
                        checkpoint(9, shard: 0, byte: 90),
                    ])
                    try store.completeWave(makeReport(makeWave(7, timestamp: 7)))
                    try database.close(store)
                }
                let store = try database.open()
                defer { try? database.close(store) }
                let unfinished = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
                #expect(unfinished.map(\.record) == [2, 5, 9].map { makeWave($0, timestamp: Int64($0)) })
                #expect(
                    unfinished.map(\.checkpoints) == [
                        [checkpoint(2, shard: 0, byte: 20)], [],
                        [checkpoint(9, shard: 0, byte: 90), checkpoint(9, shard: 1, byte: 91)],
                    ])
                #expect(try store.waveReport(id: 7) == makeReport(makeWave(7, timestamp: 7)))
                #expect(try store.latestTimestamps(bundleID: testBundle, environment: .production) == ["match-1": 9])
                #expect(try store.count() == 1)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func reportsAreListedNewestFirstAndLimited(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
                for id: UInt64 in 1...6 {
                    try store.saveWave(makeWave(id))
                    if id != 5 { try store.completeWave(makeReport(makeWave(id), completedAt: Int64(id))) }
                }
                let reports = try store.waveReports(bundleID: testBundle, environment: .production, limit: 3)
                #expect(reports.map(\.id) == [6, 4, 3])
                #expect(reports.first == makeReport(makeWave(6), completedAt: 6))
                #expect(
                    try store.waveReports(bundleID: testBundle, environment: .production, limit: 100).map(\.id)
                        == [6, 4, 3, 2, 1])
                #expect(try store.waveReports(bundleID: testBundle, environment: .production, limit: 0).isEmpty)
                #expect(try store.waveReports(bundleID: testBundle, environment: .production, limit: -1).isEmpty)
                #expect(try store.waveReport(id: 5) == nil)  // unfinished
                #expect(try store.waveReport(id: 77) == nil)  // unknown
                #expect(try store.waveReport(id: UInt64.max) == nil)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func completingAgainReplacesTheReport(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
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

        @Test(arguments: StoreKind.allCases)
        func appsAreIsolated(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
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

        @Test(arguments: StoreKind.allCases)
        func retirementsAreSavedReplacedAndRemoved(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
                #expect(try store.pendingRetirements(bundleID: testBundle, environment: .production).isEmpty)
                // An app with no token yet gets its row, as registration would create it.
                try store.saveRetirement(bundleID: testBundle, environment: .production, channel: "match-1", dueAt: 100)
                try store.saveRetirement(bundleID: testBundle, environment: .production, channel: "match-2", dueAt: 200)
                try store.saveRetirement(bundleID: testBundle, environment: .production, channel: "match-1", dueAt: 150)
                #expect(
                    try store.pendingRetirements(bundleID: testBundle, environment: .production)
                        == ["match-1": 150, "match-2": 200])
                try store.removeRetirements(
                    bundleID: testBundle, environment: .production, channels: ["match-1", "unknown"])
                try store.removeRetirements(
                    bundleID: "com.example.none", environment: .production, channels: ["match-2"])
                try store.removeRetirements(bundleID: testBundle, environment: .production, channels: [])
                #expect(
                    try store.pendingRetirements(bundleID: testBundle, environment: .production) == ["match-2": 200])
            }
        }

        @Test(arguments: StoreKind.allCases)
        func retirementsSurviveReopening(_ kind: StoreKind) throws {
            try withDatabase(kind) { database in
                let first = try database.open()
                try first.saveRetirement(
                    bundleID: testBundle, environment: .sandbox, channel: "match-9", dueAt: 1_700_000_000)
                try database.close(first)
                let second = try database.open()
                defer { try? database.close(second) }
                #expect(
                    try second.pendingRetirements(bundleID: testBundle, environment: .sandbox)
                        == ["match-9": 1_700_000_000])
            }
        }

        @Test(arguments: StoreKind.allCases)
        func pruningKeepsTheNewestReportsOfEachApp(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
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
                #expect(
                    try store.waveReports(bundleID: testBundle, environment: .production, limit: 10).map(\.id) == [
                        5, 4, 3,
                    ])
                #expect(
                    try store.waveReports(bundleID: other, environment: .production, limit: 10).map(\.id) == [8, 7])
                #expect(try store.pruneWaveReports(keeping: 3) == 0)
                #expect(try store.pruneWaveReports(keeping: 0) == 5)
                #expect(try store.waveReports(bundleID: other, environment: .production, limit: 10).isEmpty)
                // Unfinished waves are never pruned, and ids are not reused after their reports go.
                #expect(
                    try store.unfinishedWaves(bundleID: testBundle, environment: .production).map(\.record.id) == [6])
                #expect(try store.lastWaveID() == 8)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func lastWaveIDSurvivesReopeningAndPruning(_ kind: StoreKind) throws {
            try withDatabase(kind) { database in
                do {
                    let store = try database.open()
                    defer { try? database.close(store) }
                    #expect(try store.lastWaveID() == 0)
                    try store.saveWave(makeWave(41))
                    try store.saveWave(makeWave(12))
                    #expect(try store.lastWaveID() == 41)
                    try store.completeWave(makeReport(makeWave(41)))
                    try store.completeWave(makeReport(makeWave(12)))
                    #expect(try store.pruneWaveReports(keeping: 0) == 2)
                }
                let store = try database.open()
                defer { try? database.close(store) }
                #expect(try store.lastWaveID() == 41)
                try store.saveWave(makeWave(UInt64(Int64.max)))
                #expect(try store.lastWaveID() == UInt64(Int64.max))
            }
        }

        @Test(arguments: StoreKind.allCases)
        func closedStoreRefusesWaveCalls(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
                try database.close(store)
                let message = storageMessage { try store.saveWave(makeWave(1)) }
                #expect(message?.contains("saving wave 1") == true, "\(message ?? "no error")")
                #expect(throws: RegistryError.self) { try store.lastWaveID() }
            }
        }

        @Test(arguments: StoreKind.allCases)
        func refusedCallsChangeNothing(_ kind: StoreKind) throws {
            try withWaveStore(kind) { store, database in
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
                #expect(
                    throws: RegistryError.invalidWave(
                        id: 1, reason: "the report's app, timestamp differ from the saved wave's")
                ) {
                    try store.completeWave(elsewhere)
                }
                #expect(try store.waveReport(id: 1) == nil)

                var negative = makeReport(wave)
                negative.resentAfterRestart = -1
                #expect(
                    throws: RegistryError.invalidWave(id: 1, reason: "the report's resentAfterRestart is negative (-1)")
                ) {
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
                #expect(
                    throws: RegistryError.invalidWave(
                        id: huge, reason: "the id is above \(Int64.max), the largest a store keeps")
                ) {
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
                #expect(try database.scalar("SELECT count(*) FROM wave_checkpoints", store) == 0)
                #expect(
                    try store.unfinishedWaves(bundleID: testBundle, environment: .production) == [
                        UnfinishedWave(record: wave, checkpoints: [])
                    ])
                #expect(try store.lastWaveID() == 1)
                #expect(RegistryError.unknownWave(id: 2).description == "wave 2 is unknown (never saved, or pruned)")
            }
        }

        /// Rows changed behind the store's back (raw SQL): each read that meets one fails with a `.storage` error
        /// naming the wave, and nothing traps.
    }
}

/// Rows changed behind PostgresTokenStore's back (psql; what the column types still allow): each read that meets
/// one fails with a `.storage` error naming the wave, and nothing traps. (The SQLite counterparts, with wrong
/// column types too, are in FanfareSQLiteTests.)
extension PostgresSuites {
    @Suite("WaveStore: corrupt PostgreSQL rows", .serialized)
    struct PostgresWaveCorruptionTests {
        @Test(arguments: [
            ("UPDATE apps SET environment = 9", "wave 7 is corrupt in the database: environment is unknown (9)"),
            ("UPDATE waves SET failed_by_reason = 'BadTopic=x'", "failed_by_reason has a count that is not"),
            ("UPDATE waves SET failed_by_reason = 'A=1;A=2'", "failed_by_reason names 'A' twice"),
            ("UPDATE waves SET delivered = -3", "wave 7 is corrupt in the database: delivered is negative (-3)"),
            ("UPDATE waves SET makespan = -1", "wave 7 is corrupt in the database: makespan is negative (-1)"),
            (
                "UPDATE waves SET broadcast_requests = NULL, report_broadcast_channel_id = 'c'",
                "wave 7 is corrupt in the database: broadcast_subscribers is NULL"
            ),
            ("UPDATE waves SET id = -7", "wave -7 is corrupt in the database: id is negative (-7)"),
        ])
        func corruptReportRowsAreStorageErrors(sql: String, expected: String) throws {
            try withWaveStore(.postgres) { store, database in
                try store.saveWave(makeWave(7))
                try store.completeWave(makeReport(makeWave(7)))
                try database.execute(sql, store)
                // Listing selects by app (an app whose environment changed has none); by id needs the id intact.
                if !sql.contains("environment") {
                    let listed = storageMessage {
                        _ = try store.waveReports(bundleID: testBundle, environment: .production, limit: 5)
                    }
                    #expect(listed?.contains(expected) == true, "\(listed ?? "no error")")
                }
                if !sql.contains("id = -7") {
                    let byID = storageMessage { _ = try store.waveReport(id: 7) }
                    #expect(byID?.contains(expected) == true, "\(byID ?? "no error")")
                }
            }
        }

        @Test(arguments: [
            (
                "UPDATE wave_checkpoints SET shard = -1",
                "a checkpoint of wave 7 is corrupt in the database: shard is negative (-1)"
            ),
            (
                "UPDATE waves SET start_keys = '\\x0102030405'",
                "wave 7 is corrupt in the database: start_keys holds 5 bytes, not a multiple of 8"
            ),
            ("UPDATE waves SET shard_count = -2", "wave 7 is corrupt in the database: shard_count is negative (-2)"),
        ])
        func corruptUnfinishedRowsAreStorageErrors(sql: String, expected: String) throws {
            try withWaveStore(.postgres) { store, database in
                try store.saveWave(makeWave(7))
                try store.saveCheckpoints([checkpoint(7, shard: 0, byte: 1)])
                try database.execute(sql, store)
                let message = storageMessage {
                    _ = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
                }
                #expect(message?.contains(expected) == true, "\(message ?? "no error")")
                // The store goes on: other calls still work.
                #expect(try store.lastWaveID() == 7)
            }
        }
    }
}

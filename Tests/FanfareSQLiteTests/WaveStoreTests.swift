import FanfareCore
import FanfareTestSupport
import Foundation
import Testing

@testable import FanfareSQLite
import FanfareStorage

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

private func checkpoint(
    _ waveID: UInt64, shard: Int, byte: UInt8, bytes: Int = 16, savedAt: Int64 = 1
)
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

@Suite("WaveStore: SQLite", .ownThread)
struct WaveStoreTests {
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
            let listed = storageMessage {
                _ = try store.waveReports(bundleID: testBundle, environment: .production, limit: 5)
            }
            #expect(byID?.contains("wave 7 is corrupt in the database: \(problem)") == true, "\(byID ?? "no error")")
            #expect(listed == byID)
        }
    }

    @Test(arguments: [
        (
            "UPDATE wave_checkpoints SET shard = -1",
            "a checkpoint of wave 7 is corrupt in the database: shard is negative (-1)"
        ),
        (
            "UPDATE wave_checkpoints SET data = 'text'",
            "a checkpoint of wave 7 is corrupt in the database: data is not a BLOB"
        ),
        (
            "UPDATE waves SET start_keys = x'0102030405'",
            "wave 7 is corrupt in the database: start_keys holds 5 bytes, not a multiple of 8"
        ),
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
            let message = storageMessage {
                _ = try store.unfinishedWaves(bundleID: testBundle, environment: .production)
            }
            #expect(message?.contains(expected) == true, "\(message ?? "no error")")
        }
    }

    @Test func corruptChannelRowsAreStorageErrors() throws {
        try withStore { store, _ in
            try store.saveWave(makeWave(1))
            try store.saveRetirement(bundleID: testBundle, environment: .production, channel: "match-1", dueAt: 5)
            try store.execute(sql: "UPDATE channel_latest SET timestamp = 'late'")
            try store.execute(sql: "UPDATE pending_retirements SET channel = x'41'")
            let latest = storageMessage {
                _ = try store.latestTimestamps(bundleID: testBundle, environment: .production)
            }
            #expect(
                latest?.contains("a row of channel_latest is corrupt in the database: value is not an integer") == true)
            let pending = storageMessage {
                _ = try store.pendingRetirements(bundleID: testBundle, environment: .production)
            }
            #expect(
                pending?.contains("a row of pending_retirements is corrupt in the database: channel is not text")
                    == true)
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
        #expect(try store.rows("SELECT count(*) FROM grdb_migrations") == 6)
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
            #expect(
                message?.contains("saving wave 1 failed: a value of 1001 bytes is longer than SQLite stores") == true,
                "\(message ?? "no error")")
            let long = String(repeating: "c", count: 1_001)
            #expect(
                storageMessage {
                    try store.saveRetirement(bundleID: testBundle, environment: .production, channel: long, dueAt: 1)
                }?.contains("a value of 1001 bytes") == true)
            try store.saveWave(makeWave(2, payloadBytes: 100))
            #expect(
                storageMessage { try store.saveCheckpoints([checkpoint(2, shard: 0, byte: 1, bytes: 1_001)]) } != nil)
            #expect(try store.unfinishedWaves(bundleID: testBundle, environment: .production).map(\.record.id) == [2])
            #expect(try store.rows("SELECT count(*) FROM wave_checkpoints") == 0)
            #expect(try store.pendingRetirements(bundleID: testBundle, environment: .production).isEmpty)
        }
    }

}

@Suite("WaveStore: column encodings", .ownThread)
struct WaveColumnEncodingTests {
    @Test func startKeysAreBigEndianEightBytesEach() throws {
        let bytes = WaveColumnEncoding.startKeys([0x0102_0304_0506_0708, 0, UInt64.max])
        #expect(bytes.count == 24)
        #expect(Array(bytes[0..<8]) == [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(
            try bytes.withUnsafeBytes { try WaveColumnEncoding.startKeys($0) } == [
                0x0102_0304_0506_0708, 0, UInt64.max,
            ])
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

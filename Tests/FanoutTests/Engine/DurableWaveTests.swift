// Issue 11: durable waves. An engine abandoned mid-wave (what kill -9 leaves in the store) and a new engine on
// the same database file: the wave completes, nothing is lost, resends stay within the checkpoint window and
// carry the first attempt's apns-id; latest state wins across the restart; retirements survive it; a graceful
// shutdown resumes with no duplicate. Real simulator over loopback, real SQLite file.
import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareSQLite
import FanfareStorage
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

@Suite(.serialized, .ownThread) struct DurableWaveTests {
    static let window = 2_000

    /// A simulator slow enough that a wave takes many seconds however loaded the machine (200 ms per push, and
    /// the engines below keep 2 x 50 streams: at most 500 pushes/s), so a test can stop it mid-way.
    static func simulator() -> SimulatorConfiguration {
        var configuration = SimulatorConfiguration()
        configuration.latency = .fixed(nanoseconds: 200_000_000)
        return configuration
    }

    static let streams = 50

    static func engine(_ harness: TestHarness, _ store: SQLiteTokenStore) throws -> FanoutEngine {
        var client = try harness.clientConfiguration()
        client.workerCount = 2
        client.connectionsPerWorker = 1
        client.maxConcurrentStreamsPerConnection = streams
        var configuration = FanoutConfiguration(client: client, bundleID: Fixture.bundleID, environment: .production)
        configuration.minimumInterval = nil
        configuration.retryDelays = [.milliseconds(10), .milliseconds(20), .milliseconds(40)]
        configuration.checkpoints = CheckpointConfiguration(interval: .milliseconds(20), pushes: 500, window: window)
        configuration.defaultDismissalWindow = .zero
        return try FanoutEngine(configuration: configuration, store: store, waveStore: store)
    }

    @Test func aWaveAbandonedMidWayCompletesOnTheNextEngineWithinTheWindow() async throws {
        let harness = try TestHarness(Self.simulator())
        defer { harness.shutdown() }
        let path = harness.directory + "/durable.db"
        let count = 6_000
        var store = try SQLiteTokenStore(path: path)
        var engine = try Self.engine(harness, store)
        try engine.register(FanoutFixture.registrations(0..<count, channel: "match"))
        let wave = try engine.publish(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        let id = wave.id
        // Abandoned from a thread of its own the moment a third is delivered: a busy cooperative pool could
        // otherwise look too late, after the wave ended.
        let abandoning = engine
        let abandoned: Void? = try await perform(when: { wave.report.delivered >= count / 3 }, timeout: .seconds(60)) {
            abandoning.abandonForTesting()
        }
        try #require(abandoned != nil, "a third of the wave delivered within 60 s")
        let before = wave.report
        try #require(!wave.isComplete, "the wave must still run when the engine is abandoned")
        try store.close()

        store = try SQLiteTokenStore(path: path)
        engine = try Self.engine(harness, store)
        let resumed = try #require(engine.wave(id: id))
        #expect(await eventually(timeout: .seconds(60)) { resumed.isComplete })
        let report = resumed.report
        #expect(report.delivered == count && report.targeted == count && report.accounted == count, "\(report)")
        #expect(report.restarts == 1)
        await engine.shutdown()

        let log = try harness.acceptedIDsByToken()
        #expect(log.count == count, "every token at least once")
        let duplicates = log.values.filter { $0.count > 1 }
        // Everything sent after the last durable checkpoint may go again: at most the window per shard, plus
        // what was in flight (2 shards x 50 streams).
        #expect(duplicates.count <= 2 * Self.window + 2 * Self.streams, "\(duplicates.count) duplicates")
        #expect(duplicates.allSatisfy { Set($0).count == 1 }, "a resend carries its first attempt's apns-id")
        #expect(report.resentAfterRestart >= duplicates.count)
        #expect(report.resentAfterRestart <= 2 * Self.window + 2 * Self.streams)
        print(
            "durable waves, in-process crash: \(count) tokens, abandoned at \(before.delivered) delivered; "
                + "\(duplicates.count) duplicates in the log, resentAfterRestart \(report.resentAfterRestart)")
    }

    @Test func aGracefulShutdownResumesWithNoDuplicate() async throws {
        let harness = try TestHarness(Self.simulator())
        defer { harness.shutdown() }
        let path = harness.directory + "/durable.db"
        let count = 3_000
        var store = try SQLiteTokenStore(path: path)
        var engine = try Self.engine(harness, store)
        try engine.register(FanoutFixture.registrations(0..<count, channel: "match"))
        let wave = try engine.publish(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        let stopping = engine
        let stopped: Void? = try await perform(when: { wave.report.delivered >= count / 3 }, timeout: .seconds(60)) {
            stopping.shutdown()
        }
        try #require(stopped != nil, "a third of the wave delivered within 60 s")
        #expect(wave.state == .interrupted)
        try store.close()

        store = try SQLiteTokenStore(path: path)
        engine = try Self.engine(harness, store)
        let resumed = try #require(engine.wave(id: wave.id))
        #expect(await eventually(timeout: .seconds(60)) { resumed.isComplete })
        let report = resumed.report
        #expect(report.delivered == count && report.accounted == report.targeted, "\(report)")
        #expect(report.resentAfterRestart == 0)
        await engine.shutdown()
        let log = try harness.acceptedIDsByToken()
        #expect(log.count == count && log.values.allSatisfy { $0.count == 1 }, "no duplicate after a graceful restart")
    }

    /// A shard whose cursor had not moved when it was checkpointed (its first key differs from the walk's end,
    /// the origin, yet both name the same position) still owes its whole range after the restart.
    @Test func aShutdownBeforeAnyPushResumesTheWholeWave() async throws {
        let harness = try TestHarness(Self.simulator())
        defer { harness.shutdown() }
        let path = harness.directory + "/durable.db"
        let count = 400
        var store = try SQLiteTokenStore(path: path)
        var engine = try Self.engine(harness, store)
        try engine.register(FanoutFixture.registrations(0..<count, channel: "match"))
        let wave = try engine.publish(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        await engine.shutdown()
        #expect(wave.state == .interrupted || wave.isComplete == false)
        try store.close()

        store = try SQLiteTokenStore(path: path)
        engine = try Self.engine(harness, store)
        let resumed = try #require(engine.wave(id: wave.id))
        #expect(await eventually(timeout: .seconds(60)) { resumed.isComplete })
        let report = resumed.report
        #expect(report.targeted == count && report.delivered == count && report.accounted == count, "\(report)")
        await engine.shutdown()
        let log = try harness.acceptedIDsByToken()
        #expect(log.count == count && log.values.allSatisfy { $0.count == 1 }, "every token once")
    }

    @Test func latestStateWinsAcrossARestart() async throws {
        let harness = try TestHarness(Self.simulator())
        defer { harness.shutdown() }
        let path = harness.directory + "/durable.db"
        let count = 2_000
        var store = try SQLiteTokenStore(path: path)
        var engine = try Self.engine(harness, store)
        try engine.register(FanoutFixture.registrations(0..<count, channel: "match"))
        let first = try engine.publish(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        let second = try engine.publish(scoreUpdate(channel: "match", timestamp: 1_800_000_002, home: 2, away: 0))
        let abandoning = engine
        let abandoned: Void? = try await perform(when: { second.report.delivered >= count / 4 }, timeout: .seconds(60))
        {
            abandoning.abandonForTesting()
        }
        try #require(abandoned != nil, "a quarter of the newer wave delivered within 60 s")
        try store.close()

        store = try SQLiteTokenStore(path: path)
        engine = try Self.engine(harness, store)
        // An older state than the newest published before the crash is refused.
        #expect(throws: PublishError.self) {
            try engine.publish(scoreUpdate(channel: "match", timestamp: 1_800_000_000, home: 0, away: 0))
        }
        // The older wave ended superseded (before the crash, or at the restart); the newer one resumes.
        let newWave = try #require(engine.wave(id: second.id))
        #expect(
            await eventually(timeout: .seconds(60)) {
                newWave.isComplete && (try? engine.report(id: first.id))??.isComplete == true
            })
        let oldReport = try #require(try engine.report(id: first.id))
        #expect(oldReport.accounted == oldReport.targeted && oldReport.targeted == count, "\(oldReport)")
        #expect(newWave.report.delivered == count && newWave.report.accounted == count, "\(newWave.report)")
        await engine.shutdown()
        // Every token's last accepted push carries the newest score.
        var last: [String: String] = [:]
        for record in try harness.acceptedLog() {
            if let token = record.string("token") { last[token] = record.line }
        }
        #expect(last.count == count)
        #expect(last.values.allSatisfy { $0.contains(#""home":2"#) })
    }

    @Test func reportsAndRetirementsSurviveARestart() async throws {
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        let path = harness.directory + "/durable.db"
        var store = try SQLiteTokenStore(path: path)
        var engine = try Self.engine(harness, store)
        try engine.register(FanoutFixture.registrations(0..<50, channel: "ended"))
        var end = LiveActivityContent(event: .end, timestamp: 1_800_000_010)
        end.contentState = try RawJSON(validating: #"{"home":3,"away":1}"#)
        let wave = try engine.publish(ChannelUpdate(channel: "ended", content: end))
        await wave.completion()
        #expect(wave.isComplete)
        // The end wave's retirement is due at once (defaultDismissalWindow 0) but no maintenance ran yet. Crash
        // once the final report and the retirement are on disk (the checkpoint thread writes them).
        #expect(await eventually { (try? store.waveReport(id: wave.id)) != nil })
        #expect(
            await eventually {
                (try? store.pendingRetirements(bundleID: Fixture.bundleID, environment: .production))?.isEmpty == false
            })
        engine.abandonForTesting()
        try store.close()

        store = try SQLiteTokenStore(path: path)
        engine = try Self.engine(harness, store)
        let report = try #require(try engine.report(id: wave.id))
        #expect(report.isComplete && report.delivered == 50)
        engine.runMaintenance()
        #expect(try store.count() == 0, "the ended channel's tokens were retired after the restart")
        await engine.shutdown()
    }

    @Test func checkpointBytesRoundTripAndDamageIsAnError() throws {
        var checkpoint = ShardCheckpoint()
        checkpoint.restarts = 2
        checkpoint.counters.targeted = 10
        checkpoint.counters.delivered = 4
        checkpoint.counters.failed = 1
        checkpoint.failures = ["BadTopic": 1]
        checkpoint.from = WalkKey(hash: 42, token: makeToken(1))
        checkpoint.to = .origin
        checkpoint.highWater = WalkKey(hash: 99, token: nil)
        checkpoint.pending = [.init(hash: 7, possiblySent: true), .init(hash: 8, possiblySent: false)]
        let bytes = checkpoint.encoded()
        #expect(try ShardCheckpoint(decoding: bytes) == checkpoint)
        for cut in [0, 1, 10, bytes.count - 1] {
            #expect(throws: ShardCheckpoint.DecodingError.self) {
                try ShardCheckpoint(decoding: Array(bytes.prefix(cut)))
            }
        }
        var damaged = bytes
        damaged[0] = 9
        #expect(throws: ShardCheckpoint.DecodingError.self) { try ShardCheckpoint(decoding: damaged) }

        // The broadcast shard's checkpoints carry the wave's broadcast (version 2).
        checkpoint.broadcast = ShardCheckpoint.Broadcast(
            outcome: BroadcastOutcome.failed.rawValue, reason: "TooManyRequests", requests: 4, priority: 10,
            downgraded: true,
            resent: false, possiblySent: true)
        let withBroadcast = checkpoint.encoded()
        #expect(withBroadcast[0] == ShardCheckpoint.broadcastVersion && bytes[0] == ShardCheckpoint.version)
        #expect(try ShardCheckpoint(decoding: withBroadcast) == checkpoint)
        for cut in [bytes.count, withBroadcast.count - 1] {
            #expect(throws: ShardCheckpoint.DecodingError.self) {
                try ShardCheckpoint(decoding: Array(withBroadcast.prefix(cut)))
            }
        }
        var badOutcome = withBroadcast
        badOutcome[bytes.count] = 200
        #expect(throws: ShardCheckpoint.DecodingError.self) { try ShardCheckpoint(decoding: badOutcome) }
    }
}

/// The real SQLite store with one fault switched in: checkpoint writes fail as on a full disk.
final class DiskFullWaveStore: WaveStore, @unchecked Sendable {
    let inner: SQLiteTokenStore
    let full = Mutex(false)
    init(_ inner: SQLiteTokenStore) { self.inner = inner }

    func saveWave(_ wave: WaveRecord) throws(RegistryError) { try inner.saveWave(wave) }
    func saveWaves(_ waves: [WaveRecord]) throws(RegistryError) { try inner.saveWaves(waves) }
    func publicationParts(of id: UInt64) throws(RegistryError) -> [UInt64] { try inner.publicationParts(of: id) }
    func saveCheckpoints(_ checkpoints: [WaveCheckpoint]) throws(RegistryError) {
        if full.withLock({ $0 }) { throw .storage("database or disk is full (SQLite error 13, injected)") }
        try inner.saveCheckpoints(checkpoints)
    }
    func completeWave(_ report: WaveReportRecord) throws(RegistryError) { try inner.completeWave(report) }
    func unfinishedWaves(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [UnfinishedWave] {
        try inner.unfinishedWaves(bundleID: bundleID, environment: environment)
    }
    func waveReport(id: UInt64) throws(RegistryError) -> WaveReportRecord? { try inner.waveReport(id: id) }
    func waveReports(
        bundleID: String, environment: APNsEnvironment, limit: Int
    ) throws(RegistryError) -> [WaveReportRecord] {
        try inner.waveReports(bundleID: bundleID, environment: environment, limit: limit)
    }
    func latestTimestamps(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [String: Int64] {
        try inner.latestTimestamps(bundleID: bundleID, environment: environment)
    }
    func lastWaveID() throws(RegistryError) -> UInt64 { try inner.lastWaveID() }
    func saveRetirement(
        bundleID: String, environment: APNsEnvironment, channel: String, dueAt: Int64
    ) throws(RegistryError) {
        try inner.saveRetirement(bundleID: bundleID, environment: environment, channel: channel, dueAt: dueAt)
    }
    func removeRetirements(bundleID: String, environment: APNsEnvironment, channels: [String]) throws(RegistryError) {
        try inner.removeRetirements(bundleID: bundleID, environment: environment, channels: channels)
    }
    func pendingRetirements(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [String: Int64] {
        try inner.pendingRetirements(bundleID: bundleID, environment: environment)
    }
    func pruneWaveReports(keeping: Int) throws(RegistryError) -> Int { try inner.pruneWaveReports(keeping: keeping) }
}

@Suite(.ownThread) struct DurableWaveFaultTests {
    @Test func whenCheckpointsCannotBeWrittenTheWaveStallsAtTheWindowThenGoesOn() async throws {
        let harness = try TestHarness(DurableWaveTests.simulator())
        defer { harness.shutdown() }
        let store = try SQLiteTokenStore(path: harness.directory + "/durable.db")
        let faulty = DiskFullWaveStore(store)
        faulty.full.withLock { $0 = true }
        var client = try harness.clientConfiguration()
        client.workerCount = 2
        client.connectionsPerWorker = 1
        client.maxConcurrentStreamsPerConnection = DurableWaveTests.streams
        var configuration = FanoutConfiguration(client: client, bundleID: Fixture.bundleID, environment: .production)
        configuration.minimumInterval = nil
        configuration.checkpoints = CheckpointConfiguration(interval: .milliseconds(20), pushes: 500, window: 1_000)
        let engine = try FanoutEngine(configuration: configuration, store: store, waveStore: faulty)
        defer { engine.shutdown() }
        let count = 4_000
        try engine.register(FanoutFixture.registrations(0..<count, channel: "match"))
        let wave = try engine.publish(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        // No checkpoint reaches the disk: each shard sends its first window and waits.
        #expect(await eventually { engine.statistics.checkpointErrors > 0 && wave.report.delivered >= 1_000 })
        try await Task.sleep(for: .milliseconds(300))
        #expect(wave.report.sent <= 2 * 1_000, "\(wave.report.sent) sent with no durable checkpoint")
        #expect(!wave.isComplete)
        #expect(engine.statistics.lastCheckpointError?.contains("disk is full") == true)
        // The disk has room again: the retried checkpoints land and the wave completes, every token accounted.
        faulty.full.withLock { $0 = false }
        #expect(await eventually(timeout: .seconds(60)) { wave.isComplete })
        #expect(wave.report.delivered == count && wave.report.accounted == count)
    }
}

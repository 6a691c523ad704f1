// Issue 12: the audience planner. A channel linked to an APNs broadcast channel sends each update once as a
// broadcast (for the activities subscribed to the channel) and per-token to the rest, never both to one
// activity; latest state wins on both paths; kick-offs carry input-push-channel for iOS 18+ devices only; the
// link and its channel go after the match ends; a crash mid-wave resends the broadcast with its first id.
// Real simulator (push and management listeners) over TLS + HTTP/2, real SQLite file.
import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareSQLite
import FanfareStorage
import FanfareSimulator
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct BroadcastPlannerTests {
    static func engine(
        _ harness: TestHarness, _ store: SQLiteTokenStore, streams: Int = 100, durable: Bool = false,
        configure: (inout FanoutConfiguration) -> Void = { _ in }
    ) throws -> FanoutEngine {
        var client = try harness.clientConfiguration()
        client.workerCount = 2
        client.connectionsPerWorker = 1
        client.maxConcurrentStreamsPerConnection = streams
        var configuration = FanoutConfiguration(client: client, bundleID: Fixture.bundleID, environment: .production)
        configuration.minimumInterval = nil
        configuration.retryDelays = [.milliseconds(10), .milliseconds(20), .milliseconds(40)]
        configuration.defaultDismissalWindow = .zero
        var management = ChannelManagementConfiguration(
            host: "127.0.0.1", port: harness.managementPort, tls: harness.keys.clientTLS,
            providerTokens: try ProviderTokenSource(signer: harness.signer()), bundleID: Fixture.bundleID)
        management.requestTimeout = TestTime.scaled(Liveness.condition)
        configuration.channelManagement = management
        if durable {
            configuration.checkpoints = CheckpointConfiguration(interval: .milliseconds(20), pushes: 200, window: 1_000)
        }
        configure(&configuration)
        return try FanoutEngine(configuration: configuration, store: store, waveStore: durable ? store : nil)
    }

    /// Broadcast subscriptions for activities `range` (the ids `FanoutFixture.registrations` gives update tokens).
    static func subscriptions(_ range: Range<Int>, channel: String) -> [BroadcastSubscription] {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        return range.map {
            BroadcastSubscription(
                activityID: "activity-\($0)", deviceID: "device-\($0)", attributesType: "MatchAttributes",
                bundleID: Fixture.bundleID,
                environment: .production, channels: [channel], createdAt: now)
        }
    }

    static func broadcasts(_ log: [AcceptedRecord]) -> [AcceptedRecord] {
        log.filter { $0.string("channel-id") != nil }
    }
    static func tokenPushes(_ log: [AcceptedRecord]) -> [AcceptedRecord] { log.filter { $0.string("token") != nil } }

    @Test func aMixedAudienceGetsOneBroadcastAndPerTokenPushesForExactlyTheRest() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let store = try SQLiteTokenStore(path: harness.directory + "/planner.db")
        let engine = try Self.engine(harness, store)
        defer { engine.shutdown() }
        let link = try await engine.createBroadcastChannel(for: "match", storagePolicy: .noMessageStored)
        #expect(link.createdByUs && link.storagePolicy == 0)
        // 1,000 activities with update tokens; 400 of them move to the broadcast channel (started again from a
        // kick-off with input-push-channel): their update tokens go, one path per activity.
        let tokens = FanoutFixture.registrations(0..<1_000, channel: "match")
        try engine.register(tokens)
        let result = try engine.register([], subscriptions: Self.subscriptions(0..<400, channel: "match"))
        #expect(Set(result.replacedTokens) == Set(tokens.prefix(400).map(\.token)))
        #expect(try engine.broadcastSubscribers(of: "match") == 400)

        let wave = try engine.publish(
            scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0, alert: true))
        #expect(wave.waitUntilComplete(timeout: TestTime.scaled(.seconds(60))))
        let report = wave.report
        #expect(report.targeted == 600 && report.delivered == 600 && report.accounted == 600, "\(report)")
        let broadcast = try #require(report.broadcast)
        #expect(
            broadcast.outcome == .delivered && broadcast.subscribers == 400 && broadcast.requests == 1, "\(broadcast)")
        #expect(broadcast.priority == 10 && broadcast.channelID == link.channelID)
        await engine.shutdown()
        await harness.shutdown()

        let log = try harness.acceptedLog()
        let broadcasts = Self.broadcasts(log)
        #expect(broadcasts.count == 1, "exactly one broadcast per update")
        #expect(broadcasts.first?.string("channel-id") == link.channelID)
        #expect(broadcasts.first?.line.contains(#""home":1"#) == true)
        let pushed = Set(Self.tokenPushes(log).compactMap { $0.string("token") })
        #expect(pushed == Set(tokens.dropFirst(400).map(\.token.hexString)), "per-token pushes for exactly the rest")
        #expect(Self.tokenPushes(log).count == 600, "each once")
    }

    @Test func overlappingUpdatesLatestStateWinsOnBothPaths() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 100_000_000)
        let harness = try TestHarness(simulator, management: true)
        defer { harness.shutdown() }
        let store = try SQLiteTokenStore(path: harness.directory + "/planner.db")
        let engine = try Self.engine(harness, store, streams: 20)
        defer { engine.shutdown() }
        let link = try await engine.createBroadcastChannel(for: "derby", storagePolicy: .noMessageStored)
        try engine.register(FanoutFixture.registrations(0..<700, channel: "derby"))
        try engine.register([], subscriptions: Self.subscriptions(0..<300, channel: "derby"))
        // Three goals faster than a wave (2 x 20 streams at 100 ms: 400 pushes/s, 400 tokens take a second).
        let waves = try (1...3).map { home in
            try engine.publish(
                scoreUpdate(channel: "derby", timestamp: 1_800_000_000 + Int64(home), home: home, away: 0, alert: true))
        }
        for wave in waves { #expect(wave.waitUntilComplete(timeout: TestTime.scaled(.seconds(60)))) }
        let reports = waves.map(\.report)
        for report in reports {
            #expect(report.accounted == report.targeted, "\(report)")
            #expect(report.broadcast?.outcome == .delivered || report.broadcast?.outcome == .superseded, "\(report)")
        }
        // The newest broadcast always goes. An older one goes only if it was out before the newer arrived (the
        // middle one is usually superseded while the first is out, but a slow test thread can publish it late).
        #expect(reports[2].broadcast?.outcome == .delivered)
        await engine.shutdown()
        await harness.shutdown()
        let log = try harness.acceptedLog()
        let broadcasts = Self.broadcasts(log)
        #expect(broadcasts.count == reports.filter { $0.broadcast?.outcome == .delivered }.count)
        #expect(broadcasts.allSatisfy { $0.string("channel-id") == link.channelID })
        #expect(broadcasts.last?.line.contains(#""home":3"#) == true, "the last broadcast carries the newest score")
        // Never an older score after a newer one on the broadcast path.
        let scores = broadcasts.compactMap { record in (1...3).first { record.line.contains(#""home":\#($0)"#) } }
        #expect(scores.count == broadcasts.count && scores == scores.sorted(), "\(scores)")
        // Every token's last push carries the newest score; no token of a subscribed activity got one.
        var last: [String: String] = [:]
        for record in Self.tokenPushes(log) { last[record.string("token")!] = record.line }
        #expect(last.count == 400)
        #expect(last.values.allSatisfy { $0.contains(#""home":3"#) })
    }

    @Test func aKickOffCarriesInputPushChannelForIOS18DevicesOnly() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let store = try SQLiteTokenStore(path: harness.directory + "/planner.db")
        let engine = try Self.engine(harness, store)
        defer { engine.shutdown() }
        let link = try await engine.createBroadcastChannel(for: "final", storagePolicy: .noMessageStored)
        var starters = FanoutFixture.registrations(0..<10, channel: "final", kind: .pushToStart)
        for index in 0..<5 { starters[index].supportsBroadcast = true }
        try engine.register(starters)
        var content = LiveActivityContent(event: .start, timestamp: 1_800_000_000)
        content.contentState = try RawJSON(validating: #"{"home":0,"away":0}"#)
        content.alert = LiveActivityAlert(title: .plain("Kick-off"), body: .plain("final"))
        content.attributesType = "MatchAttributes"
        content.attributes = try RawJSON(validating: #"{"match":"final"}"#)
        let wave = try engine.publish(ChannelUpdate(channel: "final", content: content))
        #expect(wave.waitUntilComplete(timeout: TestTime.scaled(.seconds(30))))
        #expect(wave.report.delivered == 10 && wave.report.broadcast == nil, "a start is never broadcast")
        await engine.shutdown()
        await harness.shutdown()
        let log = try harness.acceptedLog()
        #expect(Self.broadcasts(log).isEmpty)
        let withChannel = Set(
            log.filter { $0.line.contains(#""input-push-channel":"\#(link.channelID)""#) }.compactMap {
                $0.string("token")
            })
        #expect(withChannel == Set(starters.prefix(5).map(\.token.hexString)))
        #expect(log.filter { $0.line.contains("input-push-channel") }.count == 5)
    }

    @Test func aBroadcastAtPriority10SpendsTheChannelsBudgetOnceForEveryActivity() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let store = try SQLiteTokenStore(path: harness.directory + "/planner.db")
        let engine = try Self.engine(harness, store) { $0.standardBudget = PriorityBudgetProfile(perHour: 1, burst: 2) }
        defer { engine.shutdown() }
        try await engine.createBroadcastChannel(for: "budget", storagePolicy: .noMessageStored)
        try engine.register([], subscriptions: Self.subscriptions(0..<50, channel: "budget"))
        var reports: [BroadcastReport] = []
        for goal in 1...4 {
            let wave = try engine.publish(
                scoreUpdate(
                    channel: "budget", timestamp: 1_800_000_000 + Int64(goal), home: goal, away: 0, alert: true,
                    priority: .immediate))
            #expect(wave.waitUntilComplete(timeout: TestTime.scaled(.seconds(30))))
            reports.append(try #require(wave.report.broadcast))
            // A maintenance sweep between goals (the channel has no token, only subscribers) keeps what the
            // budget remembers.
            engine.forgetUnusedChannels()
        }
        // A burst of two at 10, then 5: the 50 subscribers share one budget, spent once per broadcast.
        #expect(reports.map(\.priority) == [10, 10, 5, 5], "\(reports)")
        #expect(reports.map(\.downgraded) == [false, false, true, true])
        #expect(reports.allSatisfy { $0.outcome == .delivered && $0.subscribers == 50 })
        await engine.shutdown()
        await harness.shutdown()
        #expect(Self.broadcasts(try harness.acceptedLog()).map { $0.int("priority") } == [10, 10, 5, 5])
    }

    @Test func theEndRetiresTheLinkAndDeletesTheChannelFanfareCreated() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let store = try SQLiteTokenStore(path: harness.directory + "/planner.db")
        let engine = try Self.engine(harness, store)
        defer { engine.shutdown() }
        let link = try await engine.createBroadcastChannel(for: "cup", storagePolicy: .mostRecentMessageStored)
        let given = try await engine.createBroadcastChannel(for: "other", storagePolicy: .noMessageStored)
        try engine.register(FanoutFixture.registrations(0..<20, channel: "cup"))
        try engine.register([], subscriptions: Self.subscriptions(0..<10, channel: "cup"))
        var end = LiveActivityContent(event: .end, timestamp: 1_800_000_010)
        end.contentState = try RawJSON(validating: #"{"home":2,"away":1}"#)
        end.dismissalDate = 1_800_000_010
        let wave = try engine.publish(ChannelUpdate(channel: "cup", content: end))
        #expect(wave.waitUntilComplete(timeout: TestTime.scaled(.seconds(30))))
        #expect(wave.report.broadcast?.outcome == .delivered)
        #expect(
            await eventually {
                engine.runMaintenance()
                return (try? engine.broadcastLink(of: "cup")) == .some(nil)
            })
        #expect(try engine.broadcastSubscribers(of: "cup") == 0, "the subscriptions retired with the channel")
        #expect(try engine.broadcastLink(of: "other") == given, "another match's link stays")
        let manager = try harness.channelManager()
        defer { manager.shutdown() }
        let remaining = try await manager.list().map(\.description)
        #expect(!remaining.contains(link.channelID) && remaining.contains(given.channelID))
        // Durable: a new engine on the same file knows the remaining link and not the removed one.
        await engine.shutdown()
        let again = try Self.engine(harness, store)
        defer { again.shutdown() }
        #expect(try again.broadcastLinks.map(\.channel) == ["other"])
    }

    @Test func aGracefulRestartMidWaveSendsTheBroadcastOnce() async throws {
        var simulator = SimulatorConfiguration()
        // 1 s: 300 token pushes over 2 x 10 streams take 15 s, so the shutdown surely comes mid-wave even when a
        // loaded machine polls late.
        simulator.latency = .fixed(nanoseconds: 1_000_000_000)
        let harness = try TestHarness(simulator, management: true)
        defer { harness.shutdown() }
        let path = harness.directory + "/planner.db"
        var store = try SQLiteTokenStore(path: path)
        var engine = try Self.engine(harness, store, streams: 10, durable: true)
        try await engine.createBroadcastChannel(for: "match", storagePolicy: .noMessageStored)
        try engine.register(FanoutFixture.registrations(0..<400, channel: "match"))
        try engine.register([], subscriptions: Self.subscriptions(0..<100, channel: "match"))
        let wave = try engine.publish(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        // Stopped (SIGTERM-like) while the broadcast is out: the shutdown lets it be answered first.
        let stopping = engine
        let stopped: Void? = try await perform(when: { (wave.broadcast?.requests ?? 0) >= 1 }, timeout: .seconds(30)) {
            stopping.shutdown()
        }
        try #require(stopped != nil)
        #expect(wave.state == .interrupted, "300 tokens at 2 x 10 streams and 1 s cannot be done yet")
        #expect(wave.broadcast?.outcome == .delivered)
        try store.close()

        store = try SQLiteTokenStore(path: path)
        engine = try Self.engine(harness, store, streams: 10, durable: true)
        defer { engine.shutdown() }
        let resumed = try #require(engine.wave(id: wave.id))
        #expect(resumed.waitUntilComplete(timeout: TestTime.scaled(.seconds(60))))
        let report = resumed.report
        #expect(report.delivered == 300 && report.resentAfterRestart == 0, "\(report)")
        #expect(
            report.broadcast?.outcome == .delivered && report.broadcast?.requests == 1
                && report.broadcast?.resentAfterRestart == false)
        await engine.shutdown()
        await harness.shutdown()
        let log = try harness.acceptedLog()
        #expect(Self.broadcasts(log).count == 1, "no duplicate broadcast after a graceful restart")
        #expect(Self.tokenPushes(log).count == 300, "no duplicate push either")
    }

    @Test func aCrashBeforeTheBroadcastWasAnsweredResendsItWithItsFirstID() async throws {
        var simulator = SimulatorConfiguration()
        // 8 s: the abandon must come before the answer even when the checkpoint writer runs late on a loaded
        // machine (300 ms and then 3 s were not enough on a 2-core machine running the suite); 100 streams keep
        // the 200 token pushes to one round.
        simulator.latency = .fixed(nanoseconds: 8_000_000_000)
        let harness = try TestHarness(simulator, management: true)
        defer { harness.shutdown() }
        let path = harness.directory + "/planner.db"
        var store = try SQLiteTokenStore(path: path)
        var engine = try Self.engine(harness, store, streams: 100, durable: true)
        let link = try await engine.createBroadcastChannel(for: "match", storagePolicy: .noMessageStored)
        try engine.register(FanoutFixture.registrations(0..<200, channel: "match"))
        try engine.register([], subscriptions: Self.subscriptions(0..<100, channel: "match"))
        let wave = try engine.publish(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        // Abandoned once a checkpoint after the broadcast went out is durable (it records the broadcast as maybe
        // sent), before APNs answers it (8 s). Without that checkpoint the next engine could not know it was sent:
        // it would send it again unflagged, as it does a token push past the last checkpoint. Read from the store
        // itself: counting checkpoint writes after the send was not enough on a loaded machine (the writer could
        // still be writing checkpoints the shard took before it).
        let abandoning = engine
        let durable = store
        let abandoned: Void? = try await perform(
            when: {
                guard (wave.broadcast?.requests ?? 0) >= 1 else { return false }
                let unfinished =
                    (try? durable.unfinishedWaves(bundleID: Fixture.bundleID, environment: .production)) ?? []
                return unfinished.contains { stored in
                    stored.record.id == wave.id
                        && stored.checkpoints.contains {
                            (try? ShardCheckpoint(decoding: $0.data))?.broadcast?.possiblySent == true
                        }
                }
            }, timeout: .seconds(30)
        ) {
            abandoning.abandonForTesting()
        }
        try #require(abandoned != nil)
        #expect(wave.broadcast?.outcome == .pending)
        try store.close()

        store = try SQLiteTokenStore(path: path)
        engine = try Self.engine(harness, store, streams: 100, durable: true)
        defer { engine.shutdown() }
        #expect(try engine.broadcastLink(of: "match")?.channelID == link.channelID, "the link survives the restart")
        #expect(try engine.broadcastSubscribers(of: "match") == 100)
        let resumed = try #require(engine.wave(id: wave.id))
        #expect(resumed.waitUntilComplete(timeout: TestTime.scaled(.seconds(60))))
        let report = resumed.report
        #expect(report.targeted == 100 && report.delivered == 100 && report.accounted == 100, "\(report)")
        let broadcast = try #require(report.broadcast)
        #expect(broadcast.outcome == .delivered && broadcast.resentAfterRestart, "\(broadcast)")
        await engine.shutdown()
        await harness.shutdown()
        let broadcasts = Self.broadcasts(try harness.acceptedLog())
        #expect(broadcasts.count >= 1 && broadcasts.count <= 2, "at most one duplicate broadcast")
        #expect(
            Set(broadcasts.compactMap { $0.string("apns-request-id") }).count == 1,
            "a resend carries its first attempt's id")
        // The report survives too.
        let stored = try #require(try engine.report(id: wave.id))
        #expect(stored.broadcast?.outcome == .delivered)
    }
}

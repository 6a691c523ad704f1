import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareSQLite
import FanfareStorage
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

/// The engine against the real simulator: TLS + HTTP/2 over loopback, a real SQLite registry file.
@Suite(.ownThread) struct FanoutEndToEndTests {
    @Test func aWaveIsAccountedExactlyUnderInjectedFailures() async throws {
        let audience = 3_000
        let deadTokens = 50
        var simulator = SimulatorConfiguration()
        let registrations = FanoutFixture.registrations(0..<audience, channel: "final")
        // The first 50 tokens do not exist at APNs (410 Unregistered); the rest see random 429s and 500s and a
        // GOAWAY every 1000 streams.
        simulator.knownTokens = Set(registrations.dropFirst(deadTokens).map(\.token.hexString))
        simulator.faults = [
            FaultRule(reason: .tooManyRequests, probability: 0.03),
            FaultRule(reason: .internalServerError, probability: 0.03),
        ]
        simulator.goAwayAfterStreams = 1000
        let fixture = try FanoutFixture(simulator)
        defer { fixture.harness.shutdown() }
        try fixture.store.register(registrations)
        let engine = try fixture.engine()

        let wave = try engine.publish(
            try scoreUpdate(channel: "final", timestamp: 1_800_000_000, home: 1, away: 0, alert: true))
        #expect(wave.waitUntilComplete(timeout: TestTime.scaled(.seconds(60))), "the wave did not complete")
        let report = wave.report
        #expect(report.targeted == audience)
        #expect(report.accounted == audience, "outcomes \(report)")
        #expect(report.invalidated == deadTokens)
        #expect(report.delivered + report.failed == audience - deadTokens)
        #expect(report.retried > 0, "no 429/500 was retried")
        #expect(report.superseded == 0 && report.expired == 0)
        // Dead tokens leave the registry durably.
        #expect(await eventually { fixture.invalidations.all.count == deadTokens })
        #expect(try fixture.store.count() == audience - deadTokens)
        #expect(Set(fixture.invalidations.all.map(\.token)) == Set(registrations.prefix(deadTokens).map(\.token)))
        #expect(fixture.invalidations.all.allSatisfy { $0.removed && $0.reason == .unregistered })
        await engine.shutdown()
        await fixture.harness.shutdown()
        // What the simulator accepted is exactly what the wave counts as delivered, once per token.
        let accepted = try fixture.harness.acceptedLog()
        #expect(accepted.count == report.delivered)
        #expect(Set(accepted.compactMap { $0.string("token") }).count == report.delivered)
    }

    @Test func overlappingUpdatesNeverSendTheOlderAfterTheNewer() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 20_000_000)
        let fixture = try FanoutFixture(simulator)
        defer { fixture.harness.shutdown() }
        let audience = 4_000
        try fixture.store.register(FanoutFixture.registrations(0..<audience, channel: "derby"))
        // 50 streams at 20 ms: the first wave needs more than a second, so the second lands mid-way (published
        // from a thread of its own the moment 500 pushes went out: the shared test threads may be busy).
        let engine = try fixture.engine(connections: 1, streams: 50)
        let older = try engine.publish(try scoreUpdate(channel: "derby", timestamp: 1_800_000_001, home: 1, away: 0))
        let newerUpdate = try scoreUpdate(channel: "derby", timestamp: 1_800_000_002, home: 2, away: 0)
        let published = try await perform(when: { older.report.sent >= 500 }) { try engine.publish(newerUpdate) }
        let newer = try #require(published)
        #expect(await older.completionWithin(.seconds(60)))
        #expect(await newer.completionWithin(.seconds(60)))
        let first = older.report
        let second = newer.report
        #expect(first.accounted == audience && second.accounted == audience)
        #expect(first.sent < audience, "the newer update superseded nothing")
        #expect(first.superseded == audience - first.sent)
        #expect(second.delivered == audience)
        #expect(throws: PublishError.self) {
            try engine.publish(try scoreUpdate(channel: "derby", timestamp: 1_800_000_001, home: 9, away: 9))
        }
        await engine.shutdown()
        await fixture.harness.shutdown()

        // Per token, in the order the simulator accepted them: never the older state after the newer one.
        var seenNewer = Set<String>()
        var olderCount = 0
        for record in try fixture.harness.acceptedLog() {
            let token = try #require(record.string("token"))
            switch record.payloadTimestamp {
            case 1_800_000_001:
                #expect(!seenNewer.contains(token), "token \(token) got the older state after the newer one")
                olderCount += 1
            case 1_800_000_002: seenNewer.insert(token)
            default: Issue.record("unexpected payload \(record.line)")
            }
        }
        #expect(olderCount == first.delivered)
        #expect(seenNewer.count == audience)
    }

    @Test func theRegistrySurvivesARestartAndUnregistrationSticks() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let engine = try fixture.engine()
        try engine.register(FanoutFixture.registrations(0..<300, channel: "cup"))
        try engine.register(FanoutFixture.registrations(0..<40, channel: "cup", kind: .pushToStart, salt: 7))
        #expect(try engine.unregister((0..<100).map { longToken($0) }) == 100)
        let wave = try engine.publish(try scoreUpdate(channel: "cup", timestamp: 1_800_000_100, home: 0, away: 0))
        #expect(await wave.completionWithin(.seconds(30)))
        #expect(wave.report.delivered == 200)
        await engine.shutdown()
        try fixture.store.close()  // the registry keeps its file locked while open

        // A new store and engine on the same file see the same tokens.
        let reopened = try SQLiteTokenStore(path: fixture.databasePath)
        #expect(try reopened.count() == 240)
        var client = try fixture.harness.clientConfiguration()
        client.connectionsPerWorker = 1
        let restarted = try FanoutEngine(
            configuration: FanoutConfiguration(client: client, bundleID: Fixture.bundleID), store: reopened)
        defer { restarted.shutdown() }
        let again = try restarted.publish(try scoreUpdate(channel: "cup", timestamp: 1_800_000_101, home: 1, away: 0))
        #expect(await again.completionWithin(.seconds(30)))
        #expect(again.report.targeted == 200 && again.report.delivered == 200)
        var kickOff = LiveActivityContent(event: .start, timestamp: 1_800_000_102)
        kickOff.contentState = try RawJSON(validating: #"{"home":0,"away":0}"#)
        kickOff.alert = LiveActivityAlert(title: .plain("Kick-off"), body: .plain("The cup final has started"))
        kickOff.attributesType = "MatchAttributes"
        kickOff.attributes = try RawJSON(validating: #"{"match":"cup"}"#)
        let start = try restarted.publish(ChannelUpdate(channel: "cup", content: kickOff))
        #expect(await start.completionWithin(.seconds(30)))
        #expect(start.report.targeted == 40 && start.report.delivered == 40)
    }

    @Test func aReplacedPushToStartTokenIsNoLongerSentTo() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let engine = try fixture.engine()
        defer { engine.shutdown() }
        try engine.register(FanoutFixture.registrations(0..<20, channel: "final", kind: .pushToStart, salt: 1))
        // Devices 0..<10 report new push-to-start tokens for the same attributes type: the old ones go.
        let renewed = FanoutFixture.registrations(0..<10, channel: "final", kind: .pushToStart, salt: 2)
        let result = try engine.register(renewed, subscriptions: [])
        #expect(Set(result.replacedTokens) == Set((0..<10).map { longToken($0, salt: 1) }))
        #expect(try fixture.store.count() == 20)

        var kickOff = LiveActivityContent(event: .start, timestamp: 1_800_000_200)
        kickOff.contentState = try RawJSON(validating: #"{"home":0,"away":0}"#)
        kickOff.alert = LiveActivityAlert(title: .plain("Kick-off"), body: .plain("The final has started"))
        kickOff.attributesType = "MatchAttributes"
        kickOff.attributes = try RawJSON(validating: #"{"match":"final"}"#)
        let start = try engine.publish(ChannelUpdate(channel: "final", content: kickOff))
        #expect(await start.completionWithin(.seconds(30)))
        #expect(start.report.targeted == 20 && start.report.delivered == 20)
        let sentTo = Set(try fixture.harness.acceptedLog().compactMap { $0.string("token") })
        let expected = Set(renewed.map(\.token.hexString) + (10..<20).map { longToken($0, salt: 1).hexString })
        #expect(sentTo == expected, "no start went to a replaced token")
    }

    @Test func updateTokensReplacedByBroadcastSubscriptionsLeaveTheAudience() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let engine = try fixture.engine()
        defer { engine.shutdown() }
        let tokens = FanoutFixture.registrations(0..<30, channel: "derby")
        try engine.register(tokens)
        // Activities 0..<12 are now subscribed to the match's broadcast channel: one path per activity.
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let subscriptions = (0..<12).map {
            BroadcastSubscription(
                activityID: "activity-\($0)", bundleID: Fixture.bundleID, environment: .production, channels: ["derby"],
                createdAt: now)
        }
        let result = try engine.register([], subscriptions: subscriptions)
        #expect(result.replacedTokens.count == 12)
        #expect(result.subscriptionDeltas == ["derby": 12])
        let wave = try engine.publish(try scoreUpdate(channel: "derby", timestamp: 1_800_000_300, home: 1, away: 0))
        #expect(await wave.completionWithin(.seconds(30)))
        #expect(wave.report.targeted == 18 && wave.report.delivered == 18)
        let sentTo = Set(try fixture.harness.acceptedLog().compactMap { $0.string("token") })
        #expect(sentTo == Set(tokens[12...].map(\.token.hexString)))
    }

    @Test func anEndedChannelIsRetiredAfterItsDismissalWindow() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let start = Int64(Date().timeIntervalSince1970)
        let clock = TestClock(now: start)
        let engine = try fixture.engine { $0.wallClock = { clock.now } }
        defer { engine.shutdown() }
        try engine.register(FanoutFixture.registrations(0..<100, channel: "semi"))
        try engine.register(FanoutFixture.registrations(0..<10, channel: "semi", kind: .pushToStart, salt: 3))
        var final = LiveActivityContent(event: .end, timestamp: start)
        final.contentState = try RawJSON(validating: #"{"home":3,"away":1}"#)
        final.dismissalDate = start + 600
        let end = try engine.publish(ChannelUpdate(channel: "semi", content: final))
        #expect(await end.completionWithin(.seconds(30)))
        #expect(end.report.delivered == 100)
        engine.runMaintenance()
        #expect(try fixture.store.count() == 110, "retired before the dismissal date")
        clock.now = start + 601
        engine.runMaintenance()
        #expect(try fixture.store.count() == 10, "push-to-start tokens stay; the ended activities go")
        let after = try engine.publish(try scoreUpdate(channel: "semi", timestamp: start + 700, home: 3, away: 1))
        #expect(await after.completionWithin(.seconds(30)))
        #expect(after.report.targeted == 0)
    }

    @Test func activitiesPastActivityKitsLifetimeAreRetired() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let start = Int64(Date().timeIntervalSince1970)
        let clock = TestClock(now: start)
        let engine = try fixture.engine { $0.wallClock = { clock.now } }
        defer { engine.shutdown() }
        try engine.register(FanoutFixture.registrations(0..<50, channel: "league"))
        engine.runMaintenance()
        #expect(try fixture.store.count() == 50)
        clock.now = start + 12 * 3600 + 5
        engine.runMaintenance()
        #expect(try fixture.store.count() == 0)
        let after = try engine.publish(try scoreUpdate(channel: "league", timestamp: start, home: 0, away: 0))
        #expect(await after.completionWithin(.seconds(30)))
        #expect(after.report.targeted == 0)
    }

    @Test func aSinglePushIsAnsweredAndADeadTokenIsPruned() async throws {
        var simulator = SimulatorConfiguration()
        let registrations = FanoutFixture.registrations(0..<2, channel: "solo")
        simulator.knownTokens = [registrations[0].token.hexString]
        let fixture = try FanoutFixture(simulator)
        defer { fixture.harness.shutdown() }
        try fixture.store.register(registrations)
        let engine = try fixture.engine()
        defer { engine.shutdown() }
        var content = LiveActivityContent(event: .update, timestamp: 1_800_000_000)
        content.contentState = try RawJSON(validating: #"{"home":0,"away":0}"#)
        let delivered = try await engine.push(content, to: registrations[0].token, priority: .immediate)
        #expect(delivered.isDelivered)
        let dead = try await engine.push(content, to: registrations[1].token)
        #expect(dead.disposition.rejectionReason == .unregistered)
        #expect(await eventually { fixture.invalidations.all.count == 1 })
        #expect(try fixture.store.count() == 1)
    }

    @Test func channelsPastTheLimitAreRefusedBeforeAnythingIsWritten() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let engine = try fixture.engine()
        defer { engine.shutdown() }
        let limit = FanoutEngine.maximumChannels
        var registrations = FanoutFixture.registrations(0..<limit, channel: "")
        for index in registrations.indices { registrations[index].channels = ["league-\(index)"] }
        try engine.register(registrations)
        #expect(try fixture.store.count() == limit)
        let extra = FanoutFixture.registrations(limit..<limit + 1, channel: "one-too-many")
        #expect(throws: FanoutError.self) { try engine.register(extra) }
        #expect(try fixture.store.count() == limit, "a refused registration was written")
        #expect(throws: PublishError.self) {
            try engine.publish(try scoreUpdate(channel: "another-new-one", timestamp: 1, home: 0, away: 0))
        }
        // A known channel still works.
        let wave = try engine.publish(try scoreUpdate(channel: "league-7", timestamp: 1, home: 0, away: 0))
        #expect(await wave.completionWithin(.seconds(30)))
        #expect(wave.report.delivered == 1)
    }

    @Test func badRegistrationsAndUpdatesAreRefusedWithoutSideEffects() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let engine = try fixture.engine()
        defer { engine.shutdown() }
        var wrong = FanoutFixture.registrations(0..<3, channel: "x")
        wrong[1].bundleID = "com.other.app"
        #expect(throws: FanoutError.self) { try engine.register(wrong) }
        var noChannel = FanoutFixture.registrations(0..<3, channel: "x")
        noChannel[2].channels = []
        #expect(throws: FanoutError.self) { try engine.register(noChannel) }
        #expect(try fixture.store.count() == 0)

        var huge = try scoreUpdate(channel: "x", timestamp: 1, home: 0, away: 0)
        huge.content.contentState = try RawJSON(
            validating: "{\"blob\":\"" + String(repeating: "a", count: 5000) + "\"}")
        #expect(throws: PublishError.self) { try engine.publish(huge) }
        var stale = try scoreUpdate(channel: "x", timestamp: 1, home: 0, away: 0)
        stale.freshUntil = Int64(Date().timeIntervalSince1970) - 10
        #expect(throws: PublishError.self) { try engine.publish(stale) }
        #expect(engine.waves.isEmpty)
    }
}

/// A settable wall clock (UNIX seconds) for retirement tests.
final class TestClock: @unchecked Sendable {
    private let value: Mutex<Int64>
    init(now: Int64) { value = Mutex(now) }
    var now: Int64 {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}

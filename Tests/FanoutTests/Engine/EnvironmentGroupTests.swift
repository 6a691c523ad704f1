import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareSQLite
import FanfareStorage
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

/// One app sending in both environments is an engine per environment on one registry: a batch registers across
/// them in one transaction, a publish is one publication (a wave per engine, saved together), and removals stay
/// inside the app.
@Suite(.ownThread) struct EnvironmentGroupTests {
    /// Production and sandbox engines for the fixture's app on its store, numbering waves from one sequence.
    static func engines(_ fixture: FanoutFixture, numbering: WaveNumbering) throws -> [FanoutEngine] {
        try APNsEnvironment.allCases.map { environment in
            var client = try fixture.harness.clientConfiguration()
            client.connectionsPerWorker = 1
            var configuration = FanoutConfiguration(
                client: client, bundleID: Fixture.bundleID, environment: environment)
            configuration.minimumInterval = nil
            configuration.waveNumbering = numbering
            return try FanoutEngine(configuration: configuration, store: fixture.store, waveStore: fixture.store)
        }
    }

    static func registrations(_ range: Range<Int>, _ environment: APNsEnvironment) -> [TokenRegistration] {
        FanoutFixture.registrations(range, channel: "derby").map { registration in
            var registration = registration
            registration.environment = environment
            return registration
        }
    }

    @Test func aPublicationReachesEachEnvironmentsTokensOnceAndIsOneSavedUnit() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        var engines = try Self.engines(fixture, numbering: WaveNumbering())
        let production = Self.registrations(0..<300, .production)
        let sandbox = Self.registrations(300..<350, .sandbox)
        // One batch across both environments: one transaction, each token in its environment's engine.
        try FanoutEngine.register(production + sandbox, subscriptions: [], on: engines)
        #expect(try fixture.store.count() == 350)

        let update = try scoreUpdate(channel: "derby", timestamp: 1_800_000_001, home: 1, away: 0)
        let waves = try FanoutEngine.publish(update, on: engines)
        #expect(waves.count == 2)
        #expect(waves[0].id != waves[1].id)
        for wave in waves { #expect(await wave.completionWithin(.seconds(60))) }
        #expect(waves[0].report.targeted == 300 && waves[0].report.delivered == 300)
        #expect(waves[1].report.targeted == 50 && waves[1].report.delivered == 50)
        #expect(try fixture.store.publicationParts(of: waves[0].id) == waves.map(\.id))
        #expect(try fixture.store.publicationParts(of: waves[1].id) == [waves[1].id], "a part is no publication")

        // Latest state wins on both: an older update is refused as a whole.
        #expect(throws: PublishError.self) {
            try FanoutEngine.publish(
                try scoreUpdate(channel: "derby", timestamp: 1_800_000_000, home: 0, away: 0), on: engines)
        }
        let last = waves.map(\.id).max()!
        for engine in engines { await engine.shutdown() }

        // Reopened, the numbering continues above every saved wave, whichever engine saved it.
        engines = try Self.engines(fixture, numbering: WaveNumbering())
        let next = try FanoutEngine.publish(
            try scoreUpdate(channel: "derby", timestamp: 1_800_000_002, home: 2, away: 0), on: engines)
        #expect(next.allSatisfy { $0.id > last })
        for wave in next { #expect(await wave.completionWithin(.seconds(60))) }
        #expect(next[1].report.delivered == 50)
        for engine in engines { await engine.shutdown() }
        await fixture.harness.shutdown()
        #expect(try fixture.harness.acceptedLog().count == 2 * 350)
    }

    @Test func aBatchForAnEnvironmentWithoutAnEngineWritesNothing() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let engines = [try Self.engines(fixture, numbering: WaveNumbering())[0]]
        #expect {
            try FanoutEngine.register(
                Self.registrations(0..<5, .production) + Self.registrations(5..<6, .sandbox), subscriptions: [],
                on: engines)
        } throws: { error in
            guard case FanoutError.wrongApp(let index, _, let environment) = error else { return false }
            return index == 5 && environment == .sandbox
        }
        #expect(try fixture.store.count() == 0)
        for engine in engines { await engine.shutdown() }
    }

    @Test func removalsReachTheAppsEnvironmentsAndNoOtherApp() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let engines = try Self.engines(fixture, numbering: WaveNumbering())
        var otherApp = Self.registrations(20..<21, .production)
        otherApp[0].bundleID = "com.example.other"
        try fixture.store.register(otherApp)
        try FanoutEngine.register(
            Self.registrations(0..<10, .production) + Self.registrations(10..<20, .sandbox), subscriptions: [],
            on: engines)
        let tokens = (0..<21).map { longToken($0) }
        #expect(try FanoutEngine.unregister(tokens, on: engines) == 20)
        #expect(try fixture.store.count() == 1, "the other app's token stays")
        // Nothing is left in the shards: a publish targets no one.
        let waves = try FanoutEngine.publish(
            try scoreUpdate(channel: "derby", timestamp: 1_800_000_001, home: 1, away: 0), on: engines)
        for wave in waves {
            #expect(await wave.completionWithin(.seconds(60)))
            #expect(wave.report.targeted == 0)
        }
        for engine in engines { await engine.shutdown() }
    }
}

import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareStorage
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

/// Issue 10: the engine against the real simulator and a real SQLite file when things go wrong: a
/// configuration mistake, long runs, shutdown in the middle of everything.
@Suite(.ownThread) struct FanoutHardeningTests {
    // MARK: - Never delete good tokens because of a configuration mistake

    @Test func whenAPNsCallsEveryTokenBadTheRegistryStaysIntactAndTheWavePauses() async throws {
        var simulator = SimulatorConfiguration()
        simulator.knownTokens = []  // no token exists here: the engine is "pointed at the wrong environment"
        simulator.unknownTokenReply = .badDeviceToken
        let fixture = try FanoutFixture(simulator)
        defer { fixture.harness.shutdown() }
        let audience = 3_000
        try fixture.store.register(FanoutFixture.registrations(0..<audience, channel: "final"))
        let logs = LogRecorder()
        let metrics = MetricsRecorder()
        let engine = try fixture.engine {
            $0.logger = logs.logger
            $0.metricsFactory = metrics
        }
        let wave = try engine.publish(try scoreUpdate(channel: "final", timestamp: 1_800_000_000, home: 1, away: 0))
        #expect(await eventually { engine.breakerState.isOpen }, "the breaker did not open")
        #expect(await eventually { wave.state == .paused })
        // Reported loudly: the state, an error line, the metrics.
        guard case .open(let trip) = engine.breakerState else { return }
        #expect(trip.badDeviceToken >= 500 && trip.results == 1_000)
        #expect(engine.statistics.breaker.isOpen && engine.statistics.invalidTokensHeld > 0)
        #expect(logs.all.contains { $0.level == .error && $0.line.contains("invalid-token breaker open") })
        #expect(metrics["fanfare_invalid_token_breaker_open"] == 1)
        #expect(metrics["fanfare_invalid_token_breaker_trips_total"] == 1)
        // Not one token deleted, durably or in memory; a newer update waits too.
        #expect(try fixture.store.count() == audience)
        #expect(fixture.invalidations.all.isEmpty)
        let later = try engine.publish(try scoreUpdate(channel: "final", timestamp: 1_800_000_001, home: 2, away: 0))
        #expect(later.state == .paused)
        let sentAtTrip = wave.report.sent + later.report.sent
        await engine.shutdown()
        #expect(wave.report.sent + later.report.sent == sentAtTrip, "pushes went out while the breaker was open")
        for report in [wave.report, later.report] {
            #expect(report.isComplete && report.accounted == report.targeted && report.invalidated == 0)
        }
        #expect(wave.report.targeted == audience)
        #expect(try fixture.store.count() == audience)
        #expect(fixture.invalidations.all.isEmpty)
    }

    @Test func aNormalShareOfBadTokensIsPruned() async throws {
        let audience = 3_000
        let registrations = FanoutFixture.registrations(0..<audience, channel: "final")
        var simulator = SimulatorConfiguration()
        simulator.knownTokens = Set(
            registrations.enumerated().filter { $0.offset % 50 != 0 }.map(\.element.token.hexString))
        simulator.unknownTokenReply = .badDeviceToken  // 2 %
        let fixture = try FanoutFixture(simulator)
        defer { fixture.harness.shutdown() }
        try fixture.store.register(registrations)
        let engine = try fixture.engine()
        defer { engine.shutdown() }
        let wave = try engine.publish(try scoreUpdate(channel: "final", timestamp: 1_800_000_000, home: 1, away: 0))
        #expect(await wave.completionWithin(.seconds(60)))
        let report = wave.report
        #expect(report.invalidated == audience / 50 && report.delivered == audience - audience / 50)
        #expect(engine.breakerState == .closed)
        #expect(await eventually { fixture.invalidations.all.count == audience / 50 })
        #expect(fixture.invalidations.all.allSatisfy { $0.removed && $0.reason == .badDeviceToken })
        #expect(try fixture.store.count() == audience - audience / 50)
    }

    @Test func anOperatorResetPrunesOrKeepsTheHeldTokensAndTheWaveGoesOn() async throws {
        for prune in [false, true] {
            var simulator = SimulatorConfiguration()
            simulator.knownTokens = []
            simulator.unknownTokenReply = .badDeviceToken
            let fixture = try FanoutFixture(simulator)
            defer { fixture.harness.shutdown() }
            try fixture.store.register(FanoutFixture.registrations(0..<400, channel: "cup"))
            let engine = try fixture.engine(connections: 1) {
                $0.client.workerCount = 1
                $0.invalidTokenBreaker.window = 100
            }
            defer { engine.shutdown() }
            let wave = try engine.publish(try scoreUpdate(channel: "cup", timestamp: 1_800_000_000, home: 0, away: 0))
            #expect(await eventually { wave.state == .paused })
            #expect(engine.statistics.invalidTokensHeld >= 100)
            #expect(engine.resetBreaker(pruneHeldTokens: prune))
            #expect(!engine.resetBreaker(), "a closed breaker resets once")
            // Everything is still called bad, so the next window trips it again: nothing is lost either way.
            #expect(await eventually { engine.breakerState.isOpen })
            if prune {
                #expect(await eventually { fixture.invalidations.all.count >= 100 })
                #expect(await eventually { (try? fixture.store.count()) == 400 - fixture.invalidations.all.count })
                #expect(fixture.invalidations.all.allSatisfy { $0.removed && $0.reason == .badDeviceToken })
            } else {
                #expect(fixture.invalidations.all.isEmpty)
                #expect(try fixture.store.count() == 400)
                #expect(wave.report.failedByReason["BadDeviceToken"] ?? 0 >= 100)
            }
        }
    }

    @Test func startUpRefusesTheOtherEnvironmentsHostAndAnotherAppsTopic() throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        var client = try fixture.harness.clientConfiguration()
        client.host = "api.push.apple.com"
        #expect {
            try FanoutEngine(
                configuration: FanoutConfiguration(client: client, bundleID: Fixture.bundleID, environment: .sandbox),
                store: fixture.store)
        } throws: { error in
            guard case FanoutError.environmentMismatch(_, .production, .sandbox) = error else { return false }
            return "\(error)".contains("api.sandbox.push.apple.com")
        }
        client.host = "API.SANDBOX.PUSH.APPLE.COM."
        #expect(throws: FanoutError.self) {
            try FanoutEngine(
                configuration: FanoutConfiguration(
                    client: client, bundleID: Fixture.bundleID, environment: .production), store: fixture.store)
        }
        client = try fixture.harness.clientConfiguration(topic: "com.other.app.push-type.liveactivity")
        #expect {
            try FanoutEngine(
                configuration: FanoutConfiguration(client: client, bundleID: Fixture.bundleID), store: fixture.store)
        } throws: { error in
            guard case FanoutError.topicMismatch = error else { return false }
            return "\(error)".contains("com.example.fanfare.push-type.liveactivity")
        }
        // A simulator on loopback is not checked; the plain bundle id is an accepted topic.
        client = try fixture.harness.clientConfiguration(topic: Fixture.bundleID)
        let engine = try FanoutEngine(
            configuration: FanoutConfiguration(client: client, bundleID: Fixture.bundleID, environment: .sandbox),
            store: fixture.store)
        engine.shutdown()
    }

    @Test func configurationValuesThatCannotWorkAreErrorsNotTraps() throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let client = try fixture.harness.clientConfiguration()
        let mistakes: [(String, (inout FanoutConfiguration) -> Void)] = [
            ("client.workerCount", { $0.client.workerCount = 0 }),
            ("commandQueueCapacity", { $0.commandQueueCapacity = 16 }),
            ("maximumUnfinishedWaves", { $0.maximumUnfinishedWaves = 40_000 }),
            ("retryDelays", { $0.retryDelays = Array(repeating: .milliseconds(1), count: 300) }),
            ("retryDelays", { $0.retryDelays = [.seconds(-1)] }),
            ("minimumInterval", { $0.minimumInterval = .seconds(Int64.max) }),
            ("maintenanceInterval", { $0.maintenanceInterval = .zero }),
            ("standardBudget", { $0.standardBudget = PriorityBudgetProfile(perHour: 0, burst: 4) }),
            ("frequentBudget", { $0.frequentBudget = PriorityBudgetProfile(perHour: .nan, burst: 1) }),
            ("standardBudget", { $0.standardBudget = PriorityBudgetProfile(perHour: 12, burst: 0) }),
            ("invalidTokenBreaker", { $0.invalidTokenBreaker.maximumShare = 1.5 }),
            ("retainedWaves", { $0.retainedWaves = -1 }),
        ]
        for (field, mistake) in mistakes {
            var configuration = FanoutConfiguration(client: client, bundleID: Fixture.bundleID)
            mistake(&configuration)
            #expect {
                try FanoutEngine(configuration: configuration, store: fixture.store)
            } throws: { error in
                guard case FanoutError.invalidConfiguration(let named, _) = error else { return false }
                return named == field
            }
        }
    }

    @Test func absurdUpdateValuesAreRefusedWithClearErrors() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        let engine = try fixture.engine()
        defer { engine.shutdown() }
        let now = Int64(Date().timeIntervalSince1970)
        var inMilliseconds = try scoreUpdate(channel: "x", timestamp: now, home: 0, away: 0)
        inMilliseconds.freshUntil = now * 1000
        #expect {
            try engine.publish(inMilliseconds)
        } throws: { error in
            guard case PublishError.freshUntilTooFar = error else { return false }
            return "\(error)".contains("milliseconds")
        }
        inMilliseconds.freshUntil = .max
        #expect(throws: PublishError.self) { try engine.publish(inMilliseconds) }
        var longName = try scoreUpdate(channel: String(repeating: "c", count: 10_000), timestamp: now, home: 0, away: 0)
        #expect(throws: PublishError.channelNameTooLong(bytes: 10_000, limit: 200)) { try engine.publish(longName) }
        longName.channel = "x"
        longName.freshUntil = now + 600
        // A collapse id HTTP/2 cannot carry is refused here, not reset by the server after the wave started.
        longName.collapseID = "goal\u{06}"
        #expect(throws: PublishError.invalidCollapseID(.invalidByte(0x06, offset: 4))) { try engine.publish(longName) }
        longName.collapseID = String(repeating: "c", count: 65)
        #expect(throws: PublishError.invalidCollapseID(.tooLong(bytes: 65))) { try engine.publish(longName) }
        longName.collapseID = "score"
        let wave = try engine.publish(longName)
        #expect(await wave.completionWithin(.seconds(30)))
    }

    // MARK: - Bounded memory

    @Test func publishingPastTheUnfinishedWaveLimitIsBackPressure() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 300_000_000)
        let fixture = try FanoutFixture(simulator)
        defer { fixture.harness.shutdown() }
        var registrations = FanoutFixture.registrations(0..<5, channel: "")
        for index in registrations.indices { registrations[index].channels = ["m\(index)"] }
        try fixture.store.register(registrations)
        let engine = try fixture.engine { $0.maximumUnfinishedWaves = 4 }
        defer { engine.shutdown() }
        var waves: [Wave] = []
        for index in 0..<4 {
            waves.append(try engine.publish(try scoreUpdate(channel: "m\(index)", timestamp: 1, home: 0, away: 0)))
        }
        #expect(throws: PublishError.tooManyUnfinishedWaves(limit: 4)) {
            try engine.publish(try scoreUpdate(channel: "m4", timestamp: 1, home: 0, away: 0))
        }
        for wave in waves { #expect(await wave.completionWithin(.seconds(30))) }
        #expect(await eventually { engine.statistics.unfinishedWaves == 0 })
        let last = try engine.publish(try scoreUpdate(channel: "m4", timestamp: 1, home: 0, away: 0))
        #expect(await last.completionWithin(.seconds(30)))
        #expect(last.report.delivered == 1)
    }

    @Test func farMoreWavesThanRetainedKeepTheListShortAndFindableById() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        try fixture.store.register(FanoutFixture.registrations(0..<3, channel: "ticks"))
        let engine = try fixture.engine { $0.retainedWaves = 50 }
        defer { engine.shutdown() }
        var last: Wave?
        var published = 0
        var timestamp: Int64 = 1_800_000_000
        while published < 3_000 {
            if published % 256 == 0 { await Task.yield() }
            do {
                timestamp += 1
                last = try engine.publish(try scoreUpdate(channel: "ticks", timestamp: timestamp, home: 0, away: 0))
                published += 1
            } catch PublishError.backPressure {
                try await Task.sleep(for: .milliseconds(1))
            }
        }
        let newest = try #require(last)
        #expect(await newest.completionWithin(.seconds(30)))
        #expect(await eventually { engine.statistics.unfinishedWaves == 0 })
        let retained = engine.waves
        #expect(retained.count == 50)
        #expect(retained.last?.id == newest.id && engine.wave(id: newest.id) === newest)
        #expect(engine.wave(id: 1) == nil)
        #expect(retained.map(\.id) == Array(newest.id - 49...newest.id))
    }

    @Test func channelsNothingUsesAreForgottenSoTheLimitCountsChannelsInUse() async throws {
        let fixture = try FanoutFixture()
        defer { fixture.harness.shutdown() }
        // No background maintenance pass: this test sweeps itself and counts what each sweep forgets.
        let engine = try fixture.engine { $0.maintenanceInterval = .seconds(86_400) }
        defer { engine.shutdown() }
        // Far more channels than the 32,767 ids over the run, each used once.
        var created = 0
        var sweptAt = 0
        while created < 100_000 {
            do {
                _ = try engine.publish(try scoreUpdate(channel: "event-\(created)", timestamp: 1, home: 0, away: 0))
                created += 1
            } catch PublishError.backPressure {
                try await Task.sleep(for: .milliseconds(1))
            }
            if created % 10_000 == 0 && sweptAt < created {
                #expect(await eventually { engine.statistics.unfinishedWaves == 0 })
                #expect(engine.statistics.channelsInUse == 10_000)
                sweptAt = created
                #expect(engine.forgetUnusedChannels() == 10_000)
            }
        }
        #expect(engine.statistics.channelsInUse == 0)
        // A channel with members is kept; once its tokens go, it is forgotten too.
        try engine.register(FanoutFixture.registrations(0..<10, channel: "derby"))
        engine.forgetUnusedChannels()
        #expect(engine.statistics.channelsInUse == 1)
        _ = try engine.unregister((0..<10).map { longToken($0) })
        engine.forgetUnusedChannels()
        #expect(engine.statistics.channelsInUse == 0)
        let footprint = engine.shardFootprint
        #expect(footprint.allSatisfy { $0.tokens == 0 })
    }

    // MARK: - Every push and wave ends with an outcome, whatever the timing

    @Test func publishPushAndRegisterRacingShutdownAllEndWithAnOutcome() async throws {
        for round in 0..<3 {
            var simulator = SimulatorConfiguration()
            simulator.latency = .fixed(nanoseconds: 2_000_000)
            let fixture = try FanoutFixture(simulator)
            defer { fixture.harness.shutdown() }
            try fixture.store.register(FanoutFixture.registrations(0..<300, channel: "race"))
            // A small queue, so single pushes and publishes compete for room.
            let engine = try fixture.engine { $0.commandQueueCapacity = 256 }
            let race = RaceState()
            var threads: [Thread] = []
            for publisher in 0..<2 {
                threads.append(
                    Thread {
                        var timestamp: Int64 = 1_800_000_000
                        while !race.stop.load(ordering: .relaxed) {
                            timestamp += 1
                            do {
                                let wave = try engine.publish(
                                    try scoreUpdate(
                                        channel: "race-\(publisher)", timestamp: timestamp, home: 0, away: 0))
                                race.waves.withLock { $0.append(wave) }
                            } catch PublishError.shutDown {
                                return
                            } catch {}
                            // Racing, not spinning: two threads publishing flat out on a 2-core machine starved the
                            // pushers below (and every other test) for minutes.
                            usleep(100)
                        }
                    })
            }
            threads.append(
                Thread {
                    var next = 1_000 + round * 100_000
                    while !race.stop.load(ordering: .relaxed) {
                        do {
                            try engine.register(FanoutFixture.registrations(next..<next + 5, channel: "race"))
                            race.registered.add(5, ordering: .relaxed)
                            next += 5
                        } catch {
                            return
                        }
                        usleep(100)
                    }
                })
            for thread in threads { thread.start() }
            let pushers = Task {
                await withTaskGroup(of: Void.self) { group in
                    for pusher in 0..<8 {
                        group.addTask {
                            var content = LiveActivityContent(event: .update, timestamp: 1_800_000_000)
                            content.contentState = try? RawJSON(validating: #"{"home":0,"away":0}"#)
                            while true {
                                do {
                                    _ = try await engine.push(content, to: longToken(pusher))
                                    race.pushResults.add(1, ordering: .relaxed)
                                } catch PublishError.shutDown {
                                    return
                                } catch {
                                    race.pushRefusals.add(1, ordering: .relaxed)
                                }
                            }
                        }
                    }
                }
            }
            // Shut down in the middle of all of it.
            // A hang guard, generous: the pushers run on the shared test threads, which other tests may hold a while.
            #expect(
                await eventually(timeout: .seconds(300)) {
                    race.waves.withLock { $0.count } >= 20 && race.pushResults.load(ordering: .relaxed) >= 20
                },
                "waves \(race.waves.withLock { $0.count }), push results \(race.pushResults.load(ordering: .relaxed)), refusals \(race.pushRefusals.load(ordering: .relaxed)), registered \(race.registered.load(ordering: .relaxed)), stats \(engine.statistics)"
            )
            await engine.shutdown()
            // Every wave publish returned is complete and balanced the moment shutdown returns.
            let published = race.waves.withLock { $0 }
            for wave in published {
                let report = wave.report
                #expect(report.isComplete && report.accounted == report.targeted, "wave \(report.id): \(report)")
            }
            race.stop.store(true, ordering: .relaxed)
            await pushers.value  // every push got a result or `.shutDown`: none hangs
            for thread in threads { thread.join() }
            #expect(race.waves.withLock { $0.count } == published.count, "a publish succeeded after shutdown")
            #expect(try fixture.store.count() == 300 + race.registered.load(ordering: .relaxed))
        }
    }
}

/// What the threads racing `shutdown` share.
final class RaceState: Sendable {
    let waves = Mutex<[Wave]>([])
    let pushResults = Atomic<Int>(0)
    let pushRefusals = Atomic<Int>(0)
    let registered = Atomic<Int>(0)
    let stop = Atomic<Bool>(false)
}

extension Thread {
    /// Waits for the thread's block to return.
    func join() {
        while !isFinished { usleep(1000) }
    }
}

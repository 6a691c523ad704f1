// Shutting the client down with pushes queued and in flight reports every one of them.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

@Suite(.ownThread) struct ShutdownTests {
    @Test func aShutDownClientIsFreedWithItsWorkers() async throws {
        // Each worker and its loop referenced each other, so a client's workers (and whatever they hold:
        // queues, buffers, the result handler) outlived it (found by LeakSanitizer).
        let harness = try TestHarness()
        defer { harness.shutdown() }
        weak var released: ResultCollector?
        do {
            let collector = ResultCollector()
            released = collector
            let client = try APNsClient(configuration: try harness.clientConfiguration(), resultHandler: collector)
            #expect(try await client.send(PushJob(token: makeToken(1), payload: try updatePayload())).isDelivered)
            await client.shutdown()
        }
        #expect(released == nil, "the result handler (held by the workers) is freed with the client")
    }

    @Test func shutdownWithPushesInFlightReportsEveryPush() async throws {
        var simulator = SimulatorConfiguration()
        // Answers spread over ten seconds: at any moment of the test some pushes are answered, most are not.
        simulator.latency = .uniform(minNanoseconds: 1_000_000, maxNanoseconds: 10_000_000_000)
        simulator.initialMaxConcurrentStreams = 1000
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        configuration.firstRequestAlone = false  // the whole burst goes out at once
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 500
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        let stopped: Void? = try await perform(when: { collector.count > 0 && client.statistics.inFlight > 10 }) {
            client.shutdown()
        }
        #expect(stopped != nil, "no moment with pushes both answered and in flight")
        await client.shutdown()  // (already done by then; shutdown is idempotent)
        // shutdown() returns after the workers reported everything: no waiting needed.
        let results = collector.byCookie()
        #expect(collector.count == count, "every push reported by the time shutdown() returns")
        #expect(results.count == count)
        var shutDown = 0
        for result in results.values {
            switch result.disposition {
            case .delivered: break
            case .failed(.shutdown): shutDown += 1
            default: Issue.record("\(result.cookie): unexpected \(result.disposition)")
            }
        }
        #expect(shutDown > 0, "pushes in flight ended as .shutdown")
        #expect(shutDown < count, "pushes answered before the shutdown kept their answer")
        #expect(throws: SubmitError.self) { try client.submit(PushJob(token: makeToken(1), payload: payload)) }
        let stats = client.statistics
        #expect(stats.completed == count && stats.inFlight == 0)

        await harness.shutdown()
        #expect(harness.simulator.statistics().accepted >= results.values.filter(\.isDelivered).count)
    }

    @Test func shutdownWhileUnableToConnectFailsQueuedPushes() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let refusing = try RefusingPort()
        let collector = ResultCollector()
        let client = try harness.startClient(try harness.clientConfiguration(port: refusing.port), collector: collector)
        let payload = try updatePayload()
        try await submitAll(
            client, (0..<50).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        await client.shutdown()
        #expect(collector.count == 50)
        #expect(collector.all.allSatisfy { $0.disposition == .failed(.shutdown) })
        withExtendedLifetime(refusing) {}
    }

    /// Threads still submitting while the client shuts down: every submit that returned normally gets
    /// exactly one result; the rest are refused with `.shutDown` or `.backPressure`.
    @Test func submittersRacingShutdownLoseNothing() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .uniform(minNanoseconds: 0, maxNanoseconds: 20_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.workerCount = 2
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let accepted = Atomic<Int>(0)
        let submitters = 2
        let finished = Atomic<Int>(0)
        for submitter in 0..<submitters {
            Thread {
                var index = 0
                while true {
                    index += 1
                    let job = PushJob(
                        token: makeToken(index % 500, salt: UInt64(submitter)), payload: payload,
                        cookie: UInt64(submitter << 32 | index))
                    do throws(SubmitError) {
                        try client.submit(job)
                        accepted.add(1, ordering: .relaxed)
                    } catch .backPressure {
                        usleep(100)
                    } catch {
                        break  // .shutDown
                    }
                }
                finished.add(1, ordering: .releasing)
            }.start()
        }
        let stopped: Void? = try await perform(when: { collector.count > 200 }) { client.shutdown() }
        #expect(stopped != nil)
        #expect(await eventually { finished.load(ordering: .acquiring) == submitters })
        let submitted = accepted.load(ordering: .relaxed)
        #expect(collector.count == submitted, "\(submitted) accepted, \(collector.count) results")
        #expect(collector.byCookie().count == submitted)
        #expect(client.statistics.submitted == submitted)
    }
}

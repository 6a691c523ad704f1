// Configurations and calls that used to trap inside APNsClient are refused with a clear error instead.
import FanfareClient
import FanfareCore
import FanfareHTTP2
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

@Suite(.ownThread) struct ClientConfigurationValidationTests {
    private static func base() throws -> ClientConfiguration {
        ClientConfiguration(
            host: "127.0.0.1", port: 9, tls: SharedKeys.shared.clientTLS,
            providerTokens: ProviderTokenSource(signer: SharedKeys.shared.signer), topic: Fixture.topic)
    }

    static let broken: [(String, @Sendable (inout ClientConfiguration) -> Void)] = [
        ("workerCount", { $0.workerCount = 0 }),
        ("workerCount", { $0.workerCount = 1_000_000 }),
        ("connectionsPerWorker", { $0.connectionsPerWorker = 0 }),
        ("maxConcurrentStreamsPerConnection", { $0.maxConcurrentStreamsPerConnection = 0 }),
        ("maxConcurrentStreamsPerConnection", { $0.maxConcurrentStreamsPerConnection = 2_000_000 }),
        ("maxConcurrentStreamsPerConnection", { $0.maxConcurrentStreamsPerConnection = Int.max }),
        (
            "maxConcurrentStreamsPerConnection",
            {
                $0.connectionsPerWorker = 1000
                $0.maxConcurrentStreamsPerConnection = 60_000
            }
        ),
        ("pendingCapacityPerWorker", { $0.pendingCapacityPerWorker = 0 }),
        ("inboxCapacityPerWorker", { $0.inboxCapacityPerWorker = 0 }),
        ("inboxCapacityPerWorker", { $0.inboxCapacityPerWorker = Int.max }),
        ("rotateAfterStreams", { $0.rotateAfterStreams = 0 }),
        ("maxResends", { $0.maxResends = -1 }),
        ("requestTimeout", { $0.requestTimeout = .zero }),
        ("requestTimeout", { $0.requestTimeout = .seconds(-5) }),
        ("reconnectBackoffMinimum", { $0.reconnectBackoffMinimum = .zero }),
        ("reconnectBackoffMaximum", { $0.reconnectBackoffMaximum = .seconds(Int64.max) }),
        (
            "reconnectBackoffMaximum",
            {
                $0.reconnectBackoffMinimum = .seconds(2)
                $0.reconnectBackoffMaximum = .seconds(1)
            }
        ),
        ("pingInterval", { $0.pingInterval = .zero }),
        ("cpuAffinity", { $0.cpuAffinity = [] }),
        ("cpuAffinity", { $0.cpuAffinity = [-1] }),
        ("buffers.plaintextOut", { $0.buffers.plaintextOut = 100 }),
        ("buffers.receive", { $0.buffers.receive = 0 }),
        ("host", { $0.host = "" }),
        ("port", { $0.port = 0 }),
    ]

    @Test(arguments: 0..<broken.count)
    func refusedAtInit(_ index: Int) throws {
        let (field, change) = Self.broken[index]
        var configuration = try Self.base()
        change(&configuration)
        do {
            let client = try APNsClient(configuration: configuration)
            client.shutdown()
            Issue.record("\(field): accepted")
        } catch let error as ClientConfigurationError {
            guard case .invalid(let reported, _) = error else {
                Issue.record("\(field): \(error)")
                return
            }
            #expect(reported == field, "\(error)")
            #expect(error.description.contains(field))
        }
    }

    @Test func producerCountMismatchIsAnError() throws {
        var configuration = try Self.base()
        configuration.workerCount = 2
        #expect(throws: ClientConfigurationError.producerCount(given: 0, workers: 2)) {
            try APNsClient(configuration: configuration, producers: [])
        }
    }

    @Test func extremeButValidValuesWork() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.rotateAfterStreams = Int.max
        configuration.maxResends = Int.max
        configuration.reconnectBackoffMaximum = ClientConfiguration.Limits.longestDuration
        let client = try harness.startClient(configuration, collector: collector)
        // A per-push timeout far past any clock: no deadline in practice, rather than a wrapped one in the past.
        let result = try await client.send(
            PushJob(token: makeToken(1), payload: try updatePayload(), timeout: .seconds(Int64.max)))
        #expect(result.isDelivered, "\(result.disposition)")
        let negative = try await client.send(
            PushJob(token: makeToken(2), payload: try updatePayload(), timeout: .seconds(-1)))
        #expect(negative.isDelivered, "a timeout of zero or less means no deadline: \(negative.disposition)")
    }
}

@Suite(.ownThread) struct ShutdownRaceTests {
    /// Many rounds of threads submitting (and sending) while another thread shuts the client down at a
    /// different moment each time: every push that was accepted gets exactly one result, every refused one
    /// threw, and nothing is left waiting.
    @Test func submitAndSendRacingShutdown() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let payload = try updatePayload()
        var generator = SplitMix64(seed: 42)
        for round in 0..<25 {
            let collector = ResultCollector()
            var configuration = try harness.clientConfiguration()
            configuration.workerCount = 2
            configuration.inboxCapacityPerWorker = 64
            let client = try APNsClient(configuration: configuration, resultHandler: collector)
            let accepted = Atomic<Int>(0)
            let sendsEnded = Tally()
            let finished = Atomic<Int>(0)
            let submitters = 3
            for submitter in 0..<submitters {
                Thread {
                    var index = 0
                    while true {
                        index += 1
                        let job = PushJob(
                            token: makeToken(index % 300, salt: UInt64(submitter)), payload: payload,
                            cookie: UInt64(submitter << 32 | index))
                        do throws(SubmitError) {
                            try client.submit(job)
                            accepted.add(1, ordering: .relaxed)
                        } catch .backPressure {
                            sched_yield()
                        } catch {
                            break
                        }
                    }
                    finished.add(1, ordering: .releasing)
                }.start()
            }
            // `send` callers too: each one returns (a result or .shutDown), none hangs.
            let sends = 20
            for index in 0..<sends {
                Task.detached {
                    _ = try? await client.send(PushJob(token: makeToken(index, salt: 99), payload: payload))
                    sendsEnded.value.add(1, ordering: .releasing)
                }
            }
            usleep(UInt32(generator.next() % 20_000))  // a different moment each round
            await client.shutdown()
            #expect(
                await eventually {
                    finished.load(ordering: .acquiring) == submitters
                        && sendsEnded.value.load(ordering: .acquiring) == sends
                })
            let submitted = accepted.load(ordering: .relaxed)
            #expect(collector.count == submitted, "round \(round): \(submitted) accepted, \(collector.count) results")
            #expect(collector.byCookie().count == submitted)
            #expect(collector.all.allSatisfy { $0.cookie & (1 << 63) == 0 }, "send results go to their callers only")
        }
    }
}

/// A counter shared with detached tasks.
private final class Tally: Sendable {
    let value = Atomic<Int>(0)
}

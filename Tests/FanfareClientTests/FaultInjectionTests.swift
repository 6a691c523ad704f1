// The simulator's injected faults, each seen by the real client over loopback TLS + HTTP/2: refused
// streams, 429/500/503 bursts, connection resets with requests in flight, and responses held past the
// client's deadline. Every push ends with exactly one result, and the accepted-push log agrees with what
// the client saw (a delivered push is in the log; a push is in it twice only if it was sent twice).
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct FaultInjectionTests {
    private func run(
        _ simulator: SimulatorConfiguration, count: Int, client change: (inout ClientConfiguration) -> Void = { _ in }
    ) async throws -> (TestHarness, [UInt64: PushResult], [AcceptedRecord]) {
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        change(&configuration)
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        #expect(await collector.waitFor(count: count, timeout: .seconds(60)))
        await harness.shutdown()
        let results = collector.byCookie()
        #expect(results.count == count, "every push ends with exactly one result")
        return (harness, results, try harness.acceptedLog())
    }

    /// Every delivered push is in the log under its apns-id, and an apns-id is in the log more than once
    /// only for a push that was sent more than once.
    private func expectLogAgrees(
        _ results: [UInt64: PushResult], _ log: [AcceptedRecord], sourceLocation: SourceLocation = #_sourceLocation
    ) {
        var lines: [String: Int] = [:]
        for record in log { lines[record.string("apns-id") ?? "?", default: 0] += 1 }
        for result in results.values {
            let id = result.apnsID.description
            if result.isDelivered {
                #expect(lines[id, default: 0] >= 1, "delivered \(id) is not in the log", sourceLocation: sourceLocation)
            }
            if lines[id, default: 0] > 1 {
                #expect(
                    result.resends > 0 || result.possibleDuplicate, "\(id) logged \(lines[id]!) times, sent once",
                    sourceLocation: sourceLocation)
            }
        }
        let known = Set(results.values.map(\.apnsID.description))
        #expect(
            lines.keys.allSatisfy { known.contains($0) }, "the log holds only pushes this test sent",
            sourceLocation: sourceLocation)
    }

    @Test func refusedStreamsAreResentAndProcessedOnce() async throws {
        var simulator = SimulatorConfiguration()
        simulator.refusedStreamProbability = 0.1
        let count = 600
        let (harness, results, log) = try await run(simulator, count: count) { $0.maxResends = 12 }
        #expect(
            results.values.allSatisfy { $0.isDelivered },
            "\(results.values.filter { !$0.isDelivered }.prefix(3).map(\.disposition))")
        let stats = harness.simulator.statistics()
        #expect(stats.streamsRefusedInjected > 20, "\(stats.summary())")  // about 60 expected
        // A refused stream was never processed: each refusal costs one resend, and each push is accepted once.
        #expect(results.values.map(\.resends).reduce(0, +) == stats.streamsRefused)
        #expect(stats.accepted == count)
        #expect(log.count == count)
        #expect(Set(log.compactMap { $0.string("apns-id") }).count == count)
        expectLogAgrees(results, log)
    }

    /// Three bursts at once, counted in requests: 503 for 20 of every 100, 500 for 10 of every 70, 429 for 5
    /// of every 30 (the first listed wins where they overlap). The client does not resend these, so the
    /// simulator decides exactly `count` requests and the split is exact.
    @Test func requestBurstsOf503And500And429() async throws {
        let bursts = [
            FaultBurst(
                rule: FaultRule(reason: .serviceUnavailable, probability: 1), length: .requests(20),
                period: .requests(100)),
            FaultBurst(
                rule: FaultRule(reason: .internalServerError, probability: 1), length: .requests(10),
                period: .requests(70)),
            FaultBurst(
                rule: FaultRule(reason: .tooManyRequests, probability: 1), length: .requests(5), period: .requests(30)),
        ]
        var simulator = SimulatorConfiguration()
        simulator.faultBursts = bursts
        let count = 1000
        let (harness, results, log) = try await run(simulator, count: count) { $0.connectionsPerWorker = 2 }
        var expected: [APNsReason: Int] = [:]
        for index in 0..<count {
            if index % 100 >= 80 {
                expected[.serviceUnavailable, default: 0] += 1
            } else if index % 70 >= 60 {
                expected[.internalServerError, default: 0] += 1
            } else if index % 30 >= 25 {
                expected[.tooManyRequests, default: 0] += 1
            }
        }
        var seen: [APNsReason: Int] = [:]
        for result in results.values {
            if let reason = result.disposition.rejectionReason { seen[reason, default: 0] += 1 }
        }
        #expect(seen == expected)
        let rejected = expected.values.reduce(0, +)
        #expect(results.values.filter(\.isDelivered).count == count - rejected)
        #expect(harness.simulator.statistics().count(of: .serviceUnavailable) == expected[.serviceUnavailable])
        #expect(log.count == count - rejected)
        expectLogAgrees(results, log)
    }

    /// A 429 burst in time: while it is on, everything is throttled; outside it nothing is.
    @Test func aTimeBurstThrottlesOnlyInItsWindow() async throws {
        var simulator = SimulatorConfiguration()
        simulator.faultBursts = [
            FaultBurst(
                rule: FaultRule(reason: .tooManyRequests, probability: 1), length: .nanoseconds(50_000_000),
                period: .nanoseconds(100_000_000))
        ]
        simulator.latency = .fixed(nanoseconds: 1_000_000)
        let count = 3000
        let (harness, results, log) = try await run(simulator, count: count)
        let throttled = results.values.filter { $0.disposition.rejectionReason == .tooManyRequests }.count
        let delivered = results.values.filter(\.isDelivered).count
        #expect(throttled + delivered == count)
        #expect(throttled > 0 && delivered > 0, "\(throttled) throttled, \(delivered) delivered")
        #expect(harness.simulator.statistics().count(of: .tooManyRequests) == throttled)
        #expect(log.count == delivered)
        expectLogAgrees(results, log)
    }

    /// Every connection is reset (TCP RST) after 40 decided requests, with requests in flight: the ones
    /// answered before the reset are delivered; the rest are resent on a new connection (or, with a client
    /// that re-sends only what provably never reached APNs, end `.failed(.unconfirmed)`). Some requests were
    /// accepted (logged) but never answered: the log holds more accepted pushes than were delivered.
    @Test func connectionResetsWithRequestsInFlight() async throws {
        var simulator = SimulatorConfiguration()
        simulator.connectionReset = ConnectionResetRule(probability: 1, afterRequests: 40)
        simulator.latency = .uniform(minNanoseconds: 0, maxNanoseconds: 2_000_000)
        let count = 800
        let (harness, results, log) = try await run(simulator, count: count) {
            $0.connectionsPerWorker = 2
            // Fewer in flight than a connection decides before its reset, so every connection answers some.
            $0.maxConcurrentStreamsPerConnection = 16
            $0.maxResends = 30
        }
        let stats = harness.simulator.statistics()
        #expect(stats.connectionsReset >= count / 40 / 2, "\(stats.summary())")
        let delivered = results.values.filter(\.isDelivered)
        let firstTime = delivered.filter { $0.resends == 0 }.count
        #expect(firstTime > 0, "answers sent before a reset arrive")
        let lostInFlight = results.values.filter { result in
            if case .failed(.unconfirmed) = result.disposition { return true }
            return result.resends > 0
        }
        #expect(!lostInFlight.isEmpty, "requests in flight at a reset are resent or end unconfirmed")
        let otherFailures = results.values.filter { result in
            if case .failed(.unconfirmed) = result.disposition { return false }
            return !result.isDelivered
        }
        #expect(otherFailures.isEmpty, "\(otherFailures.prefix(3).map(\.disposition))")
        #expect(log.count > delivered.count, "some accepted pushes lost their answer with the reset")
        #expect(stats.accepted == log.count)
        expectLogAgrees(results, log)
    }

    /// A held response is decided (and logged) at once but answered only after 60 s: the client's deadline (10 s,
    /// so that a simulator thread starved on a loaded machine does not make an ordinary answer late too) ends
    /// those pushes; all others are delivered.
    @Test func heldResponsesOutliveTheClientDeadline() async throws {
        var simulator = SimulatorConfiguration()
        simulator.heldResponses = HeldResponseRule(probability: 0.1, delayNanoseconds: 60_000_000_000)
        let count = 400
        let (harness, results, log) = try await run(simulator, count: count) {
            $0.requestTimeout = TestTime.scaled(.seconds(10))
        }
        let stats = harness.simulator.statistics()
        let late = results.values.filter { $0.disposition == .failed(.deadlineExceeded) }.count
        #expect(late == stats.responsesHeld, "\(stats.summary())")
        #expect(late > 10, "about 40 expected")
        #expect(results.values.filter(\.isDelivered).count == count - late)
        #expect(log.count == count, "held pushes were accepted too, only answered late")
        expectLogAgrees(results, log)
    }
}

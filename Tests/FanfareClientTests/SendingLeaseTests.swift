// A producer with a sending lease (a fan-out shard leased from a cluster): its worker's connections submit nothing
// for sending once the lease has ended, even what was already framed, and send it once the lease is extended. The
// check reads the clock right before each send, so a process stopped between framing and sending sends nothing
// when it resumes past its lease (MultiNodeProcessTests' SIGSTOP case).
import FanfareClient
import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

/// Produces `total` pushes whatever its lease says (a shard checks its lease itself; this one leaves it all to the
/// transport), with a lease the test moves.
private final class LeasedProducer: PushProducer, SendingLease, @unchecked Sendable {
    let total: Int
    let payload: PushPayload
    private var sequence = 0  // the worker's thread only
    let leaseEnd = Atomic<UInt64>(0)

    init(total: Int, payload: PushPayload) {
        self.total = total
        self.payload = payload
    }

    var sendsUntil: UInt64 { leaseEnd.load(ordering: .relaxed) }

    func poll(now: UInt64) -> ProducerPoll {
        guard sequence < total else { return .finished }
        defer { sequence += 1 }
        return .push(PushJob(token: makeToken(sequence), payload: payload, priority: .normal, cookie: UInt64(sequence)))
    }
}

@Suite(.ownThread) struct SendingLeaseTests {
    @Test func nothingIsSentPastTheLeaseAndEverythingOnceItIsExtended() async throws {
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.maxConcurrentStreamsPerConnection = 50
        configuration.requestTimeout = .seconds(60)
        let producer = LeasedProducer(total: 200, payload: try updatePayload())
        // Ended before the client starts: the connection comes up (its handshake is the transport's own
        // business until the first request), but no request leaves.
        producer.leaseEnd.store(1, ordering: .relaxed)
        let collector = ResultCollector()
        let client = try APNsClient(configuration: configuration, resultHandler: collector, producers: [producer])
        defer { client.shutdown() }
        try await Task.sleep(for: .seconds(2))
        #expect(harness.simulator.statistics().totalResponses == 0, "requests left after the lease ended")
        #expect(collector.count == 0)

        // Renewed: what was framed goes out, and the rest follows.
        producer.leaseEnd.store(.max, ordering: .relaxed)
        #expect(await collector.waitFor(count: 200, timeout: .seconds(60)), "\(collector.count) of 200 answered")
        let failures = collector.byCookie().values.filter { !$0.isDelivered }.map { "\($0.disposition)" }
        #expect(failures.isEmpty, "\(Set(failures))")
        // The simulator publishes its counts every 20 ms.
        #expect(await eventually { harness.simulator.statistics().accepted == 200 })
    }
}

extension SendingLeaseTests {
    /// A lease that stays ended for longer than the PING timeout: the PING the idle connection framed meanwhile cannot
    /// leave, so nobody could have answered it, and the connection is not declared dead for it. Before, it was closed
    /// ("no answer to PING"), and what it had framed ended "sent, but no answer came" (possibly sent twice on a retry).
    @Test func aLeaseEndedLongerThanThePingTimeoutLosesNoConnection() async throws {
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.maxConcurrentStreamsPerConnection = 50
        configuration.requestTimeout = .seconds(60)
        configuration.pingInterval = .milliseconds(100)
        configuration.pingTimeout = .milliseconds(400)
        let producer = LeasedProducer(total: 50, payload: try updatePayload())
        producer.leaseEnd.store(1, ordering: .relaxed)
        let collector = ResultCollector()
        let client = try APNsClient(configuration: configuration, resultHandler: collector, producers: [producer])
        defer { client.shutdown() }
        #expect(await eventually { client.statistics.connectionsEstablished >= 1 })
        // Ten PING timeouts' worth of an ended lease.
        try await Task.sleep(for: .seconds(4))
        #expect(client.statistics.connectionsClosed == 0, "a connection was closed while its lease had ended")

        producer.leaseEnd.store(.max, ordering: .relaxed)
        #expect(await collector.waitFor(count: 50), "\(collector.count) of 50 answered")
        let failures = collector.byCookie().values.filter { !$0.isDelivered }.map { "\($0.disposition)" }
        #expect(failures.isEmpty, "\(Set(failures))")
        #expect(client.statistics.connectionsClosed == 0)
    }
}

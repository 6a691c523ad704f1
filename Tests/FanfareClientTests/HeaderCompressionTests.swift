// The client's own HPACK against the simulator's nghttp2 decoder over TLS: whatever HPACK table the server
// allows (none, a small one that forces evictions, the default), every header of every push arrives intact.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct HeaderCompressionTests {
    @Test(arguments: [0, 100, 256, 4096])
    func everyHeaderArrivesWhateverTheServersTableSize(tableSize: Int) async throws {
        var simulator = SimulatorConfiguration()
        simulator.headerTableSize = tableSize
        simulator.latency = .uniform(minNanoseconds: 0, maxNanoseconds: 2_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let expiry = Int64(Date().timeIntervalSince1970) + 3600
        // Priorities alternate (two table entries in turn), some pushes carry expiration and collapse ids.
        let jobs = (0..<300).map { index in
            PushJob(
                token: makeToken(index % 80), payload: payload, priority: index % 3 == 0 ? .normal : .immediate,
                expiration: index % 4 == 0 ? expiry + Int64(index) : nil,
                collapseID: index % 5 == 0 ? "match-\(index % 7)" : nil, cookie: UInt64(index))
        }
        try await submitAll(client, jobs)
        #expect(await collector.waitFor(count: jobs.count))
        let results = collector.byCookie()
        #expect(results.values.allSatisfy { $0.isDelivered }, "\(results.values.filter { !$0.isDelivered }.prefix(3))")
        await harness.shutdown()

        let log = try harness.acceptedLog()
        try #require(log.count == jobs.count)
        let byID = Dictionary(
            uniqueKeysWithValues: log.compactMap { record in record.string("apns-id").map { ($0, record) } })
        for job in jobs {
            let result = try #require(results[job.cookie])
            let record = try #require(byID[result.apnsID.description], "push \(job.cookie) is not in the accepted log")
            expectRecord(record, matches: job, payload: payload, "push \(job.cookie)")
        }
    }
}

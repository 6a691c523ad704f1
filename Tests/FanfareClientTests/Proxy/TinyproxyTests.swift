// Pushes and channel management through a real HTTP CONNECT proxy, tinyproxy from Debian (started by the test,
// in the foreground, on loopback), to the simulator over TLS + HTTP/2 through the tunnel.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct TinyproxyTests {
    @Test func pushesThroughTinyproxyReachTheSimulator() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let proxy = try Tinyproxy(connectPorts: [Int(harness.port)])
        defer { proxy.stop() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port))
        configuration.connectionsPerWorker = 2
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 200
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        #expect(await collector.waitFor(count: count))
        let results = collector.byCookie()
        #expect(results.count == count)
        #expect(
            results.values.allSatisfy { $0.isDelivered },
            "\(String(describing: results.values.first { !$0.isDelivered }?.disposition))")
        #expect(await eventually { client.statistics.connectionsEstablished >= 2 }, "both connections come up")
        await harness.shutdown()
        let accepted = try harness.acceptedIDsByToken()
        #expect(accepted.count == count, "every token's push is in the simulator's accepted log")
        #expect(Set(accepted.keys) == Set((0..<count).map { makeToken($0).hexString }))
        #expect(
            proxy.log.contains("CONNECT 127.0.0.1:\(harness.port)"), "tinyproxy carried the connections: \(proxy.log)")
    }

    @Test func credentialsOpenTheTunnelAndTheirAbsenceIsA407() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let proxy = try Tinyproxy(connectPorts: [Int(harness.port)], basicAuth: ("fanfare", "s3cret"))
        defer { proxy.stop() }
        let payload = try updatePayload()

        let refused = ResultCollector()
        var without = try harness.clientConfiguration()
        without.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port))
        let first = try harness.startClient(without, collector: refused)
        // The push waits for a connection that the back-off keeps retrying, and ends at its deadline.
        try first.submit(PushJob(token: makeToken(1), payload: payload, cookie: 1, timeout: .seconds(2)))
        #expect(await refused.waitFor(count: 1))
        #expect(refused.all.first?.disposition.failure == .deadlineExceeded)
        let error = first.lastConnectionError ?? ""
        #expect(
            error.contains("proxy 127.0.0.1:\(proxy.port) refused CONNECT 127.0.0.1:\(harness.port): 407"), "\(error)")
        #expect(error.contains("it wants credentials"), "\(error)")
        #expect(first.statistics.reconnectBackoffs > 0 && first.statistics.connectionsEstablished == 0)

        let delivered = ResultCollector()
        var with = try harness.clientConfiguration()
        with.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port), username: "fanfare", password: "s3cret")
        let second = try harness.startClient(with, collector: delivered)
        try second.submit(PushJob(token: makeToken(2), payload: payload, cookie: 2))
        #expect(await delivered.waitFor(count: 1))
        #expect(delivered.all.first?.isDelivered == true, "\(String(describing: delivered.all.first?.disposition))")
    }

    @Test func aPortTheProxyDoesNotAllowIsA403() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let proxy = try Tinyproxy(connectPorts: [443])
        defer { proxy.stop() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port))
        let client = try harness.startClient(configuration, collector: collector)
        try client.submit(PushJob(token: makeToken(1), payload: try updatePayload(), cookie: 1, timeout: .seconds(2)))
        #expect(await collector.waitFor(count: 1))
        #expect(collector.all.first?.disposition.failure == .deadlineExceeded)
        let error = client.lastConnectionError ?? ""
        #expect(error.contains("refused CONNECT 127.0.0.1:\(harness.port): 403"), "\(error)")
    }

    @Test func channelManagementThroughTinyproxy() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let proxy = try Tinyproxy(connectPorts: [Int(harness.managementPort)])
        defer { proxy.stop() }
        let manager = try harness.channelManager {
            $0.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port))
        }
        defer { manager.shutdown() }
        let channel = try await manager.create(storagePolicy: .mostRecentMessageStored)
        #expect(try await manager.read(channel).storagePolicy == .mostRecentMessageStored)
        #expect(try await manager.list() == [channel])
        try await manager.delete(channel)
        await harness.shutdown()
        #expect(harness.simulator.managementStatistics().accepted == 4)
        #expect(proxy.log.contains("CONNECT 127.0.0.1:\(harness.managementPort)"), "\(proxy.log)")
    }
}

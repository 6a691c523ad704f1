// A proxy that refuses, answers garbage, never finishes its head, closes in the middle of it, goes silent, sends
// bytes after its head, or dies with tunnels open: each connection fails with an error that names the proxy and
// what it did, nothing traps, every push ends accounted for, and pushes go on once the proxy tunnels again.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct ProxyFaultTests {
    struct Fault: Sendable, CustomTestStringConvertible {
        let name: String
        let behavior: ConnectProxy.Behavior
        /// What the connection error says (`PROXY` and `TARGET` stand for the ports).
        let expected: [String]
        var testDescription: String { name }
    }

    static let faults: [Fault] = [
        Fault(
            name: "407", behavior: .answer("HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"),
            expected: ["proxy 127.0.0.1:PROXY refused CONNECT 127.0.0.1:TARGET: 407", "it wants credentials"]),
        Fault(
            name: "502", behavior: .answer("HTTP/1.1 502 Bad Gateway\r\n\r\n<html>no</html>"),
            expected: ["refused CONNECT 127.0.0.1:TARGET: 502 Bad Gateway (it could not reach 127.0.0.1:TARGET)"]),
        Fault(
            name: "not HTTP", behavior: .answer("SSH-2.0-OpenSSH_9.2\r\n"),
            expected: ["proxy 127.0.0.1:PROXY answered CONNECT", "not an HTTP/1.x response"]),
        Fault(
            name: "malformed status line", behavior: .answer("HTTP/1.1 2000 OK\r\n\r\n"),
            expected: ["answered CONNECT 127.0.0.1:TARGET with the status line 'HTTP/1.1 2000 OK'"]),
        Fault(
            name: "a head that never ends", behavior: .endlessHead,
            expected: ["answered CONNECT 127.0.0.1:TARGET with a response head over 8192 bytes"]),
        Fault(
            name: "closed mid-head", behavior: .closeMidHead("HTTP/1.1 200 Connection est"),
            expected: ["proxy 127.0.0.1:PROXY closed the connection before answering CONNECT 127.0.0.1:TARGET"]),
    ]

    /// The push waits through the failed connects (the worker backs off and retries) and is delivered once the
    /// proxy tunnels; one with a short deadline ends at it.
    @Test(arguments: faults) func aFaultyProxyFailsTheConnectionWithAClearError(_ fault: Fault) async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let proxy = try ConnectProxy(fault.behavior)
        defer { proxy.stop() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port))
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        try client.submit(PushJob(token: makeToken(1), payload: payload, cookie: 1, timeout: .milliseconds(300)))
        try client.submit(PushJob(token: makeToken(2), payload: payload, cookie: 2))
        let expected = fault.expected.map {
            $0.replacingOccurrences(of: "PROXY", with: "\(proxy.port)")
                .replacingOccurrences(of: "TARGET", with: "\(harness.port)")
        }
        #expect(
            await eventually { expected.allSatisfy { (client.lastConnectionError ?? "").contains($0) } },
            "\(client.lastConnectionError ?? "no error") does not say \(expected)")
        #expect(await collector.waitFor(count: 1))
        #expect(collector.all.first?.cookie == 1 && collector.all.first?.disposition == .failed(.deadlineExceeded))
        #expect(client.statistics.connectionsEstablished == 0)
        #expect(client.statistics.reconnectBackoffs > 0, "the worker backs off between attempts")

        proxy.behavior = .tunnel()
        #expect(await collector.waitFor(count: 2))
        let results = collector.byCookie()
        #expect(results[2]?.isDelivered == true, "\(String(describing: results[2]?.disposition))")
        #expect(proxy.tunnelsOpened >= 1)
    }

    @Test func aSilentProxyTimesOutWithinTheConnectTimeout() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let proxy = try ConnectProxy(.silent)
        defer { proxy.stop() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port))
        configuration.connectTimeout = .milliseconds(300)
        let client = try harness.startClient(configuration, collector: collector)
        try client.submit(PushJob(token: makeToken(1), payload: try updatePayload(), cookie: 1))
        let expected = "timed out waiting for proxy 127.0.0.1:\(proxy.port) to answer CONNECT 127.0.0.1:\(harness.port)"
        #expect(
            await eventually { (client.lastConnectionError ?? "").contains(expected) },
            "\(client.lastConnectionError ?? "no error")")
        proxy.behavior = .tunnel()
        #expect(await collector.waitFor(count: 1))
        #expect(collector.all.first?.isDelivered == true)
    }

    @Test func aHeadInPiecesAndCredentialsOpenTheTunnel() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let proxy = try ConnectProxy(.tunnelInPieces(bytes: 3, pauseMilliseconds: 2))
        defer { proxy.stop() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port), username: "user", password: "p:ss")
        let client = try harness.startClient(configuration, collector: collector)
        try client.submit(PushJob(token: makeToken(1), payload: try updatePayload(), cookie: 1))
        #expect(await collector.waitFor(count: 1))
        #expect(collector.all.first?.isDelivered == true, "\(String(describing: collector.all.first?.disposition))")
        let target = "127.0.0.1:\(harness.port)"
        // Basic base64("user:p:ss"): the password may hold ':' (only the user name may not).
        #expect(
            proxy.requestHeads.first
                == "CONNECT \(target) HTTP/1.1\r\nHost: \(target)\r\nProxy-Authorization: Basic dXNlcjpwOnNz\r\n\r\n")
    }

    /// A proxy sends nothing of its own after its head: bytes there are the far end's and go to TLS. A TLS alert
    /// sent in the same write as the 200 must fail the handshake with that alert, not be dropped or read as head.
    @Test func bytesAfterTheHeadGoToTLS() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let handshakeFailureAlert: [UInt8] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]
        let proxy = try ConnectProxy(.answerWithTrailing(handshakeFailureAlert))
        defer { proxy.stop() }
        var configuration = try harness.clientConfiguration()
        configuration.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port))
        let client = try harness.startClient(configuration, collector: ResultCollector())
        #expect(
            await eventually { (client.lastConnectionError ?? "").contains("alert handshake failure") },
            "\(client.lastConnectionError ?? "no error")")
        #expect(proxy.requestHeads.count >= 1)
    }

    /// The proxy cuts every tunnel with pushes in flight: each push ends once (answered, or unconfirmed: it went out
    /// and its answer did not come back), and the pushes after it are delivered through new tunnels.
    @Test func aProxyDyingMidStreamLosesNoPush() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .uniform(minNanoseconds: 1_000_000, maxNanoseconds: 2_000_000_000)
        simulator.initialMaxConcurrentStreams = 1000
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let proxy = try ConnectProxy()
        defer { proxy.stop() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port))
        configuration.connectionsPerWorker = 2
        configuration.firstRequestAlone = false
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 400
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        let cut = try await perform(when: { collector.count > 0 && client.statistics.inFlight > 10 }) {
            proxy.cutTunnels()
        }
        #expect(cut != nil, "no moment with pushes both answered and in flight")
        #expect(await collector.waitFor(count: count))

        let later = 50
        try await submitAll(
            client,
            (0..<later).map { PushJob(token: makeToken(count + $0), payload: payload, cookie: UInt64(count + $0)) })
        #expect(await collector.waitFor(count: count + later))
        let results = collector.byCookie()
        #expect(results.count == count + later)
        for (cookie, result) in results where !result.isDelivered {
            guard case .failed(.unconfirmed(let cause)) = result.disposition, cookie < count else {
                Issue.record("push \(cookie): \(result.disposition)")
                continue
            }
            #expect(cause.contains("connection ended"), "\(cause)")
        }
        #expect((count..<(count + later)).allSatisfy { results[UInt64($0)]?.isDelivered == true })
        #expect(proxy.tunnelsOpened > 2, "the worker reconnected through the proxy")
    }

    @Test func channelManagementRefusedByTheProxySaysWhy() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let proxy = try ConnectProxy(.answer("HTTP/1.0 403 Forbidden\r\n\r\n"))
        defer { proxy.stop() }
        let manager = try harness.channelManager {
            $0.proxy = HTTPProxy(host: "127.0.0.1", port: UInt16(proxy.port))
        }
        defer { manager.shutdown() }
        do {
            _ = try await manager.create(storagePolicy: .noMessageStored)
            Issue.record("a channel was created through a proxy that refused the tunnel")
        } catch {
            let text = "\(error)"
            #expect(text.contains("proxy 127.0.0.1:\(proxy.port) refused CONNECT 127.0.0.1:\(harness.managementPort)"))
            #expect(text.contains("403 Forbidden"), "\(text)")
        }
        proxy.behavior = .tunnel()
        let channel = try await manager.create(storagePolicy: .noMessageStored)
        #expect(try await manager.list() == [channel])
    }
}

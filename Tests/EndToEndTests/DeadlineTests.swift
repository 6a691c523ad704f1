// Pushes that get no answer in time end as `.failed(.deadlineExceeded)`: whether the server is slow or
// no connection can be made at all.
import FanfareClient
import FanfareCore
import FanfareSimulator
import Foundation
import Glibc
import Testing

/// A port on 127.0.0.1 that refuses connections for as long as this value lives: the socket is bound (so
/// no other test can take the port) but never listens.
struct RefusingPortError: Error {}

final class RefusingPort {
    let fd: Int32
    let port: UInt16

    init() throws {
        let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(socketFD >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socketFD, $0, length) == 0 && getsockname(socketFD, $0, &length) == 0 }
        }
        guard bound else {
            close(socketFD)
            throw RefusingPortError()
        }
        fd = socketFD
        port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(fd) }
}

@Suite struct DeadlineTests {
    @Test func slowServerAnswerEndsAsDeadlineExceeded() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 3_000_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.requestTimeout = .milliseconds(300)
        configuration.firstRequestAlone = false
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        // Five use the client's timeout, one its own (shorter) one.
        var jobs = (0..<5).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) }
        jobs.append(PushJob(token: makeToken(9), payload: payload, cookie: 99, timeout: .milliseconds(100)))
        try await submitAll(client, jobs)
        #expect(await collector.waitFor(count: jobs.count, timeout: .seconds(10)))
        let results = collector.byCookie()
        #expect(results.count == jobs.count)
        for result in results.values {
            #expect(result.disposition == .failed(.deadlineExceeded), "\(result.cookie): \(result.disposition)")
            #expect(result.disposition.action == .retryLater)
            #expect(result.latencyNanoseconds < 3_000_000_000, "given up before the server answered")
        }
        // The client reset those streams; the connection stays usable.
        #expect(await eventually(timeout: .seconds(5)) { client.statistics.inFlight == 0 })
        #expect(client.statistics.failed == jobs.count)
    }

    @Test func pushesWaitingForAnUnreachableServerEndAsDeadlineExceeded() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let refusing = try RefusingPort()
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration(port: refusing.port)
        configuration.requestTimeout = .milliseconds(300)
        configuration.connectionsPerWorker = 2
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let jobs = (0..<20).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) }
        try await submitAll(client, jobs)
        #expect(await collector.waitFor(count: jobs.count, timeout: .seconds(10)))
        let results = collector.byCookie()
        #expect(results.count == jobs.count)
        #expect(results.values.allSatisfy { $0.disposition == .failed(.deadlineExceeded) })
        let error = try #require(client.lastConnectionError, "the client says why nothing was sent")
        #expect(error.contains("\(refusing.port)"), "\(error)")
        #expect(error.lowercased().contains("refused"), "\(error)")
        #expect(client.statistics.connectionsOpened >= 2, "the client kept retrying with back-off")
        withExtendedLifetime(refusing) {}
    }
}

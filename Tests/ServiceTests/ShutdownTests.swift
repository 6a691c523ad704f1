// Graceful shutdown in-process: a client that never finishes its request cannot hold the service past its
// shutdown timeout. (A wave cut by a shutdown and resumed by the next start: DurableWaveAPITests.)
import FanfareService
import FanfareSimulator
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite("Shutdown", .ownThread)
struct ShutdownTests {
    @Test("requests still open after --shutdown-timeout do not keep the service from stopping")
    func stalledRequests() async throws {
        // APNs holds its answer for 60 s (as long as the push's deadline): the single push's handler waits.
        let fixture = try await ServiceFixture(
            simulator: ServiceFixture.simulatorConfiguration(latency: .fixed(nanoseconds: 60_000_000_000))
        ) {
            $0.shutdownTimeout = .seconds(1)
            $0.fanout.client.requestTimeout = .seconds(60)
        }
        defer { fixture.removeDirectory() }
        let client = fixture.client
        let pending = Task {
            try await client.post("/v1/push", json: #"{"token":"\#(tokenHex(9))","event":"update","content_state":{}}"#)
        }
        let engine = fixture.server.engine
        #expect(await eventually { engine.statistics.client.inFlight == 1 })
        // And a client that sent half a request and nothing more.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(client.port).bigEndian)
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        #expect(connected == 0)
        let partial = Array(
            "POST /v1/tokens HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"tokens\""
                .utf8)
        #expect(partial.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == partial.count)

        let started = ContinuousClock.now
        try await fixture.stop()
        let took = ContinuousClock.now - started
        // Without the cut-off this takes the push's 60 s deadline; with it, the timeout and a second.
        #expect(took < .seconds(30), "stopping took \(took)")
        // The held push was answered: the service stopped before APNs did.
        let answer = try? await pending.value
        #expect(answer?.status == 503, "\(String(describing: answer))")
    }
}

// Issue 24: the API's own limits. Event streams past `--max-event-streams` are refused with 503 (and admitted
// again once one ends); connections past `--max-api-connections` wait to be accepted until others close.
import FanfareService
import FanfareSimulator
import FanfareTestSupport
import Foundation
import Glibc
import Synchronization
import Testing

@Suite("API limits: connections and event streams", .ownThread)
struct ConnectionLimitTests {
    @Test func eventStreamsPastTheLimitAreRefusedUntilOneEnds() async throws {
        // 30 s per push: the wave runs for the whole test (the streams end because their clients leave).
        let fixture = try await ServiceFixture(
            simulator: ServiceFixture.simulatorConfiguration(latency: .fixed(nanoseconds: 30_000_000_000))
        ) { configuration in
            configuration.maxEventStreams = 1
        }
        defer { fixture.removeDirectory() }
        let client = fixture.client
        #expect(await eventually { try await client.get("/readyz").status == 200 })
        #expect(try await client.post("/v1/tokens", json: registrationBody(0..<3, channel: "m")).status == 200)
        let published = try await client.post("/v1/channels/m/updates", json: updateBody(timestamp: unixNow, home: 1))
        let location = try #require(published.header("location"))
        let firstOpened = Atomic<Bool>(false)
        let firstLeaves = Atomic<Bool>(false)
        let first = Task {
            try await client.stream(location + "/events") { _ in
                firstOpened.store(true, ordering: .releasing)
                return !firstLeaves.load(ordering: .acquiring)
            }
        }
        #expect(await eventually { firstOpened.load(ordering: .acquiring) }, "the first stream is open")
        let refused = try await client.stream(location + "/events") { _ in false }
        let body = problem(refused, status: 503, code: "back_pressure")
        #expect((body["detail"] as? String ?? "").contains("--max-event-streams"), "\(body)")
        #expect(refused.header("retry-after") != nil)
        // The first client leaves; its stream ends at its next event, and a stream is admitted again.
        firstLeaves.store(true, ordering: .releasing)
        _ = try? await first.value
        #expect(
            await eventually {
                let again = try await client.stream(location + "/events") { _ in false }
                return again.status == 200
            }, "admitted once the first stream ended")
        try await fixture.stop()
    }

    @Test func connectionsPastTheLimitWaitUntilOthersClose() async throws {
        let fixture = try await ServiceFixture { configuration in
            configuration.maxAPIConnections = 2
            configuration.maxEventStreams = 2
        }
        defer { fixture.removeDirectory() }
        var client = fixture.client
        #expect(await eventually { try await client.get("/healthz").status == 200 })
        // Idle connections take every place (more than the limit: the listener accepts what is pending in one
        // read, so it may go a few over before it stops accepting).
        let idle = try (0..<8).map { _ in try Self.connect(port: client.port) }
        // Accepted by the kernel, not by the service: the request gets no answer while both stay open.
        client.timeout = .seconds(1)
        await #expect(throws: (any Error).self, "no answer while the limit is reached") {
            _ = try await client.get("/healthz")
        }
        for socket in idle { close(socket) }
        client.timeout = TestTime.scaled(Liveness.condition)
        #expect(await eventually { try await client.get("/healthz").status == 200 }, "answered once they closed")
        try await fixture.stop()
    }

    /// A TCP connection to 127.0.0.1:`port` that sends nothing.
    static func connect(port: Int) throws -> Int32 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else { throw HTTPTestError(description: "connect failed: errno \(errno)") }
        return socket
    }
}

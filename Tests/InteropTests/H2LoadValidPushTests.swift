// h2load (nghttp2's load generator, written by nobody here) drives our simulator with valid Live Activity
// pushes over h2 + TLS: our server must interoperate with an independent HTTP/2 client at load, and its
// counters must agree with what the client saw.
//
// h2load is a generic HTTP/2 client, not an APNs client: on a fresh connection it sends its first flight
// of `-m` streams without waiting for the server's SETTINGS, and it never retries a refused stream. Against
// APNs' opening limit of one stream, whichever of those streams arrive before h2load has seen SETTINGS(1)
// are refused (RST_STREAM REFUSED_STREAM, by nghttp2 inside the simulator) and h2load counts them as
// "errored" — correct HTTP/2 behaviour on both sides, and a race on who reads first. So the all-2xx run
// opens connections at the full limit, and a second run checks the APNs-like default stays correct
// under that race.
import FanfareSimulator
import FanfareTestSupport
import Testing

@Suite("h2load → simulator, valid pushes", .ownThread)
struct H2LoadValidPushTests {
    static let requests = 2000
    static let clients = 4
    static let streamsPerClient = 100

    /// Runs `h2load -n 2000 -c 4 -m 100 -t 1` with valid Live Activity push headers and body.
    private func runH2Load(_ fixture: InteropFixture, port: UInt16) async throws -> (ToolRun, H2LoadSummary) {
        let h2load = try ExternalTool.h2load.require()
        let body = try fixture.directory.write("payload.json", InteropValues.liveActivityBody)
        let url = "https://127.0.0.1:\(port)/3/device/\(InteropValues.hexToken())"
        // h2load 1.52 has no option to trust a CA and does not verify the server certificate, so our
        // self-signed chain needs no extra flags. `-d` makes every request a POST with that body.
        let run = try await runTool(
            h2load,
            [
                "-n", String(Self.requests), "-c", String(Self.clients), "-m", String(Self.streamsPerClient), "-t", "1",
                "-H", "authorization: \(try fixture.authorizationHeaderValue())",
                "-H", "apns-topic: \(InteropValues.liveActivityTopic)",
                "-H", "apns-push-type: liveactivity",
                "-H", "apns-priority: 10",
                "-d", body, url,
            ], in: fixture.directory)
        let summary = try #require(H2LoadSummary(parsing: run.standardOutput), "no h2load summary in:\n\(run)")
        #expect(run.status == 0, "\(run)")
        #expect(
            summary.total == Self.requests && summary.started == Self.requests && summary.done == Self.requests,
            "\(summary)")
        #expect(summary.timeout == 0, "\(summary)")
        return (run, summary)
    }

    @Test("2000 valid pushes over 4 connections × 100 streams all get 200 (connections open at 1000 streams)")
    func validPushesAllSucceed() async throws {
        let fixture = try InteropFixture()
        var configuration = SimulatorConfiguration()
        configuration.initialMaxConcurrentStreams = configuration.maxConcurrentStreams
        let simulator = try fixture.startSimulator(configuration: configuration)
        defer { simulator.shutdown() }

        let (_, summary) = try await runH2Load(fixture, port: simulator.boundAddress.port)
        print("h2load → simulator (4 × 100 streams): \(summary)")
        #expect(summary.succeeded == Self.requests, "\(summary)")
        #expect(summary.failed == 0 && summary.errored == 0, "\(summary)")
        #expect(summary.status2xx == Self.requests, "every push should be accepted: \(summary)")
        #expect(summary.status3xx == 0 && summary.status4xx == 0 && summary.status5xx == 0, "\(summary)")

        let stats = simulator.finalStatistics()
        #expect(stats.accepted == Self.requests, "simulator summary:\n\(stats.summary())")
        #expect(stats.count(status: 200) == Self.requests)
        #expect(stats.totalRejections == 0, "simulator summary:\n\(stats.summary())")
        #expect(stats.streamsRefused == 0)
        #expect(stats.connectionsOpened == Self.clients)
        #expect(stats.acceptedPayloadBytes == Self.requests * InteropValues.liveActivityBody.utf8.count)
    }

    @Test("with APNs' opening limit of one stream, h2load's early streams are refused, never mis-answered")
    func openingStreamLimitRefusesOnlyTheFirstFlight() async throws {
        let fixture = try InteropFixture()
        let simulator = try fixture.startSimulator()  // defaults: 1 stream until the first 200, then 1000
        defer { simulator.shutdown() }

        let (_, summary) = try await runH2Load(fixture, port: simulator.boundAddress.port)
        print("h2load → simulator (APNs-like opening SETTINGS): \(summary)")
        // Every answer is a 200; the only losses are streams refused unprocessed, and at most the first
        // flight of each connection but its one admitted stream can be refused.
        #expect(summary.status2xx == summary.succeeded, "\(summary)")
        #expect(summary.status3xx == 0 && summary.status4xx == 0 && summary.status5xx == 0, "\(summary)")
        #expect(summary.succeeded + summary.errored == Self.requests, "\(summary)")
        #expect(summary.errored <= Self.clients * (Self.streamsPerClient - 1), "\(summary)")

        let stats = simulator.finalStatistics()
        #expect(stats.accepted == summary.status2xx, "simulator and h2load disagree:\n\(stats.summary())\n\(summary)")
        #expect(stats.totalRejections == 0, "simulator summary:\n\(stats.summary())")
        #expect(stats.connectionsOpened == Self.clients)
        // Streams above the not-yet-acknowledged SETTINGS limit are refused by nghttp2 itself; the simulator
        // counts every REFUSED_STREAM reset it sends.
        #expect(stats.streamsRefused == summary.errored, "h2load saw \(summary.errored) refused streams")
    }
}

// Durable waves through the API, in-process (issue 11): a second service on the registry file of a first one
// answers for the first one's waves (from the stored final reports), and lists them after its own.
import FanfareFanout
import FanfareService
import FanfareTestSupport
import Foundation
import Testing

@Suite("Durable waves over HTTP", .ownThread)
struct DurableWaveAPITests {
    @Test(
        "waves from before a restart: GET /v1/waves/{id} and its events from the stored report, listed and paged after memory waves"
    )
    func reportsAcrossARestart() async throws {
        let first = try await ServiceFixture()
        defer { first.removeDirectory() }
        var client = first.client
        #expect(try await client.post("/v1/tokens", json: registrationBody(0..<300, channel: "m")).status == 200)
        let timestamp = unixNow
        var before: [Int] = []
        for (step, channel) in ["m", "m", "quiet"].enumerated() {
            let published = try await client.post(
                "/v1/channels/\(channel)/updates", json: updateBody(timestamp: timestamp + Int64(step), home: step))
            let id = try #require(published.json?["wave_id"] as? Int, "\(published)")
            #expect(
                await eventually { try await client.get("/v1/waves/\(id)").json?["state"] as? String == "complete" })
            before.append(id)
        }
        try await first.stop()

        let second = try await ServiceFixture(databasePath: first.databasePath, directory: first.directory)
        client = second.client
        #expect(
            second.server.engine.wave(id: UInt64(before[0])) == nil, "the new engine does not hold old waves in memory")
        let stored = try await client.get("/v1/waves/\(before[1])")
        #expect(stored.status == 200, "\(stored)")
        let report = try #require(stored.json)
        #expect(report["state"] as? String == "complete")
        #expect(
            report["targeted"] as? Int == 300 && report["delivered"] as? Int == 300
                && report["accounted"] as? Int == 300, "\(report)")
        #expect(report["restarts"] as? Int == 0 && report["resent_after_restart"] as? Int == 0, "\(report)")
        #expect(report["makespan_seconds"] is Double)
        _ = problem(try await client.get("/v1/waves/\(before[2] + 1000)"), status: 404, code: "not_found")

        // Its event stream: the final report at once, then the end.
        let stream = try await client.stream("/v1/waves/\(before[0])/events") { _ in true }
        let events = serverSentEvents(stream.body)
        #expect(events.map(\.event) == ["complete"], "\(stream)")
        let event = try JSONSerialization.jsonObject(with: Data((events.first?.data ?? "").utf8)) as? [String: Any]
        #expect(event?["id"] as? Int == before[0] && event?["delivered"] as? Int == 300)

        // A new wave in memory comes first; the stored ones follow, each once, and page like memory waves.
        let published = try await client.post(
            "/v1/channels/m/updates", json: updateBody(timestamp: timestamp + 10, home: 9))
        let newest = try #require(published.json?["wave_id"] as? Int)
        #expect(newest > before[2], "wave ids continue after the stored ones")
        #expect(
            await eventually { try await client.get("/v1/waves/\(newest)").json?["state"] as? String == "complete" })
        let all = try await client.get("/v1/waves")
        #expect(
            (all.json?["waves"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } == [newest] + before.reversed(),
            "\(all)")
        #expect(all.json?["next_before"] == nil)
        var paged: [Int] = []
        var next: Int? = nil
        repeat {
            let page = try await client.get("/v1/waves?limit=2" + (next.map { "&before=\($0)" } ?? ""))
            paged += (page.json?["waves"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } ?? []
            next = page.json?["next_before"] as? Int
        } while next != nil && paged.count < 10
        #expect(paged == [newest] + before.reversed())
        let quiet = try await client.get("/v1/waves?channel=quiet")
        #expect((quiet.json?["waves"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } == [before[2]], "\(quiet)")
        try await second.stop()
    }

    @Test(
        "shutdown mid-wave: writes refused, the wave is interrupted; the next start resumes it and sends no token twice"
    )
    func gracefulShutdownResumes() async throws {
        // 2 streams at 50 ms: 2,000 tokens take about 50 s, so the shutdown lands inside the wave on any machine.
        let slow = ServiceFixture.simulatorConfiguration(latency: .fixed(nanoseconds: 50_000_000))
        let narrow: (inout ServiceConfiguration) -> Void = {
            $0.fanout.client.connectionsPerWorker = 1
            $0.fanout.client.maxConcurrentStreamsPerConnection = 2
        }
        let first = try await ServiceFixture(simulator: slow, configure: narrow)
        defer { first.removeDirectory() }
        var client = first.client
        #expect(try await client.post("/v1/tokens", json: registrationBody(0..<2_000, channel: "d")).status == 200)
        let published = try await client.post("/v1/channels/d/updates", json: updateBody(timestamp: unixNow, home: 1))
        let wave = try #require(published.json?["wave_id"] as? Int)
        #expect(await eventually { (try await client.get("/v1/waves/\(wave)").json?["delivered"] as? Int ?? 0) >= 10 })
        first.server.shutdown()
        let refused = try await client.post("/v1/channels/d/updates", json: updateBody(timestamp: unixNow + 1, home: 2))
        _ = problem(refused, status: 503, code: "shutting_down")
        #expect(refused.header("retry-after") == "1")
        try await first.stopped()
        let interrupted = try #require(first.server.engine.wave(id: UInt64(wave))?.report)
        #expect(interrupted.state == .interrupted, "\(interrupted)")
        let sentBefore = first.acceptedLines().count
        #expect(sentBefore > 0 && sentBefore < 2_000, "\(sentBefore) pushes before the shutdown")

        // The next start (a fast simulator now) finishes the wave.
        let second = try await ServiceFixture(databasePath: first.databasePath, directory: first.directory)
        client = second.client
        #expect(await eventually { try await client.get("/v1/waves/\(wave)").json?["state"] as? String == "complete" })
        let report = try #require(try await client.get("/v1/waves/\(wave)").json)
        #expect(report["delivered"] as? Int == 2_000 && report["accounted"] as? Int == 2_000, "\(report)")
        #expect(report["restarts"] as? Int == 1 && report["resent_after_restart"] as? Int == 0, "\(report)")
        try await second.stop()
        // Both simulators' logs together: every token once.
        let tokens = (first.acceptedLines() + second.acceptedLines()).compactMap { line in
            line.range(of: #""token":""#).map { String(line[$0.upperBound...].prefix(64)) }
        }
        #expect(
            tokens.count == 2_000 && Set(tokens).count == 2_000, "\(tokens.count) lines, \(Set(tokens).count) tokens")
    }
}

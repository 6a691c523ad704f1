// Idempotency-Key on POST: a repeat gets the stored answer (Idempotency-Replayed: true) and does nothing
// again; another body under the same key is 422; a repeat while the first runs is 409; the answers live in
// the registry file, so a restarted service keeps them.
import FanfareService
import FanfareSimulator
import FanfareTestSupport
import Foundation
import Testing

@Suite("Idempotency-Key", .ownThread)
struct IdempotencyTests {
    @Test("replay returns the stored answer and does nothing again; another body is 422")
    func replayAndMismatch() async throws {
        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let client = fixture.client
        let key = [("Idempotency-Key", "register-batch-1")]
        let first = try await client.post("/v1/tokens", json: registrationBody(0..<5, channel: "m"), headers: key)
        #expect(first.status == 200 && first.header("idempotency-replayed") == nil, "\(first)")
        let again = try await client.post("/v1/tokens", json: registrationBody(0..<5, channel: "m"), headers: key)
        #expect(again.status == 200, "\(again)")
        #expect(again.header("idempotency-replayed") == "true")
        #expect(again.body == first.body)

        let publishKey = [("Idempotency-Key", "goal-1")]
        let body = updateBody(timestamp: unixNow, home: 1)
        let published = try await client.post("/v1/channels/m/updates", json: body, headers: publishKey)
        #expect(published.status == 202, "\(published)")
        let replayed = try await client.post("/v1/channels/m/updates", json: body, headers: publishKey)
        #expect(replayed.status == 202)
        #expect(replayed.header("idempotency-replayed") == "true")
        #expect(replayed.header("location") == published.header("location"))
        #expect(replayed.json?["wave_id"] as? Int == published.json?["wave_id"] as? Int)
        // One wave, not two.
        let waves = try await client.get("/v1/waves")
        #expect((waves.json?["waves"] as? [Any])?.count == 1, "\(waves)")

        let other = try await client.post(
            "/v1/channels/m/updates", json: updateBody(timestamp: unixNow, home: 2), headers: publishKey)
        _ = problem(other, status: 422, code: "idempotency_key_reused")
        // The same key on another route is another request too.
        let elsewhere = try await client.post("/v1/channels/n/updates", json: body, headers: publishKey)
        _ = problem(elsewhere, status: 422, code: "idempotency_key_reused")
        // Errors are stored as well: a retry of a bad request gets the same problem.
        let badKey = [("Idempotency-Key", "bad-1")]
        let bad = try await client.post("/v1/tokens", json: #"{"tokens":[]}"#, headers: badKey)
        _ = problem(bad, status: 400, code: "invalid_request")
        let badAgain = try await client.post("/v1/tokens", json: #"{"tokens":[]}"#, headers: badKey)
        #expect(badAgain.header("idempotency-replayed") == "true" && badAgain.body == bad.body)

        let invalid = try await client.post(
            "/v1/tokens", json: registrationBody(0..<1, channel: "m"), headers: [("Idempotency-Key", "")])
        _ = problem(invalid, status: 400, code: "invalid_parameter")
        try await fixture.stop()
        #expect(fixture.acceptedLines().count == 5)
    }

    @Test("a repeat while the first request is still being answered is 409")
    func inProgress() async throws {
        // APNs answers after 10 s, so the first push is in flight while the repeat arrives, however loaded the
        // machine (with 1.5 s the repeat came after the answer under the full suite).
        let fixture = try await ServiceFixture(
            simulator: ServiceFixture.simulatorConfiguration(latency: .fixed(nanoseconds: 10_000_000_000)))
        defer { fixture.removeDirectory() }
        let client = fixture.client
        let key = [("Idempotency-Key", "single-push-7")]
        let body = #"{"token":"\#(tokenHex(7))","event":"update","content_state":{"home":1}}"#
        let first = Task { try await client.post("/v1/push", json: body, headers: key) }
        let engine = fixture.server.engine
        #expect(await eventually { engine.statistics.client.inFlight == 1 })
        let racing = try await client.post("/v1/push", json: body, headers: key)
        _ = problem(racing, status: 409, code: "idempotency_key_in_progress")
        let answered = try await first.value
        #expect(answered.status == 200 && answered.json?["status"] as? Int == 200, "\(answered)")
        let replay = try await client.post("/v1/push", json: body, headers: key)
        #expect(replay.header("idempotency-replayed") == "true" && replay.body == answered.body)
        try await fixture.stop()
        // Sent once.
        #expect(fixture.acceptedLines().count == 1)
    }

    @Test("the stored answers survive a restart of the service on the same registry")
    func acrossRestart() async throws {
        let directory = NSTemporaryDirectory() + "fanfare-service-restart-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let key = [("Idempotency-Key", "batch-after-restart")]
        let body = registrationBody(0..<20, channel: "m")
        let first = try await ServiceFixture(directory: directory)
        let answered = try await first.client.post("/v1/tokens", json: body, headers: key)
        #expect(answered.status == 200)
        try await first.stop()

        let second = try await ServiceFixture(databasePath: first.databasePath, directory: directory)
        let replay = try await second.client.post("/v1/tokens", json: body, headers: key)
        #expect(replay.status == 200)
        #expect(replay.header("idempotency-replayed") == "true", "\(replay)")
        #expect(replay.body == answered.body)
        _ = problem(
            try await second.client.post("/v1/tokens", json: registrationBody(0..<21, channel: "m"), headers: key),
            status: 422,
            code: "idempotency_key_reused")
        try await second.stop()
    }
}

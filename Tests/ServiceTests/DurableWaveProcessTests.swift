// Durable waves with real processes (issue 11): a `fanfare simulate` process (its own, so its accepted-push log
// outlives the service) and a `fanfare serve` process on a registry file, publishing one update to 100,000
// tokens registered through the API. The service is killed with SIGKILL (or stopped with SIGTERM) at about a
// third of the wave and started again on the same file: the wave completes, and the simulator's log says what
// reached "APNs" and how often.
import FanfareClient
import FanfareCore
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite("Durable waves (child processes)", .serialized, .ownThread)
struct DurableWaveProcessTests {
    static let total = 100_000
    /// `fanfare serve`'s defaults: one worker (shard), a checkpoint window of 25,000 members.
    static let shards = 1
    static let window = 25_000
    static let connections = 2
    static let streams = 100

    /// A simulator process, a registry with `total` tokens on channel "match" registered through the API of
    /// a first service process, and that service.
    struct Run {
        let directory: String
        let database: String
        let logPath: String
        let simulator: SimulateProcess

        var serveArguments: [String] {
            simulator.serveArguments + [
                "--listen", "127.0.0.1:0", "--database", database, "--log-format", "json",
                "--connections", "\(DurableWaveProcessTests.connections)", "--streams",
                "\(DurableWaveProcessTests.streams)",
                "--shutdown-timeout", "60s",
            ]
        }

        func serve(_ name: String) async throws -> ServeProcess {
            let serve = try await ServeProcess(serveArguments, directory: directory, name: name)
            let client = serve.client
            #expect(
                await eventually(timeout: .seconds(120)) { try await client.get("/readyz").status == 200 },
                "\(serve.errors.suffix(2000))")
            return serve
        }
    }

    static func start(_ name: String) async throws -> Run {
        let directory = NSTemporaryDirectory() + "fanfare-durable-\(name)-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let logPath = directory + "/accepted.jsonl"
        // 20 ms per answer and at most 200 streams in flight: 10,000 pushes/s at most, so the wave lasts 10 s or
        // more: the kill lands inside it on any machine, and the two processes leave room for the tests that run
        // beside them (at full speed they took both cores and starved other suites' timing). Four checkpoint
        // windows of tokens: the crash still resends at most one.
        let simulator = try await SimulateProcess(["--latency", "20ms", "--log", logPath], directory: directory)
        return Run(directory: directory, database: directory + "/fanfare.db", logPath: logPath, simulator: simulator)
    }

    /// Registers `total` tokens in batches of 10,000 (the API's largest), two requests at a time.
    static func register(_ client: HTTPTestClient) async throws {
        let batch = 10_000
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, start) in stride(from: 0, to: total, by: batch).enumerated() {
                if index >= 2 { try await group.next() }
                group.addTask {
                    let response = try await client.post(
                        "/v1/tokens", json: registrationBody(start..<start + batch, channel: "match"))
                    #expect(response.status == 200 && response.json?["registered"] as? Int == batch, "\(response)")
                }
            }
            try await group.waitForAll()
        }
        #expect(try await client.get("/readyz").json?["tokens"] as? Int == total)
    }

    /// Publishes one update, waits until about a third of the wave is in the accepted log, and stops the
    /// service with `signal`; the wave's id.
    static func publishAndStop(_ serve: ServeProcess, run: Run, signal: Int32) async throws -> UInt64 {
        let client = serve.client
        let published = try await client.post(
            "/v1/channels/match/updates", json: updateBody(timestamp: unixNow, home: 1))
        #expect(published.status == 202, "\(published)")
        let wave = try #require(published.json?["wave_id"] as? Int)
        let lines = GrowingLineCounter(path: run.logPath)
        let third = await eventually(timeout: .seconds(120)) { lines.count() >= total / 3 }
        #expect(third, "the wave did not reach a third of its tokens: \(lines.count()) lines")
        serve.signal(signal)
        let status = await serve.waitForExit(timeout: .seconds(90))
        let atStop = lines.count()
        #expect(atStop < total, "the wave finished before the stop (\(atStop) lines): nothing was left to resume")
        if signal == SIGKILL {
            #expect(status == SIGKILL, "\(serve.errors.suffix(2000))")
        } else {
            #expect(status == 0, "\(serve.errors.suffix(2000))")
        }
        return UInt64(wave)
    }

    /// Waits until `GET /v1/waves/{id}` says complete; the report.
    static func completeReport(_ serve: ServeProcess, wave: UInt64) async throws -> [String: Any] {
        let client = serve.client
        let complete = await eventually(timeout: .seconds(180)) {
            try await client.get("/v1/waves/\(wave)").json?["state"] as? String == "complete"
        }
        let response = try await client.get("/v1/waves/\(wave)")
        #expect(complete, "\(response)\n\(serve.errors.suffix(2000))")
        return try #require(response.json)
    }

    /// Every registered token in the log at least once; every line of a token carries the apns-id of the
    /// token's first line, the UUIDv5 of (wave id, token). The duplicate count.
    static func checkLog(_ log: AcceptedLog, wave: UInt64) -> Int {
        #expect(log.unparsable == 0)
        #expect(log.idsByToken.count == total, "\(log.idsByToken.count) distinct tokens in the log")
        var missing = 0
        var wrongID = 0
        var mismatched = 0
        for index in 0..<total {
            let token = tokenHex(index)
            guard let ids = log.idsByToken[token] else {
                missing += 1
                continue
            }
            let expected = PushIdentifier.waveID(wave: wave, token: try! DeviceToken(hex: token)).description
            if ids[0] != expected { wrongID += 1 }
            if ids.contains(where: { $0 != ids[0] }) { mismatched += 1 }
        }
        #expect(missing == 0, "\(missing) registered tokens never reached the simulator")
        #expect(wrongID == 0, "\(wrongID) tokens' first push did not carry the UUIDv5 of (wave \(wave), token)")
        #expect(mismatched == 0, "\(mismatched) tokens were sent again with another apns-id")
        return log.duplicatedTokens.count
    }

    static func checkExact(_ report: [String: Any]) {
        #expect(report["targeted"] as? Int == total, "\(report)")
        #expect(report["delivered"] as? Int == total, "\(report)")
        #expect(report["accounted"] as? Int == total, "\(report)")
        #expect(report["restarts"] as? Int == 1, "\(report)")
    }

    @Test(
        "kill -9 at a third of a 100,000-token wave, restarted: complete, duplicates within one checkpoint window, same apns-ids"
    )
    func crash() async throws {
        let run = try await Self.start("crash")
        defer { try? FileManager.default.removeItem(atPath: run.directory) }
        let first = try await run.serve("serve-1")
        try await Self.register(first.client)
        let wave = try await Self.publishAndStop(first, run: run, signal: SIGKILL)
        // Between the crash and the restart, `fanfare waves` shows the wave unfinished, with its checkpoints.
        let between = try await ServeProcess.run(
            ["--database", run.database, "--json"], directory: run.directory, command: "waves")
        let unfinished =
            (try? JSONSerialization.jsonObject(with: Data(between.output.utf8)) as? [String: Any])?["unfinished"]
            as? [[String: Any]]
        #expect(unfinished?.count == 1 && unfinished?.first?["id"] as? Int == Int(wave), "\(between)")
        #expect((unfinished?.first?["checkpoints"] as? Int ?? 0) >= 1, "\(between)")

        let second = try await run.serve("serve-2")
        let report = try await Self.completeReport(second, wave: wave)
        #expect(second.errors.contains(#""message":"wave resumed""#), "\(second.errors.suffix(2000))")
        // The monitor counts a completed wave within ~100 ms of its completion.
        let resentLine = "fanfare_pushes_resent_after_restart_total \(report["resent_after_restart"] as? Int ?? -1)"
        let client = second.client
        #expect(await eventually { try await client.get("/metrics").text.contains(resentLine) }, "\(resentLine)")
        #expect(try await client.get("/metrics").text.contains("fanfare_waves_resumed_total 1"))
        // While the service runs, its registry is locked: `fanfare waves` says so.
        let locked = try await ServeProcess.run(
            ["--database", run.database], directory: run.directory, command: "waves")
        #expect(locked.status == 1 && locked.errors.contains("is `fanfare serve` running on it?"), "\(locked)")
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0, "\(second.errors.suffix(2000))")
        await run.simulator.stop()

        let log = try AcceptedLog(path: run.logPath)
        let duplicates = Self.checkLog(log, wave: wave)
        let resent = report["resent_after_restart"] as? Int ?? -1
        print(
            "durable waves, kill -9 at a third of \(Self.total) tokens: \(duplicates) tokens sent twice "
                + "(\(log.extraLines) extra lines), resent_after_restart \(resent), bound \(Self.window * Self.shards + Self.connections * Self.streams)"
        )
        Self.checkExact(report)
        #expect(duplicates <= Self.window * Self.shards + Self.connections * Self.streams, "\(duplicates) duplicates")
        #expect(resent >= duplicates, "\(report)")
        #expect(log.extraLines == duplicates, "a token was sent more than twice")
    }

    @Test(
        "SIGTERM at a third of a 100,000-token wave, restarted: complete with no duplicate; its report stays queryable")
    func gracefulRestart() async throws {
        let run = try await Self.start("graceful")
        defer { try? FileManager.default.removeItem(atPath: run.directory) }
        let first = try await run.serve("serve-1")
        try await Self.register(first.client)
        let wave = try await Self.publishAndStop(first, run: run, signal: SIGTERM)
        #expect(first.errors.contains("wave interrupted"), "\(first.errors.suffix(2000))")

        let second = try await run.serve("serve-2")
        let report = try await Self.completeReport(second, wave: wave)
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0, "\(second.errors.suffix(2000))")

        // A third start: the wave is no longer in memory; its final report comes from the registry.
        let third = try await run.serve("serve-3")
        let stored = try await third.client.get("/v1/waves/\(wave)")
        #expect(stored.status == 200 && stored.json?["state"] as? String == "complete", "\(stored)")
        #expect(stored.json?["delivered"] as? Int == Self.total && stored.json?["restarts"] as? Int == 1, "\(stored)")
        let listed = try await third.client.get("/v1/waves")
        let ids = (listed.json?["waves"] as? [[String: Any]])?.compactMap { $0["id"] as? Int }
        #expect(ids == [Int(wave)], "\(listed)")
        third.signal(SIGTERM)
        #expect(await third.waitForExit() == 0, "\(third.errors.suffix(2000))")
        await run.simulator.stop()

        let log = try AcceptedLog(path: run.logPath)
        let duplicates = Self.checkLog(log, wave: wave)
        print(
            "durable waves, SIGTERM at a third of \(Self.total) tokens: \(duplicates) tokens sent twice, "
                + "resent_after_restart \(report["resent_after_restart"] as? Int ?? -1)")
        Self.checkExact(report)
        #expect(duplicates == 0 && log.records == Self.total)
        #expect(report["resent_after_restart"] as? Int == 0, "\(report)")

        // `fanfare waves` reads the same report from the file.
        let text = try await ServeProcess.run(["--database", run.database], directory: run.directory, command: "waves")
        #expect(
            text.status == 0 && text.output.contains("100,000") && text.output.contains("no unfinished waves"),
            "\(text)")
        let json = try await ServeProcess.run(
            ["--database", run.database, "--json", "--id", "\(wave)"], directory: run.directory, command: "waves")
        let object = try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any]
        let waves = object?["waves"] as? [[String: Any]]
        #expect(
            waves?.count == 1 && waves?.first?["delivered"] as? Int == Self.total
                && waves?.first?["restarts"] as? Int == 1, "\(json)")
    }
}

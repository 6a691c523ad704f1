// The real `fanfare serve --simulator` binary as a child process, driven over HTTP only: 50,000 tokens
// registered through the API, waves followed to `complete` and checked against the simulator's accepted-push
// log, a burst that supersedes, single pushes, SIGTERM with a wave in flight (resumed by the next start), and
// the refusals at start-up.
import FanfareIO
import FanfareSimulator
import FanfareTestSupport
import Foundation
import Testing

@Suite("fanfare serve (child process)", .ownThread)
struct ServeCommandTests {
    /// Accepted-log lines whose payload carries `"home":N}` (the content state of one update).
    static func lines(_ log: [Substring], home: Int) -> [Substring] {
        log.filter { $0.contains(#""home":\#(home)}"#) }
    }

    /// Follows a wave's event stream to its `complete` event; the final report.
    static func follow(_ client: HTTPTestClient, wave: Int) async throws -> [String: Any] {
        let stream = try await client.stream("/v1/waves/\(wave)/events") { _ in true }
        let events = serverSentEvents(stream.body)
        let last = try #require(events.last, "\(stream)")
        #expect(last.event == "complete", "\(events.map(\.event))")
        return try #require(try JSONSerialization.jsonObject(with: Data(last.data.utf8)) as? [String: Any])
    }

    @Test("50,000 tokens through the API, a wave and a burst checked against the accepted-push log, single pushes")
    func endToEnd() async throws {
        let directory = NSTemporaryDirectory() + "fanfare-serve-e2e-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let logPath = directory + "/accepted.jsonl"
        let serve = try await ServeProcess(
            [
                "--simulator", "--listen", "127.0.0.1:0", "--database", directory + "/fanfare.db", "--simulator-log",
                logPath,
                "--log-format", "json",
            ], directory: directory)
        let client = serve.client
        #expect(await eventually { try await client.get("/readyz").status == 200 })
        // --simulator serves its own channel management: a broadcast channel is created, linked and deleted.
        let linked = try await client.put("/v1/channels/side/broadcast", json: #"{"storage_policy":0}"#)
        #expect(linked.status == 200 && linked.json?["created_by_us"] as? Bool == true, "\(linked)")
        #expect(try await client.delete("/v1/channels/side/broadcast").status == 204)

        let total = 50_000
        for start in stride(from: 0, to: total, by: 10_000) {
            let response = try await client.post(
                "/v1/tokens", json: registrationBody(start..<start + 10_000, channel: "final"),
                headers: [("Idempotency-Key", "final-\(start)")])
            #expect(response.status == 200 && response.json?["registered"] as? Int == 10_000, "\(response)")
        }
        #expect(try await client.get("/readyz").json?["tokens"] as? Int == total)

        // One wave, followed to the end.
        let t0 = unixNow
        let published = try await client.post("/v1/channels/final/updates", json: updateBody(timestamp: t0, home: 101))
        #expect(published.status == 202, "\(published)")
        let first = try await Self.follow(client, wave: try #require(published.json?["wave_id"] as? Int))
        #expect(first["targeted"] as? Int == total)
        #expect(first["delivered"] as? Int == total)
        #expect(first["accounted"] as? Int == total)

        // A burst: three updates at once. Latest state wins: every token gets the last one; the earlier waves
        // stop where the next one started (superseded).
        var burst: [Int] = []
        for (step, home) in [102, 103, 104].enumerated() {
            let response = try await client.post(
                "/v1/channels/final/updates", json: updateBody(timestamp: t0 + 1 + Int64(step), home: home))
            #expect(response.status == 202, "\(response)")
            burst.append(try #require(response.json?["wave_id"] as? Int))
        }
        var reports: [[String: Any]] = []
        for id in burst { reports.append(try await Self.follow(client, wave: id)) }
        for report in reports {
            #expect(report["targeted"] as? Int == total)
            #expect(report["accounted"] as? Int == total, "\(report)")
        }
        let superseded = reports.dropLast().map { $0["superseded"] as? Int ?? 0 }.reduce(0, +)
        #expect(superseded > 0, "\(reports)")
        #expect(reports.last?["delivered"] as? Int == total)
        #expect(reports.last?["superseded"] as? Int == 0)

        // Single pushes: 200, 410 and 400 as APNs (the simulator) answered them.
        for (token, status) in [
            (tokenHex(1), 200), ("0410" + String(repeating: "0f", count: 30), 410),
            ("0400" + String(repeating: "0f", count: 30), 400),
        ] {
            let response = try await client.post(
                "/v1/push", json: #"{"token":"\#(token)","event":"update","content_state":{"home":999}}"#)
            #expect(response.status == 200 && response.json?["status"] as? Int == status, "\(response)")
        }
        let metrics = try await client.get("/metrics").text
        let delivered = [first["delivered"] as? Int ?? 0] + reports.map { $0["delivered"] as? Int ?? 0 }
        #expect(
            metrics.contains(#"fanfare_pushes_total{outcome="delivered"} \#(delivered.reduce(0, +) + 1)"#),
            "\(metrics.prefix(3000))")

        serve.signal(SIGTERM)
        #expect(await serve.waitForExit() == 0, "\(serve.errors.suffix(2000))")

        // The simulator's log agrees with every report: one line per delivered push, the newest state to all.
        let log = ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n")
        #expect(Self.lines(log, home: 101).count == total)
        for (report, home) in zip(reports, [102, 103, 104]) {
            #expect(Self.lines(log, home: home).count == report["delivered"] as? Int, "\(home)")
        }
        let newest = Self.lines(log, home: 104)
        let tokens = newest.compactMap { line in line.range(of: #""token":""#).map { line[$0.upperBound...].prefix(64) }
        }
        #expect(Set(tokens).count == total)
        #expect(Self.lines(log, home: 999).count == 1)
        #expect(log.count == delivered.reduce(0, +) + 1)

        // Logs: JSON, one object a line, a start and an end line per wave.
        let lines = serve.errors.split(separator: "\n")
        #expect(lines.allSatisfy { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) is [String: Any] })
        #expect(lines.filter { $0.contains(#""message":"wave started""#) }.count == 4)
        #expect(lines.filter { $0.contains(#""message":"wave complete""#) }.count == 4)
        #expect(lines.contains { $0.contains("apns connection up") })
    }

    @Test(
        "SIGTERM with a wave in flight: writes get 503 + Retry-After, reads go on, exit 0; the next start finishes the wave, no push twice"
    )
    func gracefulShutdown() async throws {
        let directory = NSTemporaryDirectory() + "fanfare-serve-term-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let logPath = directory + "/accepted.jsonl"
        // 10 streams answered after 45-46 s each: at the signal the newest push in flight was sent moments ago,
        // and the graceful shutdown waits for its answer (up to half of --shutdown-timeout, 60 s), so the service
        // still answers the requests that follow the signal for about 45 s (--timeout 90: a push is not given up
        // before its answer). (15 s was not enough on a 2-core CI
        // machine running the whole suite: the listener had closed before the refused write was sent.)
        let slow = "uniform:45s-46s"
        let arguments = [
            "--simulator", "--listen", "127.0.0.1:0", "--database", directory + "/fanfare.db", "--simulator-log",
            logPath,
            "--simulator-latency", slow, "--connections", "1", "--streams", "10", "--shutdown-timeout", "120s",
            "--timeout", "90",
        ]
        let serve = try await ServeProcess(arguments, directory: directory)
        let client = serve.client
        #expect(await eventually { try await client.get("/readyz").status == 200 })
        #expect(try await client.post("/v1/tokens", json: registrationBody(0..<100, channel: "late")).status == 200)
        let published = try await client.post(
            "/v1/channels/late/updates", json: updateBody(timestamp: unixNow, home: 7))
        let wave = try #require(published.json?["wave_id"] as? Int)
        #expect(await eventually { (try await client.get("/v1/waves/\(wave)").json?["sent"] as? Int ?? 0) > 0 })

        serve.signal(SIGTERM)
        // Draining shows first in readiness (a write sent before the signal is handled would still be taken).
        #expect(await eventually { try await client.get("/readyz").status == 503 })
        let refused = try await client.post(
            "/v1/channels/late/updates", json: updateBody(timestamp: unixNow + 5, home: 8))
        _ = problem(refused, status: 503, code: "shutting_down")
        #expect(refused.header("retry-after") != nil)
        _ = problem(
            try await client.post("/v1/tokens", json: registrationBody(5_000..<5_001, channel: "late")), status: 503,
            code: "shutting_down")
        // Reads still answer while the engine shuts down.
        let during = try await client.get("/v1/waves/\(wave)")
        #expect(during.status == 200, "\(during)")
        #expect(await serve.waitForExit() == 0, "\(serve.errors.suffix(2000))")
        #expect(serve.errors.contains("wave interrupted"), "\(serve.errors.suffix(2000))")
        let cut = ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n")
        #expect(Self.lines(cut, home: 7).count < 100, "the wave was cut by the shutdown")

        // The next start resumes the wave (at 0 latency now) and sends only what the first run did not.
        let restarted = try await ServeProcess(
            arguments.map { $0 == slow ? "0" : $0 }, directory: directory, name: "serve-again")
        let again = restarted.client
        #expect(await eventually { try await again.get("/v1/waves/\(wave)").json?["state"] as? String == "complete" })
        let report = try await again.get("/v1/waves/\(wave)").json
        #expect(
            report?["delivered"] as? Int == 100 && report?["restarts"] as? Int == 1, "\(String(describing: report))")
        #expect(report?["resent_after_restart"] as? Int == 0, "\(String(describing: report))")
        restarted.signal(SIGTERM)
        #expect(await restarted.waitForExit() == 0, "\(restarted.errors.suffix(2000))")
        let log = ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n")
        let tokens = Self.lines(log, home: 7).compactMap { line in
            line.range(of: #""token":""#).map { line[$0.upperBound...].prefix(64) }
        }
        #expect(tokens.count == 100 && Set(tokens).count == 100, "\(tokens.count) lines, \(Set(tokens).count) tokens")
        #expect(Self.lines(log, home: 8).isEmpty)
    }

    @Test(
        "refusals at start-up: beyond loopback without keys, conflicting or bad flags, unreadable key files (exit 64)")
    func refusals() async throws {
        let directory = NSTemporaryDirectory() + "fanfare-serve-flags-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let database = ["--database", directory + "/fanfare.db"]
        let cases: [([String], String)] = [
            (["--simulator", "--listen", "0.0.0.0:0"], "without API keys"),
            (["--simulator", "--listen", "nonsense"], "--listen"),
            (["--simulator", "--endpoint", "https://127.0.0.1:1"], "--simulator runs its own APNs"),
            (["--simulator", "--api-keys", directory + "/missing-keys"], "cannot read"),
            (["--simulator", "--max-body", "lots"], "--max-body"),
            (["--simulator", "--shutdown-timeout", "soon"], "--shutdown-timeout"),
            (["--simulator", "--log-format", "xml"], "--log-format"),
            (["--simulator", "--database-timeout", "0s"], "--database-timeout must be in 1...3600 seconds"),
            (["--simulator", "--database-timeout", "a while"], "--database-timeout"),
            (["--simulator", "--checkpoint-interval", "0"], "--checkpoint-interval must be in 1...3600000"),
            (
                ["--simulator", "--checkpoint-pushes", "20000", "--checkpoint-window", "10000"],
                "--checkpoint-window must be at least"
            ),
            (["--simulator", "--checkpoint-pushes", "many"], "--checkpoint-pushes"),
            (["--listen", "127.0.0.1:0"], "--bundle-id"),
            (
                ["--simulator", "--channel-management", "127.0.0.1:2197"],
                "--simulator serves its own channel management"
            ),
            (
                ["--listen", "127.0.0.1:0", "--channel-management", "ftp://somewhere"],
                "--channel-management 'ftp://somewhere' is not HOST:PORT"
            ),
            (
                ["--listen", "127.0.0.1:0", "--channel-management", "host:port"],
                "--channel-management 'host:port' is not HOST:PORT"
            ),
        ]
        for (arguments, message) in cases {
            let run = try await ServeProcess.run(arguments + database, directory: directory)
            #expect(run.status == 64, "\(arguments): \(run.errors)")
            #expect(run.errors.contains(message), "\(arguments): \(run.errors)")
        }
        // With --log-format json the problem is a JSON line too.
        let json = try await ServeProcess.run(
            ["--simulator", "--listen", "0.0.0.0:0", "--log-format", "json"] + database, directory: directory)
        #expect(json.status == 64)
        let line = try #require(json.errors.split(separator: "\n").last)
        let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect(object?["level"] as? String == "error")
        #expect((object?["message"] as? String)?.contains("without API keys") == true)
    }

    @Test("keys from $FANFARE_API_KEYS: beyond loopback with keys, 401 without one, no key in the log")
    func keysFromEnvironment() async throws {
        let directory = NSTemporaryDirectory() + "fanfare-serve-keys-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let key = "env-key-7f3a9c1e5b2d4f60"
        let serve = try await ServeProcess(
            ["--simulator", "--listen", "0.0.0.0:0", "--database", directory + "/fanfare.db", "--log-level", "debug"],
            directory: directory, environment: ["FANFARE_API_KEYS": "\(key) admin\n"])
        var client = serve.client
        _ = problem(try await client.get("/v1/waves"), status: 401, code: "unauthorized")
        client.apiKey = key
        #expect(try await client.get("/v1/waves").status == 200)
        #expect(try await client.post("/v1/tokens", json: registrationBody(0..<2, channel: "k")).status == 200)
        serve.signal(SIGINT)
        #expect(await serve.waitForExit() == 0)
        #expect(!serve.errors.contains(key) && !serve.output.contains(key))
        #expect(serve.errors.contains("api_keys=1"), "\(serve.errors)")
    }

    @Test("against an APNs endpoint with the flags of fanfare push, the provider key's PEM from $FANFARE_AUTH_KEY")
    func apnsFlagsAndKeyFromEnvironment() async throws {
        let directory = NSTemporaryDirectory() + "fanfare-serve-apns-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let keys = ServiceKeys.shared
        var options = APNsSimulator.Options(
            listen: try SocketAddress(ip: "127.0.0.1", port: 0), tls: keys.serverTLS, verifier: keys.verifier)
        options.acceptedLogPath = directory + "/accepted.jsonl"
        let simulator = try APNsSimulator(configuration: ServiceFixture.simulatorConfiguration(), options: options)
        defer { simulator.shutdown() }
        let pem = try String(contentsOfFile: keys.privateKeyFile, encoding: .utf8)
        let serve = try await ServeProcess(
            [
                "--listen", "127.0.0.1:0", "--database", directory + "/fanfare.db",
                "--endpoint", "https://127.0.0.1:\(simulator.boundAddress.port)", "--ca-file", keys.caFile,
                "--key-id", ServiceKeys.keyID, "--team-id", ServiceKeys.teamID, "--bundle-id", ServiceKeys.bundleID,
            ], directory: directory, environment: ["FANFARE_AUTH_KEY": pem])
        let client = serve.client
        #expect(await eventually { try await client.get("/readyz").status == 200 }, "\(serve.errors)")
        let pushed = try await client.post(
            "/v1/push", json: #"{"token":"\#(tokenHex(3))","event":"update","content_state":{"home":5}}"#)
        #expect(pushed.json?["status"] as? Int == 200, "\(pushed)")
        serve.signal(SIGTERM)
        #expect(await serve.waitForExit() == 0)
        // The key's text never reaches a log line.
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        #expect(!serve.errors.contains(String(body.prefix(40))) && !serve.output.contains(String(body.prefix(40))))
        await simulator.shutdown()
        let log = (try? String(contentsOfFile: directory + "/accepted.jsonl", encoding: .utf8)) ?? ""
        #expect(log.split(separator: "\n").count == 1)
    }
}

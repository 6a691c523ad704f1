// `fanfare serve --database postgres://...` as a child process on a real PostgreSQL (initdb into a temporary
// directory, FanfareTestSupport.PostgresServer) and a `fanfare simulate` process: tokens registered and a wave
// published over real HTTP, its report read; then the service restarted on the same database still has the
// tokens and the report. Bad URLs and an unreachable server are refused at start with one clear line.
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite("fanfare serve on PostgreSQL (child processes)", .serialized, .ownThread)
struct PostgresServiceProcessTests {
    static let total = 20_000

    /// Runs blocking work (initdb, pg_ctl) on a thread of its own, not on the shared test threads.
    static func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    @Test("tokens and a wave through the API on PostgreSQL; a restarted service still has them")
    func registersPublishesAndKeepsEverythingAcrossARestart() async throws {
        let postgres = try await Self.onOwnThread { try PostgresServer() }
        defer { postgres.stop() }
        let directory = NSTemporaryDirectory() + "fanfare-pg-serve-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let logPath = directory + "/accepted.jsonl"
        let simulator = try await SimulateProcess(["--log", logPath], directory: directory)
        let arguments =
            simulator.serveArguments + [
                "--listen", "127.0.0.1:0", "--database", postgres.url, "--log-format", "json", "--shutdown-timeout",
                "60s",
            ]
        func serve(_ name: String) async throws -> ServeProcess {
            let serve = try await ServeProcess(arguments, directory: directory, name: name)
            let client = serve.client
            #expect(
                await eventually(timeout: .seconds(120)) { try await client.get("/readyz").status == 200 },
                "\(serve.errors.suffix(2000))")
            return serve
        }

        let first = try await serve("serve-1")
        for start in stride(from: 0, to: Self.total, by: 10_000) {
            let response = try await first.client.post(
                "/v1/tokens", json: registrationBody(start..<start + 10_000, channel: "match"))
            #expect(response.status == 200 && response.json?["registered"] as? Int == 10_000, "\(response)")
        }
        #expect(try await first.client.get("/readyz").json?["tokens"] as? Int == Self.total)
        #expect(try postgres.psql("SELECT count(*) FROM tokens") == String(Self.total))
        let published = try await first.client.post(
            "/v1/channels/match/updates", json: updateBody(timestamp: unixNow, home: 1))
        #expect(published.status == 202, "\(published)")
        let wave = try #require(published.json?["wave_id"] as? Int)
        let client = first.client
        let complete = await eventually(timeout: .seconds(180)) {
            try await client.get("/v1/waves/\(wave)").json?["state"] as? String == "complete"
        }
        #expect(complete, "\(first.errors.suffix(2000))")
        let report = try await first.client.get("/v1/waves/\(wave)")
        #expect(report.json?["delivered"] as? Int == Self.total, "\(report)\n\(first.errors.suffix(6000))")
        // The report is in PostgreSQL once complete (the engine writes it on completion).
        #expect(
            await eventually {
                try postgres.psql("SELECT delivered FROM waves WHERE id = \(wave)") == String(Self.total)
            })
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0, "\(first.errors.suffix(2000))")

        // Started again on the same database: the tokens load from it, the wave's report comes from it.
        let second = try await serve("serve-2")
        #expect(try await second.client.get("/readyz").json?["tokens"] as? Int == Self.total)
        let stored = try await second.client.get("/v1/waves/\(wave)")
        #expect(stored.status == 200 && stored.json?["state"] as? String == "complete", "\(stored)")
        #expect(
            stored.json?["delivered"] as? Int == Self.total && stored.json?["targeted"] as? Int == Self.total,
            "\(stored)")
        let listed = try await second.client.get("/v1/waves")
        #expect((listed.json?["waves"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } == [wave], "\(listed)")
        // A second wave gets a new id after the first.
        let next = try await second.client.post(
            "/v1/channels/match/updates", json: updateBody(timestamp: unixNow + 1, home: 2))
        #expect((next.json?["wave_id"] as? Int ?? 0) > wave, "\(next)")
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0, "\(second.errors.suffix(2000))")
        await simulator.stop()

        let log = try AcceptedLog(path: logPath)
        #expect(log.unparsable == 0)
        #expect(log.idsByToken.count == Self.total, "\(log.idsByToken.count) distinct tokens in the log")
    }

    /// Issue 24: during a PostgreSQL restart the API answered 500 "cannot connect to PostgreSQL". A database out
    /// of reach is a state to wait out: 503 `database_unavailable` with `Retry-After`, nothing changed; once it
    /// is back, the same calls work, with no restart of the service.
    @Test("PostgreSQL stopped: reads and writes answer 503 database_unavailable with Retry-After, then work again")
    func theDatabaseOutOfReachIsA503UntilItIsBack() async throws {
        let postgres = try await Self.onOwnThread { try PostgresServer() }
        defer { postgres.stop() }
        let directory = NSTemporaryDirectory() + "fanfare-pg-away-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let simulator = try await SimulateProcess([], directory: directory)
        let serve = try await ServeProcess(
            simulator.serveArguments + ["--listen", "127.0.0.1:0", "--database", postgres.url, "--log-format", "json"],
            directory: directory, name: "serve-away")
        let client = serve.client
        #expect(
            await eventually(timeout: .seconds(120)) { try await client.get("/readyz").status == 200 },
            "\(serve.errors.suffix(2000))")
        let registered = try await client.post("/v1/tokens", json: registrationBody(0..<10, channel: "match"))
        #expect(registered.status == 200, "\(registered)")
        // A refusal of the shared store's publish is the refusal, not "shutting down" (as it was before).
        let now = unixNow
        let published = try await client.post("/v1/channels/match/updates", json: updateBody(timestamp: now, home: 1))
        #expect(published.status == 202, "\(published)")
        let older = try await client.post("/v1/channels/match/updates", json: updateBody(timestamp: now - 1, home: 0))
        #expect(older.status == 409 && older.json?["code"] as? String == "older_than_current", "\(older)")

        try await Self.onOwnThread { try postgres.stopKeepingData() }
        // A wave the service never saw must be looked up in the database; a registration must be written there.
        let read = try await client.get("/v1/waves/999999")
        let write = try await client.post("/v1/tokens", json: registrationBody(10..<20, channel: "match"))
        let ready = try await client.get("/readyz")
        for (what, response) in [("read", read), ("write", write), ("readyz", ready)] {
            #expect(response.status == 503, "\(what): \(response)")
            #expect(response.json?["code"] as? String == "database_unavailable", "\(what): \(response)")
            #expect(response.header("retry-after") == "5", "\(what): \(response)")
            // The database's own words (its address, the connection's error) are in the log line the answer's
            // request_id names, not in the answer.
            #expect(!response.text.contains("127.0.0.1") && !response.text.contains("\(postgres.port)"), "\(response)")
            let id = try #require(response.json?["request_id"] as? String, "\(what): \(response)")
            let logged = serve.errors.split(separator: "\n").filter { $0.contains(id) }
            #expect(logged.count == 1 && logged[0].contains("\"error\""), "\(what): \(serve.errors.suffix(3000))")
        }

        try await Self.onOwnThread { try postgres.start() }
        #expect(
            await eventually(timeout: .seconds(60)) { try await client.get("/v1/waves/999999").status == 404 },
            "reads work again once PostgreSQL is back")
        let again = try await client.post("/v1/tokens", json: registrationBody(10..<20, channel: "match"))
        #expect(again.status == 200 && again.json?["registered"] as? Int == 10, "\(again)")
        #expect(try postgres.psql("SELECT count(*) FROM tokens") == "20")
        serve.signal(SIGTERM)
        #expect(await serve.waitForExit() == 0, "\(serve.errors.suffix(2000))")
        await simulator.stop()
    }

    @Test("a 500 says what failed in general words and a request_id; the database's message is in that log line")
    func failuresDoNotEchoTheDatabase() async throws {
        let postgres = try await Self.onOwnThread { try PostgresServer() }
        defer { postgres.stop() }
        let directory = NSTemporaryDirectory() + "fanfare-pg-500-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let serve = try await ServeProcess(
            ["--simulator", "--listen", "127.0.0.1:0", "--database", postgres.url, "--log-format", "json"],
            directory: directory, name: "serve-500")
        let client = serve.client
        #expect(try await client.post("/v1/tokens", json: registrationBody(0..<10, channel: "m")).status == 200)
        // The table moves away under the service: the next registration fails inside PostgreSQL.
        _ = try postgres.psql("ALTER TABLE tokens RENAME TO tokens_moved_away")
        let failed = try await client.post("/v1/tokens", json: registrationBody(10..<20, channel: "m"))
        let document = problem(failed, status: 500, code: "internal")
        for inside in ["relation", "does not exist", "PostgreSQL", "PSQLError", "SELECT", "INSERT", "tokens_"] {
            #expect(!failed.text.contains(inside), "\(inside): \(failed)")
        }
        let id = try #require(document["request_id"] as? String, "\(failed)")
        let logged = serve.errors.split(separator: "\n").filter { $0.contains(id) }
        #expect(logged.count == 1 && logged[0].contains("does not exist"), "\(serve.errors.suffix(3000))")
        _ = try postgres.psql("ALTER TABLE tokens_moved_away RENAME TO tokens")
        #expect(try await client.post("/v1/tokens", json: registrationBody(10..<20, channel: "m")).status == 200)
        serve.signal(SIGTERM)
        #expect(await serve.waitForExit() == 0, "\(serve.errors.suffix(2000))")
    }

    @Test("a bad postgres:// URL or an unreachable server: exit non-zero, one line saying what to fix, no password")
    func badURLsAndUnreachableServersAreRefusedAtStart() async throws {
        let directory = NSTemporaryDirectory() + "fanfare-pg-refuse-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let secret = "s3cret-word"
        let noHost = try await ServeProcess.run(
            ["--simulator", "--listen", "127.0.0.1:0", "--database", "postgres://fanfare:\(secret)@/fanfare"],
            directory: directory)
        #expect(noHost.status == 64, "\(noHost)")
        #expect(noHost.errors.contains("--database: 'postgres://fanfare:***@/fanfare' names no host"), "\(noHost)")
        let otherScheme = try await ServeProcess.run(
            ["--simulator", "--listen", "127.0.0.1:0", "--database", "mysql://fanfare:\(secret)@db/fanfare"],
            directory: directory)
        #expect(otherScheme.status == 64 && otherScheme.errors.contains("only postgres://"), "\(otherScheme)")
        // A password a URL parser reads as a port and a path ("123/..."): redacted all the same.
        let portLike = try await ServeProcess.run(
            ["--simulator", "--listen", "127.0.0.1:0", "--database", "postgres://fanfare:123/\(secret)@db/fanfare"],
            directory: directory)
        #expect(portLike.status == 64 && portLike.errors.contains("postgres://fanfare:***@db/fanfare"), "\(portLike)")

        // A port nothing listens on (taken from the kernel, then released).
        let port = try PostgresServer.freePort()
        let unreachable = try await ServeProcess.run(
            [
                "--simulator", "--listen", "127.0.0.1:0", "--database",
                "postgres://fanfare:\(secret)@127.0.0.1:\(port)/fanfare",
            ],
            directory: directory)
        #expect(unreachable.status == 1, "\(unreachable)")
        let lines = unreachable.errors.split(separator: "\n").filter { $0.contains("cannot start") }
        #expect(
            lines.count == 1
                && lines[0].contains("cannot connect to PostgreSQL at postgres://fanfare:***@127.0.0.1:\(port)/fanfare"),
            "\(unreachable)")
        for result in [noHost, otherScheme, portLike, unreachable] {
            #expect(!result.errors.contains(secret) && !result.output.contains(secret), "\(result)")
        }
        // A password in the flag works, with a warning that says where else it can come from.
        #expect(unreachable.errors.contains("carries a password") && unreachable.errors.contains("FANFARE_DATABASE"))
    }
}

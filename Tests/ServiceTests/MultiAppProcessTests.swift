// Issue 25's whole estate with real processes: a `fanfare simulate --apps` process standing in for APNs in both
// environments (its accepted log names the environment, app, key and team of every push) and `fanfare serve
// --apps` sending for three apps: one with a production-only and a sandbox-only team key, one with a
// topic-specific key of another team (its PEM in an environment variable), one whose key is rotated while it runs
// (the apps file rewritten, then SIGHUP). Tokens come through the API and through `fanfare import --apps --app`.
import FanfareTLS
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite(.ownThread) struct MultiAppProcessTests {
    static let keyIDs = ["PROD000001", "SANDBOX001", "TOPIC00001", "ROTATEA001", "ROTATEB001"]

    /// The estate's apps file: `companionKey` signs for companion; `endpoints` (production, sandbox) and the CA
    /// for `fanfare serve`, none for the simulator (it listens where its flags say).
    static func appsFile(
        keys: String, companionKeys: [String], endpoints: (Int, Int)?, caFile: String?, leagueKeyInEnvironment: Bool
    ) -> String {
        let leagueKey =
            leagueKeyInEnvironment ? #""env": "LEAGUE_KEY_PEM""# : #""file": "\#(keys)/AuthKey_TOPIC00001.p8""#
        let route =
            endpoints.map {
                #", "endpoints": {"production": "https://127.0.0.1:\#($0.0)", "sandbox": "https://127.0.0.1:\#($0.1)"}"#
                    + (caFile.map { #", "ca_file": "\#($0)""# } ?? "")
            } ?? ""
        let companion = companionKeys.map {
            #"{"key_id": "\#($0)", "file": "\#(keys)/AuthKey_\#($0).p8", "environments": ["production", "sandbox"]}"#
        }
        return """
            {"apps": [
              {"id": "scores", "bundle_id": "com.example.scores", "team_id": "TEAM123456", "default": true, "keys": [
                {"key_id": "PROD000001", "file": "\(keys)/AuthKey_PROD000001.p8", "environments": ["production"]},
                {"key_id": "SANDBOX001", "file": "\(keys)/AuthKey_SANDBOX001.p8", "environments": ["sandbox"]}]\(route)},
              {"id": "league", "bundle_id": "com.example.league", "team_id": "TEAM999999", "keys": [
                {"key_id": "TOPIC00001", \(leagueKey), "environments": ["production"],
                 "topics": ["com.example.league"]}]\(route)},
              {"id": "companion", "bundle_id": "com.example.companion", "team_id": "TEAM123456",
               "keys": [\(companion.joined(separator: ", "))]\(route)}
            ]}
            """
    }

    /// `count` update tokens of app number `app` (sandbox ones start with 5a, the simulator's sandbox prefix).
    static func tokens(_ app: Int, _ range: Range<Int>, sandbox: Bool = false) -> [String] {
        range.map { (sandbox ? "5a" : "0a") + String(format: "%02x%06x", app, $0) + String(repeating: "cd", count: 59) }
    }

    static func batch(_ tokens: [String], sandbox: Bool = false) -> String {
        let items = tokens.map { token in
            #"{"token":"\#(token)","kind":"update","activity_id":"a-\#(token.prefix(14))","channels":["final"]"#
                + (sandbox ? #","environment":"sandbox"}"# : "}")
        }
        return #"{"tokens":[\#(items.joined(separator: ","))]}"#
    }

    /// The simulator's log: per token, each push's (environment, bundle id, key id, team id).
    static func accepted(_ path: String) throws -> [String: [[String]]] {
        var byToken: [String: [[String]]] = [:]
        for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let token = object["token"] as? String
            else { continue }
            byToken[token, default: []].append(
                ["environment", "bundle-id", "key-id", "team-id"].map { object[$0] as? String ?? "-" })
        }
        return byToken
    }

    static func completed(_ client: HTTPTestClient, _ path: String) async throws -> [String: Any] {
        var report: [String: Any] = [:]
        let done = await eventually(timeout: .seconds(120)) {
            report = try await client.get(path).json ?? [:]
            return report["state"] as? String == "complete"
        }
        #expect(done, "\(path): \(report)")
        return report
    }

    @Test func threeAppsBothEnvironmentsImportAndAKeyRotatedWhileRunning() async throws {
        let directory = NSTemporaryDirectory() + "fanfare-estate-" + UUID().uuidString
        let keys = directory + "/keys"
        try FileManager.default.createDirectory(atPath: keys, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for id in Self.keyIDs {
            try ProviderKeyGenerator.generate(
                privateKeyFile: "\(keys)/AuthKey_\(id).p8", publicKeyFile: "\(keys)/\(id).pub")
        }
        let leaguePEM = try String(contentsOfFile: "\(keys)/AuthKey_TOPIC00001.p8", encoding: .utf8)
        // The simulator knows both of companion's keys (APNs knows every key of the team).
        let simulatorFile = directory + "/simulator-apps.json"
        try Self.appsFile(
            keys: keys, companionKeys: ["ROTATEA001", "ROTATEB001"], endpoints: nil, caFile: nil,
            leagueKeyInEnvironment: false
        )
        .write(toFile: simulatorFile, atomically: true, encoding: .utf8)
        let simulator = try await SimulateProcess(
            [
                "--apps", simulatorFile, "--sandbox-listen", "127.0.0.1:0", "--sandbox-token-prefix", "5a", "--log",
                directory + "/accepted.jsonl",
            ], directory: directory)
        let output = try String(contentsOfFile: simulator.outputPath, encoding: .utf8)
        let sandboxLine = try #require(output.split(separator: "\n").first { $0.contains("sandbox on https://") })
        let sandboxPort = try #require(Int(sandboxLine.split(separator: ":").last ?? ""))
        let serveFile = directory + "/apps.json"
        func writeServeFile(companionKey: String) throws {
            try Self.appsFile(
                keys: keys, companionKeys: [companionKey], endpoints: (simulator.port, sandboxPort),
                caFile: simulator.stateDirectory + "/ca.pem", leagueKeyInEnvironment: true
            ).write(toFile: serveFile, atomically: true, encoding: .utf8)
        }
        try writeServeFile(companionKey: "ROTATEA001")
        let environment = ["LEAGUE_KEY_PEM": leaguePEM]

        // Before the service starts: league's production tokens and scores' sandbox tokens from files.
        let imported = [
            (Self.tokens(2, 100..<110), "league", false), (Self.tokens(1, 100..<105, sandbox: true), "scores", true),
        ]
        for (index, (tokens, app, sandbox)) in imported.enumerated() {
            let file = directory + "/import-\(index).json"
            try Self.batch(tokens, sandbox: sandbox).write(toFile: file, atomically: true, encoding: .utf8)
            let run = try await ServeProcess.run(
                ["--database", directory + "/fanfare.db", "--apps", serveFile, "--app", app, "--quiet", file],
                directory: directory, environment: environment, command: "import")
            #expect(run.status == 0, "import \(app): \(run.errors)")
        }
        let serve = try await ServeProcess(
            ["--apps", serveFile, "--database", directory + "/fanfare.db", "--listen", "127.0.0.1:0"],
            directory: directory, environment: environment)
        let client = serve.client
        #expect(
            await eventually(timeout: .seconds(60)) { try await client.get("/readyz").status == 200 }, "\(serve.errors)"
        )

        let registered: [(String, [String], Bool)] = [
            ("scores", Self.tokens(1, 0..<20), false), ("scores", Self.tokens(1, 20..<30, sandbox: true), true),
            ("league", Self.tokens(2, 0..<20), false), ("companion", Self.tokens(3, 0..<10), false),
            ("companion", Self.tokens(3, 10..<15, sandbox: true), true),
        ]
        for (app, tokens, sandbox) in registered {
            let answer = try await client.post("/v1/apps/\(app)/tokens", json: Self.batch(tokens, sandbox: sandbox))
            #expect(answer.status == 200, "\(app): \(answer)")
        }
        let update = #"{"event":"update","timestamp":1800000001,"content_state":{"home":1,"away":0}}"#
        var expected: [String: Int] = ["scores": 35, "league": 30, "companion": 15]
        for app in ["scores", "league", "companion"] {
            let published = try await client.post("/v1/apps/\(app)/channels/final/updates", json: update)
            let wave = try #require(published.json?["wave_id"] as? Int, "\(published)")
            let report = try await Self.completed(client, "/v1/apps/\(app)/waves/\(wave)")
            #expect(report["delivered"] as? Int == expected[app], "\(app): \(report)")
        }

        // companion's key rotated: the file names ROTATEB001 now, and SIGHUP reads it again.
        try writeServeFile(companionKey: "ROTATEB001")
        serve.signal(SIGHUP)
        let rotated = await eventually(timeout: .seconds(60)) {
            let apps = try await client.get("/v1/apps").json?["apps"] as? [[String: Any]] ?? []
            let companion = apps.first { $0["id"] as? String == "companion" }
            let keys = (companion?["environments"] as? [[String: Any]])?.compactMap { $0["key_id"] as? String }
            return keys == ["ROTATEB001", "ROTATEB001"]
        }
        #expect(rotated, "\(serve.errors.suffix(2000))")
        let second = try await client.post(
            "/v1/apps/companion/channels/final/updates", json: update.replacingOccurrences(of: "01,", with: "02,"))
        let secondWave = try #require(second.json?["wave_id"] as? Int, "\(second)")
        let secondReport = try await Self.completed(client, "/v1/apps/companion/waves/\(secondWave)")
        #expect(secondReport["delivered"] as? Int == 15 && secondReport["failed"] as? Int == 0, "\(secondReport)")
        expected["companion"] = 30

        serve.signal(SIGTERM)
        #expect(await serve.waitForExit() == 0)
        await simulator.stop()
        let log = try Self.accepted(directory + "/accepted.jsonl")
        let scoresProduction = ["production", "com.example.scores", "PROD000001", "TEAM123456"]
        let scoresSandbox = ["sandbox", "com.example.scores", "SANDBOX001", "TEAM123456"]
        let league = ["production", "com.example.league", "TOPIC00001", "TEAM999999"]
        for token in Self.tokens(1, 0..<20) {
            #expect(log[token] == [scoresProduction], "\(token): \(log[token] ?? [])")
        }
        for token in Self.tokens(1, 20..<30, sandbox: true) + Self.tokens(1, 100..<105, sandbox: true) {
            #expect(log[token] == [scoresSandbox], "\(token): \(log[token] ?? [])")
        }
        for token in Self.tokens(2, 0..<20) + Self.tokens(2, 100..<110) {
            #expect(log[token] == [league], "\(token): \(log[token] ?? [])")
        }
        for (token, sandbox) in Self.tokens(3, 0..<10).map({ ($0, false) })
            + Self.tokens(3, 10..<15, sandbox: true).map({ ($0, true) })
        {
            let environment = sandbox ? "sandbox" : "production"
            #expect(
                log[token] == [
                    [environment, "com.example.companion", "ROTATEA001", "TEAM123456"],
                    [environment, "com.example.companion", "ROTATEB001", "TEAM123456"],
                ], "before and after the rotation: \(log[token] ?? [])")
        }
        #expect(log.values.reduce(0) { $0 + $1.count } == expected.values.reduce(0, +), "nothing else, nothing twice")
    }
}

import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareIO
import FanfareService
import FanfareSimulator
import FanfareStorage
import FanfareTLS
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

/// One service, several apps and both environments (issue 25), in process: each (app, environment) sends to a
/// simulator of its own, so each simulator's log shows exactly what went to that app's host in that environment.
@Suite(.ownThread) struct MultiAppTests {
    static let scores = "com.example.scores"
    static let league = "com.example.league"

    /// A simulator for one bundle id, with the fixture keys, logging what it accepts.
    static func simulator(bundleID: String, directory: String, name: String) throws -> APNsSimulator {
        var configuration = ServiceFixture.simulatorConfiguration()
        configuration.bundleID = bundleID
        configuration.providerKeys = [rotatedKeyID: ProviderKeyScope()]
        let keys = ServiceKeys.shared
        var options = APNsSimulator.Options(
            listen: try SocketAddress(ip: "127.0.0.1", port: 0), tls: keys.serverTLS, verifier: keys.verifier)
        options.acceptedLogPath = "\(directory)/\(name).jsonl"
        return try APNsSimulator(configuration: configuration, options: options)
    }

    /// The fixture key under another id: the simulators know both (the same key material).
    static let rotatedKeyID = "ROTATED001"

    static func environment(
        _ environment: APNsEnvironment, bundleID: String, port: UInt16, keyID: String = ServiceKeys.keyID
    ) -> ServiceApp.Environment {
        let signer =
            keyID == ServiceKeys.keyID
            ? ServiceKeys.shared.signer
            : try! ProviderTokenSigner(
                privateKeyPEMFile: ServiceKeys.shared.privateKeyFile, keyID: keyID, teamID: ServiceKeys.teamID)
        var client = ClientConfiguration(
            host: "127.0.0.1", port: port, tls: ServiceKeys.shared.clientTLS,
            providerTokens: ProviderTokenSource(signer: signer), topic: Topic.liveActivity(bundleID: bundleID))
        client.connectionsPerWorker = 1
        client.requestTimeout = TestTime.scaled(Liveness.condition)
        client.buffers = .small
        return ServiceApp.Environment(
            environment: environment, client: client, keyID: keyID, keyFingerprint: keyID, route: "127.0.0.1:\(port)")
    }

    /// Scores in both environments (the default), league in production, at the estate's simulators.
    static func apps(
        production: UInt16, sandbox: UInt16, league: UInt16, scoresKey: String = ServiceKeys.keyID
    )
        -> [ServiceApp]
    {
        [
            ServiceApp(
                id: "scores", bundleID: scores, isDefault: true,
                environments: [
                    environment(.production, bundleID: scores, port: production, keyID: scoresKey),
                    environment(.sandbox, bundleID: scores, port: sandbox, keyID: scoresKey),
                ]),
            ServiceApp(
                id: "league", bundleID: MultiAppTests.league, isDefault: false,
                environments: [environment(.production, bundleID: MultiAppTests.league, port: league)]),
        ]
    }

    /// Scores (the default) in production (the fixture's simulator) and sandbox; league in production only.
    final class Estate: @unchecked Sendable {
        let fixture: ServiceFixture
        let sandbox: APNsSimulator
        let league: APNsSimulator

        init(
            apiKeys: APIKeyring? = nil,
            reload: (@Sendable (_ production: UInt16, _ sandbox: UInt16, _ league: UInt16) -> [ServiceApp])? = nil
        ) async throws {
            let directory = NSTemporaryDirectory() + "fanfare-apps-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let sandbox = try MultiAppTests.simulator(bundleID: scores, directory: directory, name: "scores-sandbox")
            let league = try MultiAppTests.simulator(
                bundleID: MultiAppTests.league, directory: directory, name: "league")
            self.sandbox = sandbox
            self.league = league
            var production = ServiceFixture.simulatorConfiguration()
            production.bundleID = scores
            production.providerKeys = [rotatedKeyID: ProviderKeyScope()]
            fixture = try await ServiceFixture(simulator: production, directory: directory) { configuration in
                let ports = (configuration.fanout.client.port, sandbox.boundAddress.port, league.boundAddress.port)
                configuration.apps = MultiAppTests.apps(production: ports.0, sandbox: ports.1, league: ports.2)
                configuration.apiKeys = apiKeys
                if let reload { configuration.reloadApps = { reload(ports.0, ports.1, ports.2) } }
            }
        }

        func stop() async throws {
            try await fixture.stop()
            await sandbox.shutdown()
            await league.shutdown()
        }

        /// What one simulator accepted (nil: the production simulator of scores): token → topics.
        func accepted(_ name: String?) throws -> [String: [String]] {
            let path = name.map { "\(fixture.directory)/\($0).jsonl" } ?? fixture.acceptedLogPath
            let text = try String(contentsOfFile: path, encoding: .utf8)
            var byToken: [String: [String]] = [:]
            for line in text.split(separator: "\n") {
                guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    let token = object["token"] as? String
                else { continue }
                byToken[token, default: []].append(object["topic"] as? String ?? "")
            }
            return byToken
        }
    }

    static func token(_ app: Int, _ index: Int) -> String {
        String(format: "%02x%06x", app, index) + String(repeating: "ab", count: 60)
    }

    static func batch(_ tokens: [String], environment: String? = nil) -> String {
        let items = tokens.enumerated().map { index, token in
            let environmentField = environment.map { #","environment":"\#($0)""# } ?? ""
            return
                #"{"token":"\#(token)","kind":"update","activity_id":"a-\#(token.prefix(12))","channels":["final"]\#(environmentField)}"#
        }
        return #"{"tokens":[\#(items.joined(separator: ","))]}"#
    }

    static func completed(_ client: HTTPTestClient, _ path: String) async throws -> [String: Any] {
        var report: [String: Any] = [:]
        let done = await eventually {
            report = try await client.get(path).json ?? [:]
            return report["state"] as? String == "complete"
        }
        #expect(done, "\(path): \(report)")
        return report
    }

    @Test func eachAppsPublishReachesExactlyItsTokensAtEachEnvironmentsHost() async throws {
        let estate = try await Estate()
        defer { estate.fixture.removeDirectory() }
        let client = estate.fixture.client
        #expect(await eventually { try await client.get("/readyz").status == 200 })
        let scoresProduction = (0..<30).map { Self.token(1, $0) }
        let scoresSandbox = (30..<40).map { Self.token(1, $0) }
        let defaultRoute = (40..<45).map { Self.token(1, $0) }
        let league = (0..<20).map { Self.token(2, $0) }
        let mixed =
            Self.batch(scoresProduction).dropLast(2) + ","
            + Self.batch(scoresSandbox, environment: "sandbox")
            .dropFirst(#"{"tokens":["#.count)
        var answer = try await client.post("/v1/apps/scores/tokens", json: String(mixed))
        #expect(answer.status == 200, "\(answer)")
        answer = try await client.post("/v1/tokens", json: Self.batch(defaultRoute))
        #expect(answer.status == 200, "today's route registers for the default app: \(answer)")
        answer = try await client.post("/v1/apps/league/tokens", json: Self.batch(league))
        #expect(answer.status == 200, "\(answer)")
        answer = try await client.post(
            "/v1/apps/league/tokens", json: Self.batch([Self.token(2, 99)], environment: "sandbox"))
        #expect(answer.status == 422 && answer.json?["code"] as? String == "environment_not_served", "\(answer)")
        answer = try await client.post("/v1/apps/nosuch/tokens", json: Self.batch([Self.token(3, 0)]))
        #expect(answer.status == 404, "\(answer)")

        let update = #"{"event":"update","timestamp":1800000001,"content_state":{"home":1,"away":0}}"#
        let published = try await client.post("/v1/apps/scores/channels/final/updates", json: update)
        #expect(published.status == 202, "\(published)")
        let wave = try #require(published.json?["wave_id"] as? Int)
        #expect(published.header("location") == "/v1/apps/scores/waves/\(wave)")
        let report = try await Self.completed(client, "/v1/apps/scores/waves/\(wave)")
        #expect(report["targeted"] as? Int == 45 && report["delivered"] as? Int == 45, "one report for both: \(report)")
        #expect(
            try await client.get("/v1/waves/\(wave)").json?["delivered"] as? Int == 45, "today's route, default app")
        #expect(try await client.get("/v1/apps/league/waves/\(wave)").status == 404, "another app's wave")
        let listed = try await client.get("/v1/apps/scores/waves").json?["waves"] as? [[String: Any]]
        #expect(listed?.count == 1, "a publication is listed once: \(listed ?? [])")

        let leagueWave = try #require(
            try await client.post("/v1/apps/league/channels/final/updates", json: update).json?["wave_id"] as? Int)
        let leagueReport = try await Self.completed(client, "/v1/apps/league/waves/\(leagueWave)")
        #expect(leagueReport["targeted"] as? Int == 20)

        let removed = try await client.post(
            "/v1/apps/league/tokens/delete", json: #"{"tokens":["\#(scoresProduction[0])"]}"#)
        #expect(removed.json?["removed"] as? Int == 0, "league's route cannot remove a scores token: \(removed)")
        let apps = try await client.get("/v1/apps").json?["apps"] as? [[String: Any]]
        #expect(apps?.map { $0["id"] as? String } == ["scores", "league"])
        try await estate.stop()

        // Each simulator stands for one app's host in one environment: each got exactly its tokens, once, with
        // its app's topic.
        let expected: [(String?, [String], String)] = [
            (nil, scoresProduction + defaultRoute, Self.scores), ("scores-sandbox", scoresSandbox, Self.scores),
            ("league", league, Self.league),
        ]
        for (name, tokens, bundleID) in expected {
            let accepted = try estate.accepted(name)
            #expect(Set(accepted.keys) == Set(tokens), "\(name ?? "scores-production") got other tokens")
            #expect(accepted.values.allSatisfy { $0 == [Topic.liveActivity(bundleID: bundleID)] }, "\(accepted)")
        }
    }

    @Test func aKeyScopedToAnAppSeesOnlyThatApp() async throws {
        let keys = try APIKeyring(
            parsing: "league-only-key-0123456789 register,publish,read apps=league\nadmin-key-0123456789abcd admin\n",
            path: "keys")
        let estate = try await Estate(apiKeys: keys)
        defer { estate.fixture.removeDirectory() }
        var leagueClient = estate.fixture.client
        leagueClient.apiKey = "league-only-key-0123456789"
        var admin = estate.fixture.client
        admin.apiKey = "admin-key-0123456789abcd"
        #expect(await eventually { try await admin.get("/readyz").status == 200 })
        let visible = try await leagueClient.get("/v1/apps").json?["apps"] as? [[String: Any]]
        #expect(visible?.map { $0["id"] as? String } == ["league"], "\(visible ?? [])")
        #expect(try await admin.get("/v1/apps").json?["apps"] as? [[String: Any]] != nil)
        #expect(
            try await leagueClient.post("/v1/apps/league/tokens", json: Self.batch([Self.token(2, 1)])).status == 200)
        for path in ["/v1/apps/scores/tokens", "/v1/tokens"] {
            let refused = try await leagueClient.post(path, json: Self.batch([Self.token(1, 1)]))
            #expect(refused.status == 404, "\(path): another app's route is not found for this key: \(refused)")
        }
        #expect(try await leagueClient.get("/v1/apps/scores/waves").status == 404)
        #expect(try await leagueClient.get("/v1/channels").status == 404, "today's routes are the default app's")
        #expect(try await admin.post("/v1/tokens", json: Self.batch([Self.token(1, 2)])).status == 200)
        try await estate.stop()
    }

    @Test func aReloadRotatesAKeyAddsAndRemovesAppsAndAFileThatCannotWorkChangesNothing() async throws {
        let attempt = Atomic<Int>(0)
        let estate = try await Estate { production, sandbox, league in
            switch attempt.add(1, ordering: .relaxed).newValue {
            case 1:
                // Scores' key rotated; league gone; "cup" added on league's host.
                var apps = MultiAppTests.apps(
                    production: production, sandbox: sandbox, league: league, scoresKey: MultiAppTests.rotatedKeyID)
                apps[1] = ServiceApp(
                    id: "cup", bundleID: MultiAppTests.league, isDefault: false,
                    environments: [MultiAppTests.environment(.production, bundleID: MultiAppTests.league, port: league)]
                )
                return apps
            case 2:
                return []  // no app: refused
            default:
                // Two apps and neither is the default: refused.
                return MultiAppTests.apps(production: production, sandbox: sandbox, league: league).map { app in
                    var app = app
                    app.isDefault = false
                    return app
                }
            }
        }
        defer { estate.fixture.removeDirectory() }
        let client = estate.fixture.client
        #expect(await eventually { try await client.get("/readyz").status == 200 })
        let registered = try await client.post("/v1/tokens", json: Self.batch((0..<50).map { Self.token(1, $0) }))
        #expect(registered.status == 200, "\(registered)")
        let update = #"{"event":"update","timestamp":1800000001,"content_state":{"home":1,"away":0}}"#
        let first = try #require(
            try await client.post("/v1/channels/final/updates", json: update).json?["wave_id"] as? Int)

        let reloaded = try await client.post("/v1/apps/reload", json: "{}")
        #expect(reloaded.status == 200, "\(reloaded)")
        let changes = reloaded.json?["changes"] as? [String] ?? []
        #expect(changes.contains { $0.contains("scores") && $0.contains(Self.rotatedKeyID) }, "\(changes)")
        #expect(changes.contains("app league removed") && changes.contains("app cup added"), "\(changes)")
        #expect(try await Self.completed(client, "/v1/waves/\(first)")["delivered"] as? Int == 50, "nothing failed")
        let next = try #require(
            try await client.post(
                "/v1/channels/final/updates", json: update.replacingOccurrences(of: "1800000001", with: "1800000002")
            ).json?["wave_id"] as? Int)
        let report = try await Self.completed(client, "/v1/waves/\(next)")
        #expect(report["delivered"] as? Int == 50 && report["failed"] as? Int == 0, "\(report)")
        let apps = try await client.get("/v1/apps").json?["apps"] as? [[String: Any]] ?? []
        #expect(apps.map { $0["id"] as? String } == ["scores", "cup"])
        let scoresKeys = (apps.first?["environments"] as? [[String: Any]])?.map { $0["key_id"] as? String }
        #expect(scoresKeys == [Self.rotatedKeyID, Self.rotatedKeyID], "new connections sign with the new key")
        #expect(try await client.get("/v1/apps/league/waves").status == 404)

        for _ in 0..<2 {
            let refused = try await client.post("/v1/apps/reload", json: "{}")
            #expect(refused.status == 422 && refused.json?["code"] as? String == "apps_file_invalid", "\(refused)")
        }
        #expect((try await client.get("/v1/apps").json?["apps"] as? [[String: Any]])?.count == 2, "nothing changed")
        try await estate.stop()
        let unrelated = estate.fixture.simulator.statistics().count(of: .unrelatedKeyIdInToken)
        #expect(unrelated == 0, "no connection changed its key")
    }

    @Test func aServiceWithoutAnAppsFileHasNothingToReload() async throws {
        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let answer = try await fixture.client.post("/v1/apps/reload", json: "{}")
        #expect(answer.status == 409 && answer.json?["code"] as? String == "no_apps_file", "\(answer)")
        let apps = try await fixture.client.get("/v1/apps").json?["apps"] as? [[String: Any]]
        #expect(apps?.map { $0["id"] as? String } == ["default"])
        try await fixture.stop()
    }
}

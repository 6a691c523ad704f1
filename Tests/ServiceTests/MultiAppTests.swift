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
        let keys = ServiceKeys.shared
        var options = APNsSimulator.Options(
            listen: try SocketAddress(ip: "127.0.0.1", port: 0), tls: keys.serverTLS, verifier: keys.verifier)
        options.acceptedLogPath = "\(directory)/\(name).jsonl"
        return try APNsSimulator(configuration: configuration, options: options)
    }

    static func environment(_ environment: APNsEnvironment, bundleID: String, port: UInt16) -> ServiceApp.Environment {
        var client = ClientConfiguration(
            host: "127.0.0.1", port: port, tls: ServiceKeys.shared.clientTLS,
            providerTokens: ProviderTokenSource(signer: ServiceKeys.shared.signer),
            topic: Topic.liveActivity(bundleID: bundleID))
        client.connectionsPerWorker = 1
        client.requestTimeout = TestTime.scaled(Liveness.condition)
        client.buffers = .small
        return ServiceApp.Environment(environment: environment, client: client, keyID: ServiceKeys.keyID)
    }

    /// Scores (the default) in production (the fixture's simulator) and sandbox; league in production only.
    final class Estate: @unchecked Sendable {
        let fixture: ServiceFixture
        let sandbox: APNsSimulator
        let league: APNsSimulator

        init(apiKeys: APIKeyring? = nil) async throws {
            let directory = NSTemporaryDirectory() + "fanfare-apps-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let sandbox = try MultiAppTests.simulator(bundleID: scores, directory: directory, name: "scores-sandbox")
            let league = try MultiAppTests.simulator(
                bundleID: MultiAppTests.league, directory: directory, name: "league")
            self.sandbox = sandbox
            self.league = league
            var production = ServiceFixture.simulatorConfiguration()
            production.bundleID = scores
            fixture = try await ServiceFixture(simulator: production, directory: directory) { configuration in
                let primary = configuration.fanout.client.port
                configuration.apps = [
                    ServiceApp(
                        id: "scores", bundleID: scores, isDefault: true,
                        environments: [
                            MultiAppTests.environment(.production, bundleID: scores, port: primary),
                            MultiAppTests.environment(.sandbox, bundleID: scores, port: sandbox.boundAddress.port),
                        ]),
                    ServiceApp(
                        id: "league", bundleID: MultiAppTests.league, isDefault: false,
                        environments: [
                            MultiAppTests.environment(
                                .production, bundleID: MultiAppTests.league, port: league.boundAddress.port)
                        ]),
                ]
                configuration.apiKeys = apiKeys
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
}

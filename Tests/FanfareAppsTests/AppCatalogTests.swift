import FanfareApps
import FanfareStorage
import FanfareTLS
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct AppCatalogTests {
    /// A directory with provider keys made like Apple's .p8 files, removed at the end.
    final class KeyDirectory {
        let path: String
        init() throws {
            path = NSTemporaryDirectory() + "fanfare-apps-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: path + "/keys", withIntermediateDirectories: true)
        }
        deinit { try? FileManager.default.removeItem(atPath: path) }

        /// Writes `keys/AuthKey_<id>.p8` and returns its PEM text.
        @discardableResult
        func key(_ id: String) throws -> String {
            let file = "\(path)/keys/AuthKey_\(id).p8"
            try ProviderKeyGenerator.generate(privateKeyFile: file, publicKeyFile: "\(path)/keys/\(id).pub")
            return try String(contentsOfFile: file, encoding: .utf8)
        }

        func write(_ json: String) throws -> String {
            let file = path + "/apps.json"
            try json.write(toFile: file, atomically: true, encoding: .utf8)
            return file
        }
    }

    static let issueExample = """
        {"apps": [
          {"id": "scores", "bundle_id": "com.example.scores", "team_id": "TEAM123456", "default": true,
           "keys": [{"key_id": "ABC123DEFG", "file": "keys/AuthKey_ABC123DEFG.p8", "environments": ["production", "sandbox"]}],
           "endpoints": {"production": "https://127.0.0.1:2197", "sandbox": "https://127.0.0.1:2198"},
           "ca_file": "keys/ABC123DEFG.pub", "notes": "fields beyond these are ignored"},
          {"id": "league", "bundle_id": "com.example.league", "team_id": "TEAM999999",
           "keys": [{"key_id": "TOPIC00001", "env": "LEAGUE_KEY_PEM", "environments": ["production"],
                     "topics": ["com.example.league"]}]}
        ]}
        """

    @Test func readsTheDocumentedShape() throws {
        let directory = try KeyDirectory()
        try directory.key("ABC123DEFG")
        let leaguePEM = try directory.key("TOPIC00001")
        let file = try directory.write(Self.issueExample)
        let catalog = try AppCatalog.load(path: file, environment: ["LEAGUE_KEY_PEM": leaguePEM])

        #expect(catalog.apps.map(\.id) == ["scores", "league"])
        #expect(catalog.defaultApp.id == "scores")
        let scores = try #require(catalog["scores"])
        #expect(scores.environments == [.production, .sandbox])
        #expect(scores.endpoint(for: .sandbox) == AppEndpoint(host: "127.0.0.1", port: 2198))
        #expect(scores.channelManagementEndpoint(for: .production) == nil, "a private endpoint names its own")
        #expect(scores.caFile == directory.path + "/keys/ABC123DEFG.pub", "relative to the apps file")
        #expect(scores.signingKey(for: .sandbox)?.keyID == "ABC123DEFG")
        #expect(scores.keys[0].source == .file(directory.path + "/keys/AuthKey_ABC123DEFG.p8"))

        let league = try #require(catalog["league"])
        #expect(league.environments == [.production], "its only key is production-only")
        #expect(league.signingKey(for: .sandbox) == nil)
        #expect(league.endpoint(for: .production) == AppEndpoint(host: "api.push.apple.com", port: 443))
        #expect(league.channelManagementEndpoint(for: .production)?.host == "api-manage-broadcast.push.apple.com")
        #expect(league.keys[0].source == .environment("LEAGUE_KEY_PEM"))
        #expect(league.keys[0].topics == ["com.example.league"])
        // What a catalog prints never holds key material.
        #expect(!"\(catalog) \(league.keys[0])".contains("PRIVATE KEY"))
    }

    @Test func picksTheFirstKeyAllowedInEachEnvironmentAndForTheTopic() throws {
        let directory = try KeyDirectory()
        for id in ["SANDBOX001", "PROD000001", "OTHERTOPIC"] { try directory.key(id) }
        let file = try directory.write(
            """
            {"apps": [{"id": "scores", "bundle_id": "com.example.scores", "team_id": "TEAM123456", "keys": [
              {"key_id": "OTHERTOPIC", "file": "keys/AuthKey_OTHERTOPIC.p8", "environments": ["production", "sandbox"],
               "topics": ["com.example.other"]},
              {"key_id": "SANDBOX001", "file": "keys/AuthKey_SANDBOX001.p8", "environments": ["sandbox"]},
              {"key_id": "PROD000001", "file": "keys/AuthKey_PROD000001.p8", "environments": ["production"],
               "team_id": "OTHERTEAM1"}]}]}
            """)
        let app = try #require(try AppCatalog.load(path: file, environment: [:]).apps.first)
        #expect(app.isDefault, "the only app is the default")
        #expect(app.signingKey(for: .sandbox)?.keyID == "SANDBOX001", "the topic key covers another app only")
        #expect(app.signingKey(for: .production)?.keyID == "PROD000001")
        #expect(app.signingKey(for: .production)?.teamID == "OTHERTEAM1", "a key may belong to another team")
        #expect(app.signingKey(for: .production)?.signer.teamID == "OTHERTEAM1")
    }

    @Test func aRewrittenKeyFileHasAnotherFingerprint() throws {
        let directory = try KeyDirectory()
        try directory.key("ABC123DEFG")
        let json = """
            {"apps": [{"id": "a", "bundle_id": "com.example.a", "team_id": "TEAM123456",
              "keys": [{"key_id": "ABC123DEFG", "file": "keys/AuthKey_ABC123DEFG.p8", "environments": ["production"]}]}]}
            """
        let file = try directory.write(json)
        let first = try AppCatalog.load(path: file, environment: [:]).apps[0].keys[0]
        let again = try AppCatalog.load(path: file, environment: [:]).apps[0].keys[0]
        try directory.key("ABC123DEFG")
        let rotated = try AppCatalog.load(path: file, environment: [:]).apps[0].keys[0]
        #expect(first.isSameKey(as: again))
        #expect(!first.isSameKey(as: rotated))
        #expect(first.fingerprint.count == 16)
    }

    /// Each mistake is refused with the field it is in and what to do, never with key material.
    @Test(
        arguments: [
            ("not json", nil, "is not valid JSON"),
            (#"{"apps": []}"#, "apps", "lists no app"),
            (#"{"apps": [{"id": "a", "team_id": "TEAM123456", "keys": []}]}"#, "apps[0].bundle_id", "is missing"),
            (app(id: "A B"), "apps[0].id", "must be 1-63"),
            (app(bundle: "nodots"), "apps[0].bundle_id", "is not a bundle id"),
            (app(team: "team"), "apps[0].team_id", "10 characters"),
            (app(keys: "[]"), "apps[0].keys", "lists no key"),
            (
                app(keys: key(environments: #"["prod"]"#)), "apps[0].keys[0].environments[0]",
                "is not production or sandbox"
            ),
            (app(keys: key(environments: "[]")), "apps[0].keys[0].environments", "lists none"),
            (app(keys: key(file: "keys/missing.p8")), "apps[0].keys[0].file", "cannot be read"),
            (app(keys: key(file: nil, env: "NOT_SET")), "apps[0].keys[0].env", "$NOT_SET is not set"),
            (app(keys: key(file: nil)), "apps[0].keys[0]", "needs \"file\""),
            (app(keys: key(env: "X")), "apps[0].keys[0]", "gives both"),
            (app(keys: key(file: "keys/GOODKEY001.pub")), "apps[0].keys[0]", "is a public key"),
            (app(keys: key(topics: #"["com.example.other"]"#)), "apps[0].keys", "no key may sign for com.example.a"),
            (
                app(extra: #", "endpoints": {"staging": "https://h:1"}"#), "apps[0].endpoints.staging",
                "not an environment"
            ),
            (app(extra: #", "endpoints": {"sandbox": "http://h:1"}"#), "apps[0].endpoints.sandbox", "over TLS only"),
            (app(extra: #", "endpoints": {"sandbox": "https://h:0"}"#), "apps[0].endpoints.sandbox", "1...65535"),
            (app(extra: #", "ca_file": "nothere.pem""#), "apps[0].ca_file", "no such file"),
            (
                #"{"apps": [\#(appObject(id: "a", bundle: "com.example.a")), \#(appObject(id: "a", bundle: "com.example.b"))]}"#,
                "apps[1].id", "used twice"
            ),
            (
                #"{"apps": [\#(appObject(id: "a", bundle: "com.example.a")), \#(appObject(id: "b", bundle: "com.example.a"))]}"#,
                "apps[1].bundle_id", "also app 'a'"
            ),
            (
                #"{"apps": [\#(appObject(id: "a", bundle: "com.example.a")), \#(appObject(id: "b", bundle: "com.example.b"))]}"#,
                "apps", "none is marked"
            ),
        ] as [(String, String?, String)])
    func refusesWithTheFieldAndTheFix(json: String, field: String?, problem: String) throws {
        let directory = try KeyDirectory()
        let pem = try directory.key("GOODKEY001")
        let file = try directory.write(json)
        #expect {
            try AppCatalog.load(path: file, environment: ["X": pem])
        } throws: { error in
            guard let error = error as? AppCatalogError else { return false }
            let matches = error.field == field && error.problem.contains(problem)
            if !matches { Issue.record("got \(error)") }
            return matches && error.source == file && !error.description.contains("PRIVATE KEY")
        }
    }

    @Test func aMissingFileSaysSo() {
        #expect {
            try AppCatalog.load(path: "/nonexistent/apps.json", environment: [:])
        } throws: { error in
            "\(error)".contains("/nonexistent/apps.json") && "\(error)".contains("cannot be read")
        }
    }

    // MARK: - Fixtures

    static func key(
        file: String? = "keys/AuthKey_GOODKEY001.p8", env: String? = nil, environments: String = #"["production"]"#,
        topics: String? = nil
    ) -> String {
        var fields = [#""key_id": "GOODKEY001""#, #""environments": \#(environments)"#]
        if let file { fields.append(#""file": "\#(file)""#) }
        if let env { fields.append(#""env": "\#(env)""#) }
        if let topics { fields.append(#""topics": \#(topics)"#) }
        return "[{" + fields.joined(separator: ", ") + "}]"
    }

    static func appObject(
        id: String = "a", bundle: String = "com.example.a", team: String = "TEAM123456", keys: String? = nil,
        extra: String = ""
    ) -> String {
        #"{"id": "\#(id)", "bundle_id": "\#(bundle)", "team_id": "\#(team)", "keys": \#(keys ?? key())\#(extra)}"#
    }

    static func app(
        id: String = "a", bundle: String = "com.example.a", team: String = "TEAM123456", keys: String? = nil,
        extra: String = ""
    ) -> String {
        #"{"apps": [\#(appObject(id: id, bundle: bundle, team: team, keys: keys, extra: extra))]}"#
    }
}

// Several apps and both environments (issue 25), decided without sockets: which key signs for which app where, the
// token's environment, the accepted-push log's origin fields, and the settings refused.
import FanfareCore
import FanfareTestSupport
import Foundation
import Testing
@testable import FanfareSimulator

@Suite(.ownThread) struct SimulatedAppsTests {
    static let scores = "com.example.scores"
    static let league = "com.example.league"
    static let companion = "com.example.companion"

    /// Three apps: scores with a sandbox-only and a production-only team key, league (another team) with a
    /// topic-specific key, companion (scores' team) with an ordinary key for both environments.
    static func configuration(_ environment: SimulatorConfiguration.Environment) -> SimulatorConfiguration {
        var configuration = SimulatorConfiguration()
        configuration.apps = [
            SimulatedApp(
                bundleID: scores, teamID: "TEAM123456",
                keys: [
                    SimulatedProviderKey(
                        keyID: "SANDBOX001", teamID: "TEAM123456", scope: ProviderKeyScope(environment: .sandbox),
                        publicKeyPEM: nil),
                    SimulatedProviderKey(
                        keyID: "PROD000001", teamID: "TEAM123456", scope: ProviderKeyScope(environment: .production),
                        publicKeyPEM: nil),
                ]),
            SimulatedApp(
                bundleID: league, teamID: "TEAM999999",
                keys: [
                    SimulatedProviderKey(
                        keyID: "TOPIC00001", teamID: "TEAM999999", scope: ProviderKeyScope(topics: [league]),
                        publicKeyPEM: nil)
                ]),
            SimulatedApp(
                bundleID: companion, teamID: "TEAM123456",
                keys: [SimulatedProviderKey(keyID: "ORDINARY01", teamID: "TEAM123456", publicKeyPEM: nil)]),
        ]
        configuration.environment = environment
        configuration.sandboxTokenPrefix = "5A"
        return configuration
    }

    /// A fake JWT per key (named by its kid), and one naming another team, and one of a key no app lists.
    static let verifier = FakeVerifier(
        Dictionary(
            uniqueKeysWithValues: ["SANDBOX001", "PROD000001", "TOPIC00001", "ORDINARY01"].map { keyID in
                (keyID, Fixtures.identity(keyID: keyID, teamID: keyID == "TOPIC00001" ? "TEAM999999" : "TEAM123456"))
            }
        )
        .merging([
            "WRONGTEAM": Fixtures.identity(keyID: "PROD000001", teamID: "TEAM999999"),
            "STRANGER": Fixtures.identity(keyID: "STRANGER01", teamID: "TEAM123456"),
        ]) { first, _ in first })

    static func push(
        _ jwt: String, topic: String, token: String = Fixtures.token32,
        in environment: SimulatorConfiguration.Environment
    ) -> APNsReason? {
        let configuration = configuration(environment)
        var request = TestRequest.valid(token: environment == .sandbox ? "5a" + token.dropFirst(2) : token)
        request.set("authorization", "bearer \(jwt)")
        request.set("apns-topic", topic + ".push-type.liveactivity")
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: verifier)
        return decide(request, configuration: configuration, auth: auth).reason
    }

    static let expectations: [(String, SimulatorConfiguration.Environment, [String: APNsReason?])] = [
        ("SANDBOX001", .production, [scores: .badEnvironmentKeyIdInToken, league: .badEnvironmentKeyIdInToken]),
        ("SANDBOX001", .sandbox, [scores: nil, companion: nil, league: .invalidProviderToken]),
        ("PROD000001", .production, [scores: nil, companion: nil, league: .invalidProviderToken]),
        ("PROD000001", .sandbox, [scores: .badEnvironmentKeyIdInToken, companion: .badEnvironmentKeyIdInToken]),
        ("TOPIC00001", .production, [league: nil, scores: .unrelatedKeyIdInToken, companion: .unrelatedKeyIdInToken]),
        ("TOPIC00001", .sandbox, [league: nil, scores: .unrelatedKeyIdInToken]),
        ("ORDINARY01", .production, [companion: nil, scores: nil, league: .invalidProviderToken]),
        ("ORDINARY01", .sandbox, [companion: nil, scores: nil]),
        ("WRONGTEAM", .production, [scores: .invalidProviderToken]),
        ("STRANGER", .production, [scores: .invalidProviderToken]),
    ]

    @Test(arguments: expectations)
    func eachKeySignsWhereItIsAllowedAndIsRefusedElsewhere(
        jwt: String, environment: SimulatorConfiguration.Environment, outcomes: [String: APNsReason?]
    ) {
        for (bundle, reason) in outcomes {
            #expect(Self.push(jwt, topic: bundle, in: environment) == reason, "\(jwt) for \(bundle) in \(environment)")
        }
    }

    @Test func aTopicOfNoAppIsDisallowedBeforeTheToken() {
        #expect(Self.push("STRANGER", topic: "com.example.other", in: .production) == .topicDisallowed)
        #expect(Self.push("PROD000001", topic: "com.example", in: .production) == .topicDisallowed)
    }

    /// A token that verified once stays verified on its connection; whether it may sign is asked per request.
    @Test func oneConnectionSendsForEveryAppItsKeyCovers() {
        let configuration = Self.configuration(.production)
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: Self.verifier)
        func send(_ topic: String, _ jwt: String = "PROD000001") -> APNsReason? {
            var request = TestRequest.valid()
            request.set("authorization", "bearer \(jwt)")
            request.set("apns-topic", topic + ".push-type.liveactivity")
            return decide(request, configuration: configuration, auth: auth).reason
        }
        #expect(send(Self.scores) == nil)
        #expect(send(Self.companion) == nil)
        #expect(send(Self.league) == .invalidProviderToken)
        #expect(send(Self.scores) == nil)
        #expect(send(Self.league, "TOPIC00001") == .invalidProviderToken, "the connection is bound to another team")
        #expect(auth.verificationCount == 2)
    }

    @Test func aTokenOfTheOtherEnvironmentIsABadDeviceToken() {
        var configuration = Self.configuration(.production)
        configuration.tokenPrefixReplies = [TokenPrefixReply(prefix: "0410", reason: .unregistered)!]
        func send(_ token: String, in environment: SimulatorConfiguration.Environment) -> APNsReason? {
            configuration.environment = environment
            var request = TestRequest.valid(token: token)
            request.set("authorization", "bearer ORDINARY01")
            request.set("apns-topic", Self.companion + ".push-type.liveactivity")
            let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: Self.verifier)
            return decide(request, configuration: configuration, auth: auth).reason
        }
        let production = "ab" + Fixtures.token32.dropFirst(2)
        let sandbox = "5a" + Fixtures.token32.dropFirst(2)
        #expect(send(production, in: .production) == nil)
        #expect(send(sandbox, in: .production) == .badDeviceToken)
        #expect(send(sandbox, in: .sandbox) == nil)
        #expect(send(production, in: .sandbox) == .badDeviceToken)
        #expect(send("0410" + Fixtures.token32.dropFirst(4), in: .production) == .unregistered, "--token-reply still")
        #expect(send("0410" + Fixtures.token32.dropFirst(4), in: .sandbox) == .badDeviceToken, "not a sandbox token")
    }

    @Test func broadcastsAndChannelManagementServeEveryApp() throws {
        let configuration = Self.configuration(.sandbox)
        let channels = try BroadcastChannels(environment: .sandbox, maxChannelsPerApp: 10, file: nil)
        let channel = try channels.create(bundleID: Self.league, storagePolicy: 0)
        var request = TestRequest.validBroadcast()
        request.set(":path", "/4/broadcasts/apps/\(Self.league)")
        request.set("authorization", "bearer TOPIC00001")
        request.set("apns-channel-id", channel.id.description)
        var validator = RequestValidator(configuration: configuration, channels: channels)
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: Self.verifier)
        #expect(validator.decide(request.head(), auth: auth, now: Fixtures.now) == .accept)
        #expect(validator.apps.bundleIDs[validator.lastApp] == Self.league)
        request.set(":path", "/4/broadcasts/apps/\(Self.scores)")
        #expect(validator.decide(request.head(), auth: auth, now: Fixtures.now).reason == .unrelatedKeyIdInToken)
        request.set(":path", "/4/broadcasts/apps/com.example.other")
        #expect(validator.decide(request.head(), auth: auth, now: Fixtures.now).reason == .topicMismatch)
    }

    @Test func theLongestBundleIDNamesTheTopic() {
        let apps = SimulatedAppTable(bundleIDs: ["com.example.app", "com.example.app.voip", "com.example.a"])
        func match(_ topic: String) -> (Int, TopicKind)? {
            withBytes(topic) { apps.match(topic: $0) }.map { ($0.app, $0.kind) }
        }
        #expect(match("com.example.app.voip")! == (1, .bundle))
        #expect(match("com.example.app.push-type.liveactivity")! == (0, .liveActivity))
        #expect(match("com.example.app.voip.push-type.liveactivity")! == (1, .liveActivity))
        #expect(match("com.example.a.voip")! == (2, .voip))
        #expect(match("com.example.b") == nil)
        #expect(String(decoding: apps.bundle(2), as: UTF8.self) == "com.example.a")
    }

    @Test func settingsThatCannotWorkNameTheField() {
        func problem(_ change: (inout SimulatorConfiguration) -> Void) -> String? {
            var configuration = Self.configuration(.production)
            change(&configuration)
            do {
                try configuration.validate()
                return nil
            } catch {
                return error.description
            }
        }
        #expect(problem { _ in } == nil)
        #expect(problem { $0.sandboxTokenPrefix = "5g" }?.contains("sandboxTokenPrefix") == true)
        #expect(problem { $0.apps[1].bundleID = Self.scores }?.contains("listed twice") == true)
        #expect(problem { $0.apps[2].bundleID = "com example" }?.contains("apps[2].bundleID") == true)
        #expect(problem { $0.apps[2].keys = [] }?.contains("lists no key") == true)
        #expect(
            problem {
                $0.apps[2].keys[0] = SimulatedProviderKey(keyID: "PROD000001", teamID: "TEAM999999", publicKeyPEM: nil)
            }?
            .contains("another team, scope or public key") == true)
        #expect(problem { $0.apps[1].keys[0].scope.topics = [] }?.contains("needs topics") == true)
    }

    @Test func theAcceptedLogSaysWhereAndWithWhichKey() throws {
        let path = NSTemporaryDirectory() + "fanfare-origin-\(UUID().uuidString).jsonl"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let log = try AcceptedPushLog(path: path)
        let head = TestRequest.valid().head()
        let apnsID = "123e4567-e89b-42d3-a456-426614174000"
        try withBytes(Self.league) { bundle in
            try withBytes(apnsID) { id in
                try log.append(
                    head, apnsID: id, now: Fixtures.now,
                    origin: AcceptedPushOrigin(
                        environment: .sandbox, bundleID: bundle, keyID: "TOPIC00001", teamID: "TEAM999999"))
                try log.append(head, apnsID: id, now: Fixtures.now)
            }
        }
        try log.close()
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        let records = try lines.map {
            try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
        #expect(records[0]["environment"] as? String == "sandbox")
        #expect(records[0]["bundle-id"] as? String == Self.league)
        #expect(records[0]["key-id"] as? String == "TOPIC00001")
        #expect(records[0]["team-id"] as? String == "TEAM999999")
        #expect(records[0]["topic"] as? String == Fixtures.liveActivityTopic, "the fields before stay")
        #expect(lines[0].contains(#""collapse-id":null,"environment":"sandbox","bundle-id":"com.example.league","#))
        for field in ["environment", "bundle-id", "key-id", "team-id"] {
            #expect(records[1][field] is NSNull, "\(field) without an origin")
        }
    }
}

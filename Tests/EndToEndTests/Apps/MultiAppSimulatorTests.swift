// One simulator for a whole estate (issue 25): three apps from an apps file, production and sandbox on two ports,
// real HTTP/2 requests over loopback TLS (nghttp). Each key works where it is allowed and gets its reason
// elsewhere; a token sent to the other environment is a BadDeviceToken; the accepted-push log names where each push
// arrived, for which app and with which key.
import FanfareApps
import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct MultiAppSimulatorTests {
    /// The estate's simulator on free loopback ports, both environments, with channel management for each.
    private static func start(_ estate: AppsEstate, log: String) throws -> APNsSimulator {
        var configuration = SimulatorConfiguration()
        configuration.apps = SimulatedApp.apps(of: try AppCatalog.load(path: estate.file))
        configuration.sandboxTokenPrefix = AppsEstate.sandboxPrefix
        let loopback = try SocketAddress(ip: "127.0.0.1", port: 0)
        var options = APNsSimulator.Options(listen: loopback, tls: SharedKeys.shared.serverTLS, verifier: nil)
        options.sandboxListen = loopback
        options.managementListen = loopback
        options.sandboxManagementListen = loopback
        options.acceptedLogPath = log
        return try APNsSimulator(configuration: configuration, options: options)
    }

    private static func port(
        _ simulator: APNsSimulator, _ environment: SimulatorConfiguration.Environment
    ) throws -> UInt16 {
        try #require(environment == .production ? simulator.boundAddress.port : simulator.sandboxAddress?.port)
    }

    @Test func eachKeyWorksWhereItIsAllowedAndTheLogSaysWhere() async throws {
        let estate = try AppsEstate("multi-app")
        let log = estate.scratch.path + "/accepted.jsonl"
        let simulator = try Self.start(estate, log: log)
        defer { simulator.shutdown() }
        #expect(simulator.sandboxAddress != nil && simulator.sandboxAddress != simulator.boundAddress)

        // Every key for every app in both environments, each on its own connection (nghttp run).
        var accepted: [String: (SimulatorConfiguration.Environment, String, String)] = [:]
        var index = 0
        for environment in SimulatorConfiguration.Environment.allCases {
            for keyID in AppsEstate.listedKeys + ["STRANGER01"] {
                for bundle in AppsEstate.bundles {
                    index += 1
                    let token = AppsEstate.token(index, environment)
                    let run = try await nghttp(
                        port: try Self.port(simulator, environment), path: "/3/device/\(token)",
                        headers: AppsEstate.pushHeaders(bundle, authorization: try estate.bearer(keyID)),
                        body: AppsEstate.liveActivityBody)
                    let expected = AppsEstate.expectedRejection(keyID: keyID, bundle: bundle, environment: environment)
                    #expect(
                        run.responses.first?.status == (expected?.status ?? 200), "\(keyID) \(bundle) \(environment)")
                    #expect(run.reason == expected?.rawValue, "\(keyID) for \(bundle) in \(environment)")
                    if expected == nil { accepted[token] = (environment, bundle, keyID) }
                }
            }
        }
        #expect(accepted.count == 10, "team keys for scores and companion where allowed, the topic key for league")

        await simulator.shutdown()
        let records = try Self.records(log)
        #expect(records.count == accepted.count)
        for record in records {
            let token = try #require(record["token"] as? String)
            let (environment, bundle, keyID) = try #require(accepted[token], "a push that should not be accepted")
            #expect(record["environment"] as? String == environment.rawValue)
            #expect(record["bundle-id"] as? String == bundle)
            #expect(record["topic"] as? String == bundle + ".push-type.liveactivity")
            #expect(record["key-id"] as? String == keyID)
            #expect(record["team-id"] as? String == AppsEstate.teams[keyID])
            #expect(
                AppsEstate.expectedRejection(keyID: keyID, bundle: bundle, environment: environment) == nil,
                "a key allowed there")
        }
    }

    @Test func aTokenSentToTheOtherEnvironmentIsABadDeviceToken() async throws {
        let estate = try AppsEstate("multi-app-tokens")
        let simulator = try Self.start(estate, log: estate.scratch.path + "/accepted.jsonl")
        defer { simulator.shutdown() }
        for (token, environment, status) in [
            (AppsEstate.token(1, .sandbox), SimulatorConfiguration.Environment.production, 400),
            (AppsEstate.token(2, .production), .sandbox, 400),
            (AppsEstate.token(3, .sandbox), .sandbox, 200), (AppsEstate.token(4, .production), .production, 200),
        ] {
            let run = try await nghttp(
                port: try Self.port(simulator, environment), path: "/3/device/\(token)",
                headers: AppsEstate.pushHeaders(AppsEstate.companion, authorization: try estate.bearer("ORDINARY01")),
                body: AppsEstate.liveActivityBody)
            #expect(run.responses.first?.status == status, "\(token) in \(environment)")
            if status == 400 { #expect(run.reason == APNsReason.badDeviceToken.rawValue) }
        }
        // Counts are published every tick: wait for them.
        #expect(await eventually { simulator.statistics(environment: .sandbox).accepted == 1 })
        #expect(await eventually { simulator.statistics().accepted == 2 })
    }

    /// Channels belong to one environment: created on the sandbox's management port, broadcast on its push port,
    /// unseen in production; the broadcast's log line names the sandbox, the app and the key.
    @Test func broadcastsUseTheirEnvironmentsChannels() async throws {
        let estate = try AppsEstate("multi-app-broadcast")
        let log = estate.scratch.path + "/accepted.jsonl"
        let simulator = try Self.start(estate, log: log)
        defer { simulator.shutdown() }
        let sandboxManagement = try #require(simulator.sandboxManagementAddress?.port)
        let productionManagement = try #require(simulator.managementAddress?.port)
        let created = try await nghttp(
            port: sandboxManagement, path: "/1/apps/\(AppsEstate.league)/channels",
            headers: [try estate.bearer("TOPIC00001")],
            body: #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#)
        let channel = try #require(try created.response.header("apns-channel-id"), "\(created.body)")
        let listed = try await nghttp(
            port: productionManagement, path: "/1/apps/\(AppsEstate.league)/all-channels",
            headers: [try estate.bearer("TOPIC00001")])
        #expect(listed.json?["channels"] as? [String] == [], "production has no sandbox channel")
        let refused = try await nghttp(
            port: productionManagement, path: "/1/apps/\(AppsEstate.scores)/channels",
            headers: [try estate.bearer("SANDBOX001")],
            body: #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#)
        #expect(refused.reason == APNsReason.badEnvironmentKeyIdInToken.rawValue)

        let broadcastHeaders = [
            try estate.bearer("TOPIC00001"), ("apns-channel-id", channel), ("apns-push-type", "liveactivity"),
            ("apns-priority", "10"), ("apns-expiration", "0"),
        ]
        let path = "/4/broadcasts/apps/\(AppsEstate.league)"
        let sent = try await nghttp(
            port: try Self.port(simulator, .sandbox), path: path, headers: broadcastHeaders,
            body: AppsEstate.liveActivityBody)
        #expect(sent.responses.first?.status == 200, "\(sent.body)")
        let elsewhere = try await nghttp(
            port: try Self.port(simulator, .production), path: path, headers: broadcastHeaders,
            body: AppsEstate.liveActivityBody)
        #expect(elsewhere.reason == APNsReason.channelNotRegistered.rawValue)

        await simulator.shutdown()
        let records = try Self.records(log)
        #expect(records.count == 1)
        #expect(records.first?["environment"] as? String == "sandbox")
        #expect(records.first?["bundle-id"] as? String == AppsEstate.league)
        #expect(records.first?["key-id"] as? String == "TOPIC00001")
        #expect(records.first?["channel-id"] as? String == channel)
    }

    static func records(_ log: String) throws -> [[String: Any]] {
        guard FileManager.default.fileExists(atPath: log) else { return [] }
        return try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        }
    }
}

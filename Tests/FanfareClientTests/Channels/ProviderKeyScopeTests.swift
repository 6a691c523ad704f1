// Provider keys as APNs has them since 2025 (apns-spec.md §6.1): a key restricted to the other environment
// and a topic-specific key for another app get their 403s, through the real client and on the management port.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct ProviderKeyScopeTests {
    private static func configuration(
        environmentReason: APNsReason = .badEnvironmentKeyIdInToken
    ) -> SimulatorConfiguration {
        var configuration = SimulatorConfiguration()
        configuration.providerKeys = [
            "SANDBOXKEY": ProviderKeyScope(environment: .sandbox),
            "PRODKEY001": ProviderKeyScope(environment: .production),
            "OTHERAPP01": ProviderKeyScope(topics: ["com.other.app"]),
            "THISAPP001": ProviderKeyScope(environment: .production, topics: ["com.other.app", Fixture.bundleID]),
        ]
        configuration.environmentReason(environmentReason)
        return configuration
    }

    /// One push with a token signed as `keyID` (the trusted key pair, so only the key's scope decides).
    private func push(_ harness: TestHarness, keyID: String) async throws -> PushResult? {
        let collector = ResultCollector()
        let tokens = try ProviderTokenSource(signer: harness.signer(keyID: keyID))
        let client = try harness.startClient(try harness.clientConfiguration(tokens: tokens), collector: collector)
        try await submitAll(client, [PushJob(token: makeToken(1), payload: try updatePayload(), cookie: 1)])
        #expect(await collector.waitFor(count: 1))
        return collector.byCookie()[1]
    }

    @Test(arguments: [APNsReason.badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken])
    func aKeyOfTheOtherEnvironmentIsRefused(spelling: APNsReason) async throws {
        let harness = try TestHarness(Self.configuration(environmentReason: spelling))
        defer { harness.shutdown() }
        let result = try await push(harness, keyID: "SANDBOXKEY")
        #expect(result?.disposition.status == 403)
        #expect(result?.disposition.rejectionReason == spelling)
        #expect(result?.disposition.action == .fixConfiguration)
    }

    @Test func aTopicSpecificKeyOfAnotherAppIsUnrelated() async throws {
        let harness = try TestHarness(Self.configuration())
        defer { harness.shutdown() }
        let result = try await push(harness, keyID: "OTHERAPP01")
        #expect(result?.disposition.status == 403)
        #expect(result?.disposition.rejectionReason == .unrelatedKeyIdInToken)
        #expect(result?.disposition.action == .fixConfiguration)
    }

    @Test(arguments: ["PRODKEY001", "THISAPP001", Fixture.keyID])
    func keysThatCoverThisAppAndEnvironmentWork(keyID: String) async throws {
        let harness = try TestHarness(Self.configuration())
        defer { harness.shutdown() }
        let result = try await push(harness, keyID: keyID)
        #expect(result?.disposition == .delivered)
    }

    @Test func aKeyTheSimulatorWasNotToldAboutIsInvalid() async throws {
        let harness = try TestHarness(Self.configuration())
        defer { harness.shutdown() }
        let result = try await push(harness, keyID: "STRANGER01")
        #expect(result?.disposition.rejectionReason == .invalidProviderToken)
    }

    /// The management API checks the same keys.
    @Test func theManagementPortChecksTheKeysToo() async throws {
        let harness = try TestHarness(Self.configuration(), management: true)
        defer { harness.shutdown() }
        let now = Int64(Date().timeIntervalSince1970)
        for (keyID, status, reason) in [
            ("SANDBOXKEY", 403, APNsReason.badEnvironmentKeyIdInToken), ("OTHERAPP01", 403, .unrelatedKeyIdInToken),
            ("THISAPP001", 201, nil),
        ] as [(String, Int, APNsReason?)] {
            let jwt = try harness.signer(keyID: keyID).mint(issuedAt: now).jwt
            let run = try await nghttp(
                port: harness.managementPort, path: "/1/apps/\(Fixture.bundleID)/channels",
                headers: [("authorization", "bearer \(jwt)")],
                body: #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#)
            #expect(run.responses.first?.status == status, "\(keyID)")
            #expect(run.reason == reason?.rawValue, "\(keyID)")
        }
    }
}

extension SimulatorConfiguration {
    fileprivate mutating func environmentReason(_ reason: APNsReason) { environmentKeyReason = reason }
}

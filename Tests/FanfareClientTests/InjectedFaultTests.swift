// Every device-push reason the simulator can inject reaches the caller with its status, reason and the
// action of apns-spec.md §7.4 (the table is written out here, independently of `APNsReason.action`).
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

/// apns-spec.md §7.4, device pushes: reason → (status, what a sender does).
private let specTable: [(APNsReason, Int, PushAction)] = [
    (.badCollapseId, 400, .fixConfiguration),
    (.badDeviceToken, 400, .dropToken),
    (.badExpirationDate, 400, .fixConfiguration),
    (.badMessageId, 400, .fixConfiguration),
    (.badPriority, 400, .fixConfiguration),
    (.badTopic, 400, .fixConfiguration),
    (.deviceTokenNotForTopic, 400, .dropToken),
    (.duplicateHeaders, 400, .fixConfiguration),
    (.idleTimeout, 400, .retryLater),
    (.invalidPushType, 400, .fixConfiguration),
    (.missingDeviceToken, 400, .fixConfiguration),
    (.missingTopic, 400, .fixConfiguration),
    (.payloadEmpty, 400, .discardMessage),
    (.topicDisallowed, 400, .fixConfiguration),
    (.badCertificate, 403, .fixConfiguration),
    (.badCertificateEnvironment, 403, .fixConfiguration),
    (.forbidden, 403, .fixConfiguration),
    (.invalidProviderToken, 403, .fixConfiguration),
    (.missingProviderToken, 403, .fixConfiguration),
    (.unrelatedKeyIdInToken, 403, .fixConfiguration),
    (.badEnvironmentKeyInToken, 403, .fixConfiguration),
    (.badEnvironmentKeyIdInToken, 403, .fixConfiguration),
    (.badPath, 404, .fixConfiguration),
    (.methodNotAllowed, 405, .fixConfiguration),
    (.expiredToken, 410, .dropToken),
    (.unregistered, 410, .dropToken),
    (.payloadTooLarge, 413, .discardMessage),
    (.tooManyProviderTokenUpdates, 429, .fixConfiguration),
    (.tooManyRequests, 429, .retryLater),
    (.internalServerError, 500, .retryLater),
    (.serviceUnavailable, 503, .retryOnNewConnection),
    (.shutdown, 503, .retryOnNewConnection),
]

@Suite(.ownThread) struct InjectedFaultTests {
    @Test(arguments: specTable.map { $0.0 })
    func injectedReasonReachesTheCaller(reason: APNsReason) async throws {
        let entry = try #require(specTable.first { $0.0 == reason })
        var configuration = SimulatorConfiguration()
        configuration.faults = [FaultRule(reason: reason, probability: 1)]
        let harness = try TestHarness(configuration)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        let client = try harness.startClient(try harness.clientConfiguration(), collector: collector)
        let payload = try updatePayload()

        let jobs = (0..<3).map {
            PushJob(token: makeToken($0), payload: payload, priority: .normal, cookie: UInt64($0))
        }
        let submitted = Int64(Date().timeIntervalSince1970 * 1000)
        try await submitAll(client, jobs)
        #expect(await collector.waitFor(count: jobs.count))
        let answered = Int64(Date().timeIntervalSince1970 * 1000)
        let results = collector.byCookie()
        #expect(results.count == jobs.count)
        for result in results.values {
            guard case .rejected(let status, let got, let raw, let action, let timestamp) = result.disposition else {
                Issue.record("\(reason): expected a rejection, got \(result.disposition)")
                continue
            }
            #expect(status == entry.1)
            #expect(got == reason)
            #expect(raw == nil, "a known reason has no raw text")
            #expect(action == entry.2, "\(reason): action \(action)")
            #expect(result.disposition.action == entry.2)
            #expect(result.resends == 0, "APNs answered: nothing to resend")
            if status == 410 {
                let timestamp = try #require(timestamp, "410 carries the time the token became inactive")
                // Between submission and the answers (not "within a minute": the wall clock may jump).
                #expect(timestamp >= submitted - 1000 && timestamp <= answered + 1000)
            } else {
                #expect(timestamp == nil)
            }
        }
        await harness.shutdown()
        let stats = harness.simulator.statistics()
        #expect(stats.count(of: reason) == jobs.count)
        #expect(stats.accepted == 0)
        #expect(client.statistics.rejected == jobs.count)
    }

    /// ExpiredProviderToken is handled by the client itself (fresh token, new connection, resend); when the
    /// simulator answers it to every push, the client gives up after `maxResends`.
    @Test func expiredProviderTokenEverywhereEndsAfterTheResendLimit() async throws {
        var configuration = SimulatorConfiguration()
        configuration.faults = [FaultRule(reason: .expiredProviderToken, probability: 1)]
        let harness = try TestHarness(configuration)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var clientConfiguration = try harness.clientConfiguration()
        clientConfiguration.maxResends = 2
        let client = try harness.startClient(clientConfiguration, collector: collector)
        try client.submit(PushJob(token: makeToken(1), payload: try updatePayload(), cookie: 7))
        #expect(await collector.waitFor(count: 1))
        let result = try #require(collector.all.first)
        guard case .failed(.resendLimitReached(let cause)) = result.disposition else {
            Issue.record("expected resendLimitReached, got \(result.disposition)")
            return
        }
        #expect(cause.contains("ExpiredProviderToken"))
        #expect(result.resends == 3)
        await harness.shutdown()
        #expect(harness.simulator.statistics().count(of: .expiredProviderToken) == 3)
    }
}

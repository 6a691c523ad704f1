// Rejections that the simulator derives from the real request (headers, token, body, JWT), not injected.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct RequestValidationTests {
    /// Sends one push per token with `configuration` and returns the results by cookie.
    private func sendOne(
        _ harness: TestHarness, configuration: ClientConfiguration, payload: PushPayload? = nil,
        tokens: [DeviceToken] = [makeToken(1)]
    ) async throws -> [UInt64: PushResult] {
        let collector = ResultCollector()
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try payload ?? updatePayload()
        let jobs = tokens.enumerated().map { PushJob(token: $1, payload: payload, cookie: UInt64($0)) }
        try await submitAll(client, jobs)
        #expect(await collector.waitFor(count: jobs.count))
        return collector.byCookie()
    }

    private func expectRejected(
        _ result: PushResult?, status: Int, reason: APNsReason, action: PushAction,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard let result else {
            Issue.record("no result", sourceLocation: sourceLocation)
            return
        }
        #expect(result.disposition.status == status, "\(result.disposition)", sourceLocation: sourceLocation)
        #expect(result.disposition.rejectionReason == reason, "\(result.disposition)", sourceLocation: sourceLocation)
        #expect(result.disposition.action == action, sourceLocation: sourceLocation)
    }

    /// A topic too long for a request's header block is refused when the client is made, with the sizes,
    /// instead of trapping on the first push; a long but possible one still works.
    @Test func topicTooLongForTheHeaderBlockIsRefusedUpFront() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.topic = String(repeating: "t", count: 2000) + ".push-type.liveactivity"
        #expect {
            _ = try APNsClient(configuration: configuration)
        } throws: { error in
            guard case .headersTooLarge(let bytes, let limit)? = error as? ClientConfigurationError else {
                return false
            }
            return bytes > limit && "\(error)".contains("shorten the topic")
        }
        configuration.topic = String(repeating: "t", count: 1000) + ".push-type.liveactivity"
        let results = try await sendOne(harness, configuration: configuration)
        // The request went out whole: APNs (the simulator) answers it, for a topic that is not this app's.
        expectRejected(results[0], status: 400, reason: .topicDisallowed, action: .fixConfiguration)
    }

    @Test func topicOfAnotherAppIsDisallowed() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let configuration = try harness.clientConfiguration(topic: "com.other.app.push-type.liveactivity")
        let results = try await sendOne(harness, configuration: configuration)
        expectRejected(results[0], status: 400, reason: .topicDisallowed, action: .fixConfiguration)
        await harness.shutdown()
        #expect(harness.simulator.statistics().count(of: .topicDisallowed) == 1)
    }

    @Test func bundleTopicWithoutLiveActivitySuffixIsNotForTheToken() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let configuration = try harness.clientConfiguration(topic: Fixture.bundleID)
        let results = try await sendOne(harness, configuration: configuration)
        expectRejected(results[0], status: 400, reason: .deviceTokenNotForTopic, action: .dropToken)
    }

    @Test func unknownTokenIsUnregisteredWithTimestamp() async throws {
        var simulator = SimulatorConfiguration()
        simulator.knownTokens = [makeToken(1).hexString.uppercased()]
        simulator.unknownTokenReply = .unregistered
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let results = try await sendOne(
            harness, configuration: try harness.clientConfiguration(), tokens: [makeToken(1), makeToken(2)])
        #expect(results[0]?.disposition == .delivered, "a known token (listed in upper case) is accepted")
        expectRejected(results[1], status: 410, reason: .unregistered, action: .dropToken)
        if case .rejected(_, _, _, _, let timestamp)? = results[1]?.disposition {
            let timestamp = try #require(timestamp)
            #expect(timestamp >= before - 1000 && timestamp <= Int64(Date().timeIntervalSince1970 * 1000) + 1000)
        }
    }

    @Test func unknownTokenIsBadDeviceTokenWhenConfigured() async throws {
        var simulator = SimulatorConfiguration()
        simulator.knownTokens = [makeToken(1).hexString]
        simulator.unknownTokenReply = .badDeviceToken
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let results = try await sendOne(
            harness, configuration: try harness.clientConfiguration(), tokens: [makeToken(1), makeToken(2)])
        #expect(results[0]?.disposition == .delivered)
        expectRejected(results[1], status: 400, reason: .badDeviceToken, action: .dropToken)
        if case .rejected(_, _, _, _, let timestamp)? = results[1]?.disposition { #expect(timestamp == nil) }
    }

    @Test(arguments: ["this is not JSON", #"{"content-state":{"home":1}}"#, #"{"aps":"update"}"#, "[1,2,3]"])
    func malformedPayloadIsRejected(body: String) async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let results = try await sendOne(
            harness, configuration: try harness.clientConfiguration(), payload: try PushPayload(body))
        // The simulator's default answer for a body that is not an object with an `aps` object.
        expectRejected(results[0], status: 400, reason: .payloadEmpty, action: .discardMessage)
    }

    @Test func payloadOverTheLimitIsTooLarge() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let padding = String(repeating: "x", count: 4200)
        let body = #"{"aps":{"event":"update","timestamp":1,"content-state":{"pad":"\#(padding)"}}}"#
        let payload = try PushPayload(body, limit: 8192)  // the client's own limit lifted to reach the server's
        let results = try await sendOne(harness, configuration: try harness.clientConfiguration(), payload: payload)
        expectRejected(results[0], status: 413, reason: .payloadTooLarge, action: .discardMessage)
    }

    @Test func tokenSignedForAnotherTeamIsInvalid() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let tokens = ProviderTokenSource(signer: try harness.signer(teamID: "OTHERTEAM1"))
        let results = try await sendOne(harness, configuration: try harness.clientConfiguration(tokens: tokens))
        expectRejected(results[0], status: 403, reason: .invalidProviderToken, action: .fixConfiguration)
        await harness.shutdown()
        #expect(harness.simulator.statistics().accepted == 0)
    }

    @Test func tokenSignedWithAnUnknownKeyIsInvalid() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let stranger = try harness.signer(privateKeyFile: harness.keys.unknownPrivateKeyFile)
        let results = try await sendOne(
            harness, configuration: try harness.clientConfiguration(tokens: ProviderTokenSource(signer: stranger)))
        expectRejected(results[0], status: 403, reason: .invalidProviderToken, action: .fixConfiguration)
    }

    @Test func tokenWithAnotherKeyIDIsInvalid() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let tokens = ProviderTokenSource(signer: try harness.signer(keyID: "OTHERKEY01"))
        let results = try await sendOne(harness, configuration: try harness.clientConfiguration(tokens: tokens))
        expectRejected(results[0], status: 403, reason: .invalidProviderToken, action: .fixConfiguration)
    }

    @Test func missingProviderTokenIsRejected() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.providerTokens = nil
        let results = try await sendOne(harness, configuration: configuration)
        expectRejected(results[0], status: 403, reason: .missingProviderToken, action: .fixConfiguration)
    }

    /// Rejections keep every push accounted for when many go out at once on a connection that never saw a 200.
    @Test func manyRejectedPushesEachGetTheirAnswer() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let tokens = ProviderTokenSource(signer: try harness.signer(teamID: "OTHERTEAM1"))
        let results = try await sendOne(
            harness, configuration: try harness.clientConfiguration(tokens: tokens),
            tokens: (0..<50).map { makeToken($0) })
        #expect(results.count == 50)
        #expect(results.values.allSatisfy { $0.disposition.rejectionReason == .invalidProviderToken })
    }

    /// `apns-collapse-id` is sent as given: 64 bytes arrive intact, a longer one gets APNs' BadCollapseId
    /// (never a silently shortened id that would collapse with other pushes).
    @Test func collapseIDLimitIsAPNsToEnforce() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let collector = ResultCollector()
        let client = try harness.startClient(try harness.clientConfiguration(), collector: collector)
        let payload = try updatePayload()
        let longest = String(repeating: "é", count: 32)  // 64 bytes of UTF-8
        let fits = try await client.send(PushJob(token: makeToken(1), payload: payload, collapseID: longest))
        #expect(fits.isDelivered)
        let tooLong = try await client.send(PushJob(token: makeToken(2), payload: payload, collapseID: longest + "x"))
        expectRejected(tooLong, status: 400, reason: .badCollapseId, action: .fixConfiguration)
        await harness.shutdown()
        let log = try harness.acceptedLog()
        #expect(log.count == 1)
        #expect(log.first?.string("collapse-id") == longest)
    }

    /// The simulator's per-token rate limit answers 429 TooManyRequests (retry later) past N pushes a second.
    @Test func tooManyPushesToOneTokenAreThrottled() async throws {
        var simulator = SimulatorConfiguration()
        simulator.perTokenRateLimit = 5
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let results = try await sendOne(
            harness, configuration: try harness.clientConfiguration(), tokens: Array(repeating: makeToken(7), count: 20)
        )
        let delivered = results.values.filter { $0.isDelivered }.count
        let throttled = results.values.filter { $0.disposition.rejectionReason == .tooManyRequests }
        #expect(delivered + throttled.count == 20)
        #expect(delivered >= 5 && delivered <= 10, "5 per one-second window (the burst may straddle two): \(delivered)")
        #expect(throttled.allSatisfy { $0.disposition.status == 429 && $0.disposition.action == .retryLater })
    }
}

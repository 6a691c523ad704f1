import FanfareCore
import FanfareTestSupport
import Testing
@testable import FanfareSimulator

@Suite(.ownThread) struct RequestValidatorTests {
    // MARK: Device tokens

    @Test(arguments: [32, 33, 64, 80, 100])
    func tokensOf32To100BytesAreAccepted(_ bytes: Int) {
        #expect(decide(.valid(token: Fixtures.hexToken(bytes: bytes))) == .accept)
    }

    @Test(arguments: [1, 16, 31, 101, 128])
    func tokensOutside32To100BytesAreBadDeviceToken(_ bytes: Int) {
        #expect(decide(.valid(token: Fixtures.hexToken(bytes: bytes))).reason == .badDeviceToken)
    }

    @Test func oddDigitCountsAndNonHexAreBadDeviceToken() {
        #expect(decide(.valid(token: Fixtures.token32 + "a")).reason == .badDeviceToken)
        #expect(decide(.valid(token: String(Fixtures.token32.dropLast()) + "g")).reason == .badDeviceToken)
        #expect(decide(.valid(token: Fixtures.token32 + "/x")).reason == .badDeviceToken)
    }

    @Test func uppercaseHexTokensAreAccepted() {
        #expect(decide(.valid(token: Fixtures.token80.uppercased())) == .accept)
    }

    // MARK: Header values

    @Test(arguments: ["1", "5", "10"])
    func documentedPrioritiesAreAccepted(_ priority: String) {
        var request = TestRequest.valid()
        request.set("apns-priority", priority)
        #expect(decide(request) == .accept)
    }

    @Test(arguments: ["", "05", "0", "11", "ten", " 5"])
    func otherPrioritiesAreBadPriority(_ priority: String) {
        var request = TestRequest.valid()
        request.set("apns-priority", priority)
        #expect(decide(request).reason == .badPriority)
    }

    @Test func absentPriorityAndExpirationAreAccepted() {
        var request = TestRequest.valid()
        request.remove("apns-priority")
        request.remove("apns-expiration")
        request.remove("apns-id")
        #expect(decide(request) == .accept)
    }

    @Test(arguments: ["", "abc", "+5", "1.5", "99999999999999999999"])
    func malformedExpirationsAreBadExpirationDate(_ expiration: String) {
        var request = TestRequest.valid()
        request.set("apns-expiration", expiration)
        #expect(decide(request).reason == .badExpirationDate)
    }

    @Test func expirationInThePastOrFutureIsAccepted() {
        var request = TestRequest.valid()
        request.set("apns-expiration", "1")
        #expect(decide(request) == .accept)
        request.set("apns-expiration", "4102444800")
        #expect(decide(request) == .accept)
    }

    @Test func collapseIDOf64BytesIsAccepted() {
        var request = TestRequest.valid()
        request.set("apns-collapse-id", String(repeating: "c", count: 64))
        #expect(decide(request) == .accept)
    }

    @Test func uppercaseMessageIDIsAcceptedUnlessLowercaseIsRequired() {
        var request = TestRequest.valid()
        request.set("apns-id", "123E4567-E89B-42D3-A456-426614174000")
        #expect(decide(request) == .accept)
        var strict = SimulatorConfiguration()
        strict.requireLowercaseMessageID = true
        #expect(decide(request, configuration: strict).reason == .badMessageId)
    }

    @Test(arguments: [
        "123e4567e89b42d3a456426614174000", "123e4567-e89b-42d3-a456-42661417400",
        "123e4567-e89b-42d3-a456_426614174000", "",
    ])
    func nonCanonicalMessageIDsAreBadMessageId(_ id: String) {
        var request = TestRequest.valid()
        request.set("apns-id", id)
        #expect(decide(request).reason == .badMessageId)
    }

    @Test func missingMethodIsMethodNotAllowedAndMissingPathIsBadPath() {
        var request = TestRequest.valid()
        request.remove(":method")
        #expect(decide(request).reason == .methodNotAllowed)
        request = .valid()
        request.remove(":path")
        #expect(decide(request).reason == .badPath)
    }

    @Test func duplicateAPNsHeaderIsDuplicateHeadersEvenWithTheSameValue() {
        var request = TestRequest.valid()
        request.append("apns-priority", "10")
        #expect(decide(request).reason == .duplicateHeaders)
    }

    // MARK: Push type and topic

    @Test func pushTypeMustMatchTheTopicSuffix() {
        var request = TestRequest.valid()
        request.set("apns-topic", Fixtures.bundle)  // liveactivity push type, bare topic
        #expect(decide(request).reason == .deviceTokenNotForTopic)
        request.set("apns-push-type", "alert")
        #expect(decide(request) == .accept)
        request.set("apns-topic", Fixtures.bundle + ".voip")
        #expect(decide(request).reason == .deviceTokenNotForTopic)
        request.set("apns-push-type", "voip")
        #expect(decide(request) == .accept)
        request.set("apns-topic", Fixtures.bundle + ".push-type.widgets")
        request.set("apns-push-type", "widgets")
        #expect(decide(request) == .accept)
    }

    @Test func withoutRequirePushTypeTheTopicImpliesIt() {
        var configuration = SimulatorConfiguration()
        configuration.requirePushType = false
        var request = TestRequest.valid()
        request.remove("apns-push-type")
        #expect(decide(request, configuration: configuration) == .accept)
    }

    // MARK: Body

    @Test func bodyLimitIs4096ForLiveActivities() {
        var request = TestRequest.valid()
        request.body = Fixtures.body(ofSize: 4096)
        #expect(decide(request) == .accept)
        request.body = Fixtures.body(ofSize: 4097)
        #expect(decide(request) == .reject(.payloadTooLarge, timestamp: nil))
    }

    @Test func bodyLimitIs5120ForVoIP() {
        var request = TestRequest.valid()
        request.set("apns-topic", Fixtures.bundle + ".voip")
        request.set("apns-push-type", "voip")
        request.body = Fixtures.body(ofSize: 5120)
        #expect(decide(request) == .accept)
        request.body = Fixtures.body(ofSize: 5121)
        #expect(decide(request).reason == .payloadTooLarge)
    }

    @Test(arguments: [#"{"aps":{}"#, "not json", "[1,2]", #"{"aps":5}"#, #"{"aps":{}} x"#, #"{"alert":"hi"}"#])
    func malformedBodiesGetTheConfiguredReason(_ body: String) {
        var request = TestRequest.valid()
        request.body = body
        #expect(decide(request) == .reject(.payloadEmpty, timestamp: nil))  // the [U] default
        var configuration = SimulatorConfiguration()
        configuration.malformedPayloadReason = .badRequestPayload
        #expect(decide(request, configuration: configuration).reason == .badRequestPayload)
        configuration.malformedPayloadReason = nil
        #expect(decide(request, configuration: configuration) == .accept)
    }

    @Test func aCountedButUnstoredBodySkipsTheJSONCheck() {
        var validator = RequestValidator(configuration: SimulatorConfiguration())
        let auth = ConnectionAuthState(policy: SimulatorConfiguration().providerTokenPolicy, verifier: FakeVerifier())
        var request = TestRequest.valid()
        request.body = ""
        var head = request.head()
        head.appendBody(count: 100)
        #expect(validator.decide(head, auth: auth, now: Fixtures.now) == .accept)
        head.appendBody(count: 4000)
        #expect(validator.decide(head, auth: auth, now: Fixtures.now).reason == .payloadTooLarge)
    }

    // MARK: Oversized header values

    @Test func headerValuesThatDoNotFitTheArenaCountAsMalformed() {
        var request = TestRequest.valid()
        request.set("apns-collapse-id", "short")
        request.set("x-padding", String(repeating: "p", count: 50))  // ignored: costs no arena
        // Arena of 600 bytes: the path, JWT, topic and others fit; a 700-byte collapse id does not.
        request.set("apns-collapse-id", String(repeating: "c", count: 700))
        var validator = RequestValidator(configuration: SimulatorConfiguration())
        let auth = ConnectionAuthState(policy: SimulatorConfiguration().providerTokenPolicy, verifier: FakeVerifier())
        let head = request.head(arenaCapacity: 600)
        let oversized = head.hasOversizedHeaders  // #expect cannot capture a ~Copyable value
        #expect(oversized)
        #expect(validator.decide(head, auth: auth, now: Fixtures.now).reason == .badCollapseId)
    }

    // MARK: Known tokens

    @Test func unknownTokensGet410WithTimestampByDefault() {
        var configuration = SimulatorConfiguration()
        configuration.knownTokens = [Fixtures.token80.uppercased()]
        #expect(decide(.valid(token: Fixtures.token80), configuration: configuration) == .accept)
        #expect(
            decide(.valid(token: Fixtures.token32), configuration: configuration)
                == .reject(.unregistered, timestamp: Fixtures.now.milliseconds)
        )
    }

    @Test func unknownTokensCanGetBadDeviceToken() {
        var configuration = SimulatorConfiguration()
        configuration.knownTokens = [Fixtures.token80]
        configuration.unknownTokenReply = .badDeviceToken
        #expect(
            decide(.valid(token: Fixtures.token32), configuration: configuration)
                == .reject(.badDeviceToken, timestamp: nil))
    }

    @Test func aSharedTokenSetWorksLikeTheConfiguredOne() {
        var configuration = SimulatorConfiguration()
        configuration.knownTokens = []  // would reject everything if used
        let shared = DeviceTokenSet(hexTokens: [Fixtures.token32])
        var validator = RequestValidator(configuration: configuration, worker: 3, knownTokens: shared)
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: FakeVerifier())
        #expect(validator.decide(TestRequest.valid().head(), auth: auth, now: Fixtures.now) == .accept)
    }

    // MARK: Per-token rate limit

    @Test func perTokenRateLimitRejectsTheFourthPushInOneSecond() {
        var configuration = SimulatorConfiguration()
        configuration.perTokenRateLimit = 3
        var validator = RequestValidator(configuration: configuration)
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: FakeVerifier())
        let head = TestRequest.valid().head()
        let other = TestRequest.valid(token: Fixtures.token80).head()
        let second = Fixtures.now
        for _ in 0..<3 { #expect(validator.decide(head, auth: auth, now: second) == .accept) }
        #expect(
            validator.decide(head, auth: auth, now: second.adding(seconds: 0))
                == .reject(.tooManyRequests, timestamp: nil))
        #expect(validator.decide(other, auth: auth, now: second) == .accept)  // other tokens unaffected
        #expect(validator.decide(head, auth: auth, now: second.adding(seconds: 1)) == .accept)  // next window
    }

    @Test func rateLimiterTreatsTokenCaseAsTheSameToken() {
        let limiter = PerTokenRateLimiter(limit: 1, capacity: 64)
        #expect(withBytes("abcdef") { limiter.admit(token: $0, now: Fixtures.now) })
        #expect(!withBytes("ABCDEF") { limiter.admit(token: $0, now: Fixtures.now) })
    }

    @Test func aFullRateTableAdmitsAndCountsOverflows() {
        let limiter = PerTokenRateLimiter(limit: 1, capacity: 16)
        for index in 0..<40 {
            #expect(
                withBytes(Fixtures.hexToken(bytes: 32, seed: index)) { limiter.admit(token: $0, now: Fixtures.now) })
        }
        #expect(limiter.overflows == 24)
        // A new second frees every slot.
        #expect(
            withBytes(Fixtures.hexToken(bytes: 32, seed: 99)) {
                limiter.admit(token: $0, now: Fixtures.now.adding(seconds: 1))
            })
        #expect(limiter.overflows == 24)
    }

    // MARK: Faults

    @Test func aFaultWithProbabilityOneAlwaysFires() {
        var configuration = SimulatorConfiguration()
        configuration.faults = [FaultRule(reason: .serviceUnavailable, probability: 1.0)]
        var validator = RequestValidator(configuration: configuration)
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: FakeVerifier())
        let head = TestRequest.valid().head()
        for _ in 0..<1000 {
            #expect(
                validator.decide(head, auth: auth, now: Fixtures.now) == .reject(.serviceUnavailable, timestamp: nil))
        }
    }

    @Test func aFaultWithProbabilityZeroNeverFires() {
        var configuration = SimulatorConfiguration()
        configuration.faults = [FaultRule(reason: .internalServerError, probability: 0.0)]
        var validator = RequestValidator(configuration: configuration)
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: FakeVerifier())
        let head = TestRequest.valid().head()
        for _ in 0..<1000 { #expect(validator.decide(head, auth: auth, now: Fixtures.now) == .accept) }
    }

    @Test func faultsOnlyHitOtherwiseValidPushes() {
        var configuration = SimulatorConfiguration()
        configuration.faults = [FaultRule(reason: .internalServerError, probability: 1.0)]
        var request = TestRequest.valid()
        request.set("apns-priority", "3")
        #expect(decide(request, configuration: configuration).reason == .badPriority)
    }

    @Test func seededFaultRatesAreNearTheConfiguredOnesAndReproducible() {
        var configuration = SimulatorConfiguration()
        configuration.seed = 42
        configuration.faults = [
            FaultRule(reason: .tooManyRequests, probability: 0.01),
            FaultRule(reason: .unregistered, probability: 0.05),
        ]
        func run(worker: Int) -> [SimulatorDecision] {
            var validator = RequestValidator(configuration: configuration, worker: worker)
            let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: FakeVerifier())
            let head = TestRequest.valid().head()
            return (0..<20_000).map { _ in validator.decide(head, auth: auth, now: Fixtures.now) }
        }
        let decisions = run(worker: 0)
        let throttled = decisions.filter { $0.reason == .tooManyRequests }.count
        let unregistered = decisions.filter { $0.reason == .unregistered }
        #expect((140...260).contains(throttled))  // expected 200
        #expect((880...1120).contains(unregistered.count))  // expected 1000
        #expect(unregistered.allSatisfy { $0 == .reject(.unregistered, timestamp: Fixtures.now.milliseconds) })
        #expect(run(worker: 0) == decisions)  // same seed and worker: same sequence
        #expect(run(worker: 1) != decisions)  // another worker draws another sequence
    }

    // MARK: Broadcast

    @Test func aValidBroadcastIsAccepted() {
        #expect(decide(.validBroadcast()) == .accept)
    }

    @Test func broadcastRules() {
        func reason(_ change: (inout TestRequest) -> Void) -> APNsReason? {
            var request = TestRequest.validBroadcast()
            change(&request)
            return decide(request).reason
        }
        #expect(reason { $0.set("apns-request-id", "x") } == .badMessageId)
        #expect(reason { $0.set(":path", "/4/broadcasts/apps/\(Fixtures.liveActivityTopic)") } == .topicDisallowed)
        #expect(reason { $0.set(":path", "/4/broadcasts/apps/com.other.app") } == .topicMismatch)
        #expect(reason { $0.set(":path", "/4/broadcasts/apps/") } == .badPath)
        #expect(reason { $0.remove("apns-channel-id") } == .missingChannelId)
        #expect(reason { $0.set("apns-channel-id", "not base64!") } == .badChannelId)
        #expect(reason { $0.set("apns-priority", "2") } == .badPriority)
        #expect(reason { $0.remove("apns-push-type") } == .missingPushType)
        #expect(reason { $0.set("apns-push-type", "alert") } == .invalidPushType)
        #expect(reason { $0.set("apns-expiration", "x") } == .badExpirationDate)
        #expect(reason { $0.remove("authorization") } == .missingProviderToken)
        #expect(reason { $0.body = "" } == .payloadEmpty)
        #expect(reason { $0.body = Fixtures.body(ofSize: 5120) } == nil)
        #expect(reason { $0.body = Fixtures.body(ofSize: 5121) } == .payloadTooLarge)
        #expect(reason { $0.body = "{" } == .badRequestPayload)
    }

    /// With the simulator's channels: the channel is looked up after authentication and before the body.
    @Test func broadcastsAgainstTrackedChannels() throws {
        let channels = try BroadcastChannels(environment: .production, maxChannelsPerApp: 10, file: nil)
        let noStorage = try channels.create(bundleID: Fixtures.bundle, storagePolicy: 0).id.description
        let stored = try channels.create(bundleID: Fixtures.bundle, storagePolicy: 1).id.description
        var configuration = SimulatorConfiguration()
        func reason(
            _ configuration: SimulatorConfiguration = configuration, _ change: (inout TestRequest) -> Void
        ) -> APNsReason?? {
            var request = TestRequest.validBroadcast()
            request.set("apns-channel-id", noStorage)
            change(&request)
            var validator = RequestValidator(configuration: configuration, channels: channels)
            let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: FakeVerifier())
            let decision = validator.decide(request.head(), auth: auth, now: Fixtures.now)
            #expect(validator.lastWasBroadcast)
            return .some(decision.reason)
        }
        #expect(reason { _ in } == .some(nil))
        #expect(reason { $0.set("apns-channel-id", "dHdvLXdheS1jaGFubmVsLWlk") } == .channelNotRegistered)
        #expect(reason { $0.set("apns-expiration", "1750003600") } == .badExpirationDate)
        #expect(reason { $0.remove("apns-expiration") } == .some(nil), "absent is 0")
        #expect(
            reason {
                $0.set("apns-expiration", "1750003600")
                $0.set("apns-channel-id", stored)
            } == .some(nil))
        // Rule order: priority (a header) before the channel, authentication before the channel, the channel
        // before the body.
        #expect(
            reason {
                $0.set("apns-priority", "1")
                $0.set("apns-channel-id", "dHdvLXdheS1jaGFubmVsLWlk")
            } == .badPriority)
        #expect(reason { $0.remove("apns-priority") } == .badPriority)
        #expect(
            reason {
                $0.remove("authorization")
                $0.set("apns-channel-id", "dHdvLXdheS1jaGFubmVsLWlk")
            } == .missingProviderToken)
        #expect(
            reason {
                $0.body = ""
                $0.set("apns-channel-id", "dHdvLXdheS1jaGFubmVsLWlk")
            } == .channelNotRegistered)
        let start = #"{"aps":{"timestamp":1,"event":"start","content-state":{}}}"#
        #expect(reason { $0.body = start } == .badRequestPayload)
        configuration.broadcastStartEventReason = .badRequestParams
        #expect(reason(configuration) { $0.body = start } == .badRequestParams)
        configuration.broadcastStartEventReason = nil
        #expect(reason(configuration) { $0.body = start } == .some(nil), "start events accepted when configured")
        // A sandbox simulator does not see production's channels.
        let sandbox = try BroadcastChannels(environment: .sandbox, maxChannelsPerApp: 10, file: nil)
        var validator = RequestValidator(configuration: SimulatorConfiguration(), channels: sandbox)
        var request = TestRequest.validBroadcast()
        request.set("apns-channel-id", noStorage)
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: FakeVerifier())
        #expect(validator.decide(request.head(), auth: auth, now: Fixtures.now).reason == .channelNotRegistered)
    }

    @Test func thePushPortRefusesManagementPathsWhateverTheMethod() {
        for method in ["GET", "POST", "DELETE"] {
            var request = TestRequest.valid()
            request.set(":method", method)
            request.set(":path", "/1/apps/\(Fixtures.bundle)/channels")
            #expect(decide(request).reason == .badPath, "\(method)")
        }
    }

    @Test func broadcastsCanBeTurnedOff() {
        var configuration = SimulatorConfiguration()
        configuration.acceptBroadcasts = false
        #expect(decide(.validBroadcast(), configuration: configuration).reason == .badPath)
    }

    // MARK: Decision

    @Test func decisionStatus() {
        #expect(SimulatorDecision.accept.status == 200)
        #expect(SimulatorDecision.reject(.unregistered, timestamp: 1).status == 410)
        #expect(SimulatorDecision.reject(.payloadTooLarge, timestamp: nil).status == 413)
    }
}

import FanfareCore
import FanfareTestSupport
import Testing
@testable import FanfareSimulator

@Suite(.ownThread) struct ProviderTokenCheckingTests {
    let now = Fixtures.now

    func makeState(
        _ tokens: [String: VerifiedProviderToken],
        policy: ProviderTokenPolicy = SimulatorConfiguration().providerTokenPolicy
    ) -> (ConnectionAuthState, FakeVerifier) {
        let verifier = FakeVerifier(tokens)
        return (ConnectionAuthState(policy: policy, verifier: verifier), verifier)
    }

    func check(_ state: ConnectionAuthState, _ authorization: String?, at time: SimulatorInstant) -> APNsReason? {
        guard let authorization else { return state.check(authorization: nil, now: time) }
        return withBytes(authorization) { state.check(authorization: $0, now: time) }
    }

    @Test(arguments: [nil, "", "bearer ", "bearer", "basic abc", "bearerabc", "Token abc"])
    func missingOrNonBearerAuthorizationIsMissingProviderToken(_ authorization: String?) {
        let (state, verifier) = makeState(["abc": Fixtures.identity()])
        #expect(check(state, authorization, at: now) == .missingProviderToken)
        #expect(verifier.callCount == 0)
    }

    @Test func bearerSchemeIsCaseInsensitive() {
        let (state, _) = makeState(["abc": Fixtures.identity()])
        #expect(check(state, "Bearer abc", at: now) == nil)
        #expect(check(state, "BEARER abc", at: now) == nil)
    }

    @Test func anAbsentHeaderValueIsMissingAndAnOversizedOneIsInvalid() {
        let (state, _) = makeState([:])
        #expect(state.check(authorization: HeaderValue.absent, now: now) == .missingProviderToken)
        #expect(state.check(authorization: HeaderValue.oversized(byteCount: 5000), now: now) == .invalidProviderToken)
    }

    @Test func aTokenTheVerifierRejectsIsInvalidAndVerifiedOnlyOnce() {
        let (state, verifier) = makeState([:])
        for _ in 0..<5 { #expect(check(state, "bearer forged", at: now) == .invalidProviderToken) }
        #expect(verifier.callCount == 1)
    }

    @Test func theSameTokenIsVerifiedOncePerConnection() {
        let (state, verifier) = makeState(["good": Fixtures.identity()])
        for _ in 0..<100 { #expect(check(state, "bearer good", at: now) == nil) }
        #expect(verifier.callCount == 1)
        #expect(state.verificationCount == 1)
        // Another connection verifies again.
        let other = ConnectionAuthState(policy: state.policy, verifier: verifier)
        #expect(check(other, "bearer good", at: now) == nil)
        #expect(verifier.callCount == 2)
    }

    @Test func wrongKeyIDOrTeamIsInvalid() {
        let (state, _) = makeState([
            "wrong-kid": Fixtures.identity(keyID: "OTHERKEY01"),
            "wrong-team": Fixtures.identity(teamID: "OTHERTEAM1"),
        ])
        #expect(check(state, "bearer wrong-kid", at: now) == .invalidProviderToken)
        #expect(check(state, "bearer wrong-team", at: now) == .invalidProviderToken)
        #expect(state.boundTeamID == nil)
    }

    /// APNs accepts `iat` as a decimal string (APNSwift sends it so): accepted by default, the strict reading
    /// (`strictProviderToken`) refuses it as before.
    @Test func aStringIssuedAtIsAcceptedUnlessStrict() {
        var identity = Fixtures.identity()
        identity.issuedAtIsString = true
        let (lenient, _) = makeState(["apnswift": identity])
        #expect(check(lenient, "bearer apnswift", at: now) == nil)

        var configuration = SimulatorConfiguration()
        configuration.strictProviderToken = true
        #expect(configuration.providerTokenPolicy.requireNumericIssuedAt)
        let (strict, _) = makeState(
            ["apnswift": identity, "numeric": Fixtures.identity()], policy: configuration.providerTokenPolicy)
        #expect(check(strict, "bearer apnswift", at: now) == .invalidProviderToken)
        #expect(check(strict, "bearer numeric", at: now) == nil)
    }

    @Test func theFirstAcceptedTokenBindsTeamAndKey() {
        let policy = ProviderTokenPolicy(keyID: nil, teamID: nil, minTokenRefreshInterval: 0)
        let (state, _) = makeState(
            [
                "a": Fixtures.identity(keyID: "KEY0000001", teamID: "TEAM000001"),
                "other-team": Fixtures.identity(keyID: "KEY0000001", teamID: "TEAM000002"),
                "other-key": Fixtures.identity(keyID: "KEY0000002", teamID: "TEAM000001"),
                "same": Fixtures.identity(issuedAt: now.seconds - 5, keyID: "KEY0000001", teamID: "TEAM000001"),
            ],
            policy: policy
        )
        #expect(check(state, "bearer a", at: now) == nil)
        #expect(state.boundTeamID == "TEAM000001")
        #expect(state.boundKeyID == "KEY0000001")
        #expect(check(state, "bearer other-team", at: now) == .invalidProviderToken)
        #expect(check(state, "bearer other-key", at: now) == .unrelatedKeyIdInToken)
        #expect(check(state, "bearer same", at: now) == nil)
    }

    @Test func tokensOlderThanTheMaximumAgeAreExpired() {
        let (state, _) = makeState([
            "edge": Fixtures.identity(issuedAt: now.seconds - 3600),
            "old": Fixtures.identity(issuedAt: now.seconds - 3601),
        ])
        #expect(check(state, "bearer old", at: now) == .expiredProviderToken)
        #expect(check(state, "bearer edge", at: now) == nil)
    }

    @Test func anAcceptedTokenExpiresAsTimePasses() {
        let (state, verifier) = makeState(["good": Fixtures.identity(issuedAt: now.seconds)])
        #expect(check(state, "bearer good", at: now) == nil)
        #expect(check(state, "bearer good", at: now.adding(seconds: 3600)) == nil)
        #expect(check(state, "bearer good", at: now.adding(seconds: 3601)) == .expiredProviderToken)
        #expect(verifier.callCount == 1)
    }

    @Test func tokensFromTheFutureBeyondTheSkewAreInvalid() {
        let (state, _) = makeState([
            "soon": Fixtures.identity(issuedAt: now.seconds + 60),
            "later": Fixtures.identity(issuedAt: now.seconds + 61),
        ])
        #expect(check(state, "bearer later", at: now) == .invalidProviderToken)
        #expect(check(state, "bearer soon", at: now) == nil)
    }

    @Test func aNewTokenWithin20MinutesIsTooManyProviderTokenUpdates() {
        let (state, verifier) = makeState([
            "first": Fixtures.identity(issuedAt: now.seconds),
            "second": Fixtures.identity(issuedAt: now.seconds + 60),
        ])
        #expect(check(state, "bearer first", at: now) == nil)
        let early = now.adding(seconds: 1199)
        #expect(check(state, "bearer second", at: early) == .tooManyProviderTokenUpdates)
        #expect(check(state, "bearer second", at: early) == .tooManyProviderTokenUpdates)
        #expect(check(state, "bearer first", at: early) == nil)  // the old token keeps working
        #expect(state.tokenChangeCount == 0)
        #expect(check(state, "bearer second", at: now.adding(seconds: 1200)) == nil)
        #expect(state.tokenChangeCount == 1)
        #expect(verifier.callCount == 2)  // the refused token's verification was cached
        // Going back to the first token counts as another change.
        #expect(check(state, "bearer first", at: now.adding(seconds: 1300)) == .tooManyProviderTokenUpdates)
    }

    @Test func theRefreshRuleCanBeTurnedOff() {
        let policy = ProviderTokenPolicy(keyID: "KEYID00001", teamID: "TEAMID0001", minTokenRefreshInterval: 0)
        let (state, _) = makeState(["a": Fixtures.identity(), "b": Fixtures.identity()], policy: policy)
        #expect(check(state, "bearer a", at: now) == nil)
        #expect(check(state, "bearer b", at: now) == nil)
        #expect(state.tokenChangeCount == 1)
    }

    @Test func wedgeModeRejectsEverythingAfterAnExpiredToken() {
        var policy = SimulatorConfiguration().providerTokenPolicy
        policy.wedgeAfterExpiredToken = true
        let (state, _) = makeState(
            ["old": Fixtures.identity(issuedAt: now.seconds - 4000), "good": Fixtures.identity()], policy: policy)
        #expect(check(state, "bearer old", at: now) == .expiredProviderToken)
        #expect(state.isWedged)
        #expect(check(state, "bearer good", at: now) == .expiredProviderToken)
        #expect(check(state, nil, at: now) == .expiredProviderToken)
        state.reset()
        #expect(!state.isWedged)
        #expect(check(state, "bearer good", at: now) == nil)
    }

    @Test func withoutWedgeModeAFreshTokenWorksAfterAnExpiredOne() {
        let (state, _) = makeState([
            "old": Fixtures.identity(issuedAt: now.seconds - 4000), "good": Fixtures.identity(),
        ])
        #expect(check(state, "bearer old", at: now) == .expiredProviderToken)
        #expect(!state.isWedged)
        #expect(check(state, "bearer good", at: now) == nil)
    }

    @Test func tokensLongerThanTheCacheAreInvalid() {
        let long = String(repeating: "j", count: 300)
        let verifier = FakeVerifier([long: Fixtures.identity()])
        let state = ConnectionAuthState(
            policy: SimulatorConfiguration().providerTokenPolicy, verifier: verifier, tokenCapacity: 256)
        #expect(check(state, "bearer \(long)", at: now) == .invalidProviderToken)
        #expect(verifier.callCount == 0)
    }

    @Test func theValidatorConsultsTheConnectionState() {
        var configuration = SimulatorConfiguration()
        configuration.wedgeAfterExpiredToken = true
        let verifier = FakeVerifier([
            Fixtures.goodJWT: Fixtures.identity(),
            "old": Fixtures.identity(issuedAt: now.seconds - 7200),
        ])
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: verifier)
        var request = TestRequest.valid()
        #expect(decide(request, configuration: configuration, auth: auth) == .accept)
        request.set("authorization", "bearer old")
        #expect(
            decide(request, configuration: configuration, auth: auth) == .reject(.expiredProviderToken, timestamp: nil))
        request.set("authorization", "bearer \(Fixtures.goodJWT)")
        #expect(decide(request, configuration: configuration, auth: auth).reason == .expiredProviderToken)
    }
}

@Suite(.ownThread) struct ProviderKeyScopeCheckingTests {
    private func state(
        _ configuration: SimulatorConfiguration, _ tokens: [String: VerifiedProviderToken]
    ) -> ConnectionAuthState {
        ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: FakeVerifier(tokens))
    }

    @Test func restrictedKeysGetTheirReasonsOnceVerified() {
        var configuration = SimulatorConfiguration()
        configuration.providerKeys = [
            "SANDBOXKEY": ProviderKeyScope(environment: .sandbox),
            "OTHERAPP01": ProviderKeyScope(topics: ["com.other.app"]),
            "BOTHWRONG1": ProviderKeyScope(environment: .sandbox, topics: ["com.other.app"]),
            "GOODKEY001": ProviderKeyScope(environment: .production, topics: [Fixtures.bundle]),
        ]
        let tokens = [
            "sandbox": Fixtures.identity(keyID: "SANDBOXKEY"), "other": Fixtures.identity(keyID: "OTHERAPP01"),
            "both": Fixtures.identity(keyID: "BOTHWRONG1"), "good": Fixtures.identity(keyID: "GOODKEY001"),
            "stranger": Fixtures.identity(keyID: "STRANGER01"),
        ]
        func check(_ jwt: String, _ configuration: SimulatorConfiguration) -> APNsReason? {
            withBytes("bearer \(jwt)") { state(configuration, tokens).check(authorization: $0, now: Fixtures.now) }
        }
        #expect(check("sandbox", configuration) == .badEnvironmentKeyIdInToken)
        #expect(check("other", configuration) == .unrelatedKeyIdInToken)
        #expect(check("both", configuration) == .badEnvironmentKeyIdInToken, "the environment is checked first")
        #expect(check("good", configuration) == nil)
        #expect(check("stranger", configuration) == .invalidProviderToken, "only keyID and the keys named are accepted")
        configuration.environmentKeyReason = .badEnvironmentKeyInToken
        #expect(check("sandbox", configuration) == .badEnvironmentKeyInToken)
        configuration.environment = .sandbox
        #expect(check("sandbox", configuration) == nil)
        #expect(check("good", configuration) == .badEnvironmentKeyInToken)
    }

    @Test func aRefusedKeyIsNotVerifiedAgainOnItsConnection() {
        var configuration = SimulatorConfiguration()
        configuration.providerKeys = ["SANDBOXKEY": ProviderKeyScope(environment: .sandbox)]
        let verifier = FakeVerifier(["sandbox": Fixtures.identity(keyID: "SANDBOXKEY")])
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: verifier)
        for _ in 0..<3 {
            #expect(
                withBytes("bearer sandbox") { auth.check(authorization: $0, now: Fixtures.now) }
                    == .badEnvironmentKeyIdInToken)
        }
        #expect(verifier.callCount == 1)
    }
}

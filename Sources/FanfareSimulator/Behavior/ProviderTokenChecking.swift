import FanfareCore

/// What a signature check learned from a provider token (JWT).
public struct VerifiedProviderToken: Sendable, Equatable {
    /// JOSE header `kid`.
    public var keyID: String
    /// Claim `iss` (the 10-character team ID).
    public var teamID: String
    /// Claim `iat`, UNIX seconds.
    public var issuedAt: Int64
    /// `iat` was a decimal string rather than a JSON number (APNs accepts both; see
    /// `ProviderTokenPolicy.requireNumericIssuedAt`).
    public var issuedAtIsString: Bool

    public init(keyID: String, teamID: String, issuedAt: Int64, issuedAtIsString: Bool = false) {
        self.keyID = keyID
        self.teamID = teamID
        self.issuedAt = issuedAt
        self.issuedAtIsString = issuedAtIsString
    }
}

/// Checks a JWT's ES256 signature and decodes `kid`, `iss`, `iat`. The crypto lives elsewhere (FanfareTLS);
/// the rules about what a valid token may do live in `ConnectionAuthState`.
public protocol ProviderTokenVerifying: Sendable {
    /// The token's identity, or nil for a malformed token or a bad signature.
    func verify(jwt: UnsafeRawBufferPointer) -> VerifiedProviderToken?
}

/// What a `ProviderTokenPolicy` knows of one provider key (2025 keys, apns-spec.md §6.1).
public struct ProviderKeyRule: Sendable, Equatable {
    public var keyID: String
    /// The team its tokens must name (`iss`); nil: the policy's `teamID` decides.
    public var teamID: String?
    /// Why the key cannot be used here at all once its token verifies: `BadEnvironmentKeyIdInToken` (or
    /// `BadEnvironmentKeyInToken`) for a key restricted to the other environment; nil: usable.
    public var rejection: APNsReason?
    /// Why it may not sign for an app, by the app's index (`SimulatorConfiguration.servedBundleIDs`): a topic-specific
    /// key without the app's topic, a team key of another team. A nil entry, or an index past the end: allowed.
    public var appRejections: [APNsReason?]

    public init(keyID: String, teamID: String? = nil, rejection: APNsReason? = nil, appRejections: [APNsReason?] = []) {
        self.keyID = keyID
        self.teamID = teamID
        self.rejection = rejection
        self.appRejections = appRejections
    }
}

/// The JWT rules (apns-spec.md §6.1, §10), independent of crypto.
public struct ProviderTokenPolicy: Sendable, Equatable {
    /// The only `kid` accepted besides `keys`; nil accepts any key the verifier accepts unless
    /// `acceptsOnlyKnownKeys` (the connection still binds to the first one — a different key later gets
    /// `UnrelatedKeyIdInToken`).
    public var keyID: String?
    /// The only `iss` accepted for a key without a team of its own; nil accepts any team (the connection still binds
    /// to the first one).
    public var teamID: String?
    /// `iat` older than this many seconds → 403 `ExpiredProviderToken`. APNs: one hour.
    public var tokenMaxAge: Int64
    /// `iat` further than this many seconds in the future → 403 `InvalidProviderToken` [U: APNs' skew
    /// tolerance is undocumented].
    public var maxClockSkew: Int64
    /// A new token on a connection less than this many seconds after the previous token change →
    /// 429 `TooManyProviderTokenUpdates`. APNs: 20 minutes. 0 turns the rule off.
    public var minTokenRefreshInterval: Int64
    /// After an `ExpiredProviderToken`, every later request on the connection gets it too (the "wedged"
    /// connection pushy reports), so clients must reconnect.
    public var wedgeAfterExpiredToken: Bool
    /// Only a JSON number is a valid `iat` (RFC 7519's NumericDate): a decimal string → `InvalidProviderToken`.
    /// Off by default because APNs accepts the string (APNSwift sends `"iat":"1700000000"` in production).
    public var requireNumericIssuedAt: Bool
    /// Keys accepted besides `keyID`, with their team, environment and apps (the keys the simulator was told about:
    /// `providerKeys`, or the apps' keys). A `kid` listed twice: the first rule counts.
    public var keys: [ProviderKeyRule]
    /// Only `keyID` and `keys` are accepted even when `keyID` is nil (with apps: the apps' keys and no other).
    public var acceptsOnlyKnownKeys: Bool

    public init(
        keyID: String? = nil,
        teamID: String? = nil,
        tokenMaxAge: Int64 = 3600,
        maxClockSkew: Int64 = 60,
        minTokenRefreshInterval: Int64 = 1200,
        wedgeAfterExpiredToken: Bool = false,
        requireNumericIssuedAt: Bool = false,
        keys: [ProviderKeyRule] = [],
        acceptsOnlyKnownKeys: Bool = false
    ) {
        self.keys = keys
        self.acceptsOnlyKnownKeys = acceptsOnlyKnownKeys
        self.keyID = keyID
        self.teamID = teamID
        self.tokenMaxAge = tokenMaxAge
        self.maxClockSkew = maxClockSkew
        self.minTokenRefreshInterval = minTokenRefreshInterval
        self.wedgeAfterExpiredToken = wedgeAfterExpiredToken
        self.requireNumericIssuedAt = requireNumericIssuedAt
    }

    /// The index in `keys` of `keyID`'s rule, or nil.
    func ruleIndex(of keyID: String) -> Int? { keys.firstIndex { $0.keyID == keyID } }
}

/// The provider-token state of one HTTP/2 connection. Owned by the connection's worker thread; not
/// thread-safe.
///
/// Rules, checked in this order for each request:
/// 1. The connection is wedged (an earlier `ExpiredProviderToken` with `wedgeAfterExpiredToken`)
///    → `ExpiredProviderToken`.
/// 2. `authorization` absent, empty, not `bearer <jwt>` (scheme case-insensitive), or an empty JWT
///    → `MissingProviderToken`.
/// 3. The same bytes as the connection's current token: skip verification (the expensive ES256 check runs
///    once per distinct token per connection), go to 5b, then 8.
/// 4. The same bytes as the last other token seen: reuse its verification result instead of verifying
///    again (a rejected token stays rejected; a verified one goes through 6–9 again, time may have passed).
/// 5. Verification fails, the JWT is longer than the cache (`tokenCapacity`), `kid` is neither the configured
///    key nor one of `keys` (unless any key goes), `iss` not the key's team (or the configured team), or `iat` is
///    a string while `requireNumericIssuedAt` → `InvalidProviderToken`.
/// 5a. `kid` is a key the policy refuses here (`ProviderKeyRule.rejection`: another environment's key)
///    → its reason (`BadEnvironmentKeyIdInToken`).
/// 5b. `kid` may not sign for the request's app (`ProviderKeyRule.appRejections`: a topic-specific key without
///    the app's topic, a team key of another team) → its reason (`UnrelatedKeyIdInToken`,
///    `InvalidProviderToken`). Checked on every request, as one token may serve several apps.
/// 6. `iss` differs from the team the connection is bound to → `InvalidProviderToken` [U: Apple only says
///    tokens from several developer accounts on one connection are not supported]; `kid` differs from the
///    bound key → `UnrelatedKeyIdInToken` [A: "to use that key, open a new connection"]. Kept since 2025:
///    APNs binds a connection to the first token's key *family* (a topic-specific key and its one related
///    key); the simulator knows no key relations, so every other key is unrelated (§6.1).
/// 7. `iat` more than `maxClockSkew` in the future → `InvalidProviderToken`.
/// 8. `now - iat > tokenMaxAge` → `ExpiredProviderToken` (and wedge the connection if configured).
/// 9. A new token less than `minTokenRefreshInterval` after the connection's previous token change
///    → `TooManyProviderTokenUpdates`; the previous token stays current. The first token on a connection
///    is not an update.
/// 10. Accept: a new token becomes current, its time is the last token change, and the first accepted
///    token binds the connection's team and key.
public final class ConnectionAuthState {
    public let policy: ProviderTokenPolicy
    private let verifier: any ProviderTokenVerifying
    /// Longest JWT the connection caches; longer tokens are rejected (ES256 JWTs are ~200 bytes).
    public let tokenCapacity: Int

    // Mutable state is `@exclusivity(unchecked)`: the object belongs to one connection on one thread, and
    // the dynamic exclusivity check on class properties costs a thread-local lookup per access per request.

    // Two token buffers, allocated once: the connection's current token and the last other token seen
    // (with its verification result), so a repeated new token — say one refused as a too-early update —
    // is not verified again. Accepting the candidate swaps the buffers.
    @exclusivity(unchecked) private var currentToken: UnsafeMutableRawBufferPointer
    @exclusivity(unchecked) private var currentTokenCount = 0
    @exclusivity(unchecked) private var current: VerifiedProviderToken?
    /// `current?.issuedAt`, kept apart so the per-request path copies no Strings.
    @exclusivity(unchecked) private var currentIssuedAt: Int64 = 0
    @exclusivity(unchecked) private var lastTokenChange = SimulatorInstant(nanosecondsSinceEpoch: 0)

    @exclusivity(unchecked) private var candidateToken: UnsafeMutableRawBufferPointer
    @exclusivity(unchecked) private var candidateTokenCount = 0
    /// The candidate's identity; nil when it failed verification or the key/team policy.
    @exclusivity(unchecked) private var candidate: VerifiedProviderToken?
    /// Why the candidate was refused (when `candidate` is nil).
    @exclusivity(unchecked) private var candidateRejection = APNsReason.invalidProviderToken
    /// The policy's rule of the current and the candidate token's key (an index in `policy.keys`), or -1.
    @exclusivity(unchecked) private var currentRule = -1
    @exclusivity(unchecked) private var candidateRule = -1
    /// `policy.keys[rule].appRejections[app]` at `rule * appCount + app`, flattened once: read on every request.
    private let appRejections: [APNsReason?]
    private let appCount: Int

    /// The team and key bound at the first accepted token.
    @exclusivity(unchecked) public private(set) var boundTeamID: String?
    @exclusivity(unchecked) public private(set) var boundKeyID: String?
    /// Set after an `ExpiredProviderToken` when the policy wedges connections.
    @exclusivity(unchecked) public private(set) var isWedged = false
    /// How many times the verifier ran on this connection (the cache's effect is observable).
    @exclusivity(unchecked) public private(set) var verificationCount = 0
    /// How many times the current token was replaced by a different one.
    @exclusivity(unchecked) public private(set) var tokenChangeCount = 0

    public init(policy: ProviderTokenPolicy, verifier: any ProviderTokenVerifying, tokenCapacity: Int = 2048) {
        precondition(tokenCapacity > 0, "token capacity must be positive")
        self.policy = policy
        self.verifier = verifier
        self.tokenCapacity = tokenCapacity
        let appCount = policy.keys.map(\.appRejections.count).max() ?? 0
        self.appCount = appCount
        appRejections = policy.keys.flatMap { rule in
            rule.appRejections + [APNsReason?](repeating: nil, count: appCount - rule.appRejections.count)
        }
        currentToken = .allocate(byteCount: tokenCapacity, alignment: 8)
        candidateToken = .allocate(byteCount: tokenCapacity, alignment: 8)
    }

    deinit {
        currentToken.deallocate()
        candidateToken.deallocate()
    }

    /// Forgets everything so the object can serve a new connection.
    public func reset() {
        currentTokenCount = 0
        current = nil
        currentIssuedAt = 0
        lastTokenChange = SimulatorInstant(nanosecondsSinceEpoch: 0)
        candidateTokenCount = 0
        candidate = nil
        currentRule = -1
        candidateRule = -1
        boundTeamID = nil
        boundKeyID = nil
        isWedged = false
        verificationCount = 0
        tokenChangeCount = 0
    }

    /// The identity of the token currently accepted on this connection.
    public var currentIdentity: VerifiedProviderToken? { current }

    /// Checks one request's `authorization` header value for a request to app `app` (its index in
    /// `SimulatorConfiguration.servedBundleIDs`; 0 with one app); nil means authorised.
    public func check(authorization: HeaderValue, app: Int = 0, now: SimulatorInstant) -> APNsReason? {
        switch authorization {
        case .absent:
            return isWedged ? .expiredProviderToken : .missingProviderToken
        case .oversized:
            return isWedged ? .expiredProviderToken : .invalidProviderToken
        case .present(let bytes):
            return check(authorization: bytes, app: app, now: now)
        }
    }

    /// Checks one request's `authorization` header value (nil when absent) for a request to app `app`; nil means
    /// authorised.
    public func check(authorization: UnsafeRawBufferPointer?, app: Int = 0, now: SimulatorInstant) -> APNsReason? {
        if isWedged { return .expiredProviderToken }
        guard let authorization, let jwt = Self.bearerToken(authorization) else { return .missingProviderToken }

        if currentTokenCount > 0,
            jwt.equals(UnsafeRawBufferPointer(currentToken).slice(from: 0, count: currentTokenCount))
        {
            assert(current != nil)
            if let reason = appRejection(rule: currentRule, app: app) { return reason }
            return checkAge(issuedAt: currentIssuedAt, now: now)
        }

        let identity: VerifiedProviderToken
        if candidateTokenCount > 0,
            jwt.equals(UnsafeRawBufferPointer(candidateToken).slice(from: 0, count: candidateTokenCount))
        {
            guard let candidate else { return candidateRejection }
            identity = candidate
        } else {
            guard jwt.count <= tokenCapacity else { return .invalidProviderToken }
            guard let verified = verifyCandidate(jwt) else { return candidateRejection }
            identity = verified
        }

        if let reason = appRejection(rule: candidateRule, app: app) { return reason }
        if let boundTeamID, identity.teamID != boundTeamID { return .invalidProviderToken }
        if let boundKeyID, identity.keyID != boundKeyID { return .unrelatedKeyIdInToken }
        if identity.issuedAt > now.seconds + policy.maxClockSkew { return .invalidProviderToken }
        if let reason = checkAge(issuedAt: identity.issuedAt, now: now) { return reason }
        if current != nil, policy.minTokenRefreshInterval > 0,
            now.nanosecondsSinceEpoch - lastTokenChange.nanosecondsSinceEpoch
                < policy.minTokenRefreshInterval * 1_000_000_000
        {
            return .tooManyProviderTokenUpdates
        }

        // Accept: the candidate becomes current (swap buffers, no copy).
        if current != nil { tokenChangeCount += 1 }
        swap(&currentToken, &candidateToken)
        currentTokenCount = candidateTokenCount
        current = identity
        currentIssuedAt = identity.issuedAt
        currentRule = candidateRule
        candidateTokenCount = 0
        candidate = nil
        lastTokenChange = now
        if boundTeamID == nil {
            boundTeamID = identity.teamID
            boundKeyID = identity.keyID
        }
        return nil
    }

    /// Verifies a token not seen last (rules 5, 5a) and keeps it as the candidate with its result: its identity,
    /// or nil and why (`candidateRejection`).
    private func verifyCandidate(_ jwt: UnsafeRawBufferPointer) -> VerifiedProviderToken? {
        verificationCount += 1
        var verified = verifier.verify(jwt: jwt)
        var rejection = APNsReason.invalidProviderToken
        var rule = -1
        if let token = verified {
            rule = policy.ruleIndex(of: token.keyID) ?? -1
            if !isAllowedByPolicy(token, rule: rule) {
                verified = nil
            } else if rule >= 0, let reason = policy.keys[rule].rejection {
                verified = nil
                rejection = reason
            }
        }
        remember(jwt, in: candidateToken, count: &candidateTokenCount)
        candidate = verified
        candidateRejection = rejection
        candidateRule = rule
        return verified
    }

    /// Rule 5b: why the key of `rule` may not sign for `app`, if it may not.
    @inline(__always)
    private func appRejection(rule: Int, app: Int) -> APNsReason? {
        guard rule >= 0, app >= 0, app < appCount else { return nil }
        return appRejections[rule * appCount + app]
    }

    private func isAllowedByPolicy(_ identity: VerifiedProviderToken, rule: Int) -> Bool {
        if rule < 0 {
            if let keyID = policy.keyID {
                if identity.keyID != keyID { return false }
            } else if policy.acceptsOnlyKnownKeys {
                return false
            }
        }
        if let teamID = (rule >= 0 ? policy.keys[rule].teamID : nil) ?? policy.teamID, identity.teamID != teamID {
            return false
        }
        if policy.requireNumericIssuedAt && identity.issuedAtIsString { return false }
        return true
    }

    private func checkAge(issuedAt: Int64, now: SimulatorInstant) -> APNsReason? {
        guard now.seconds - issuedAt > policy.tokenMaxAge else { return nil }
        if policy.wedgeAfterExpiredToken { isWedged = true }
        return .expiredProviderToken
    }

    private func remember(_ jwt: UnsafeRawBufferPointer, in buffer: UnsafeMutableRawBufferPointer, count: inout Int) {
        precondition(jwt.count <= buffer.count, "token longer than the cache")
        if jwt.count > 0 { buffer.baseAddress!.copyMemory(from: jwt.baseAddress!, byteCount: jwt.count) }
        count = jwt.count
    }

    /// The JWT in `bearer <jwt>` (scheme matched case-insensitively, as HTTP auth schemes are), or nil.
    static func bearerToken(_ authorization: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
        let scheme: StaticString = "bearer "
        let schemeLength = scheme.utf8CodeUnitCount
        guard authorization.count > schemeLength else { return nil }
        let matches = scheme.withUTF8Buffer { text in
            var index = 0
            while index < schemeLength {
                if ASCII.lowercased(authorization[index]) != text[index] { return false }
                index += 1
            }
            return true
        }
        guard matches else { return nil }
        return authorization.suffix(from: schemeLength)
    }
}

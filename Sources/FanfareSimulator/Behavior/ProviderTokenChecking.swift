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

/// The JWT rules (apns-spec.md §6.1, §10), independent of crypto.
public struct ProviderTokenPolicy: Sendable, Equatable {
    /// The only `kid` accepted; nil accepts any key the verifier accepts (the connection still binds to
    /// the first one — a different key later gets `UnrelatedKeyIdInToken`).
    public var keyID: String?
    /// The only `iss` accepted; nil accepts any team (the connection still binds to the first one).
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
    /// Keys that verify but may not be used here (2025 keys, apns-spec.md §6.1), with their 403:
    /// `BadEnvironmentKeyIdInToken` / `BadEnvironmentKeyInToken` for a key of the other environment,
    /// `UnrelatedKeyIdInToken` for a topic-specific key without this app. Keys named here are accepted
    /// besides `keyID`.
    public var keyRejections: [String: APNsReason]
    /// Keys accepted besides `keyID` (the keys the simulator was told about, `providerKeys`).
    public var additionalKeyIDs: Set<String>

    public init(
        keyID: String? = nil,
        teamID: String? = nil,
        tokenMaxAge: Int64 = 3600,
        maxClockSkew: Int64 = 60,
        minTokenRefreshInterval: Int64 = 1200,
        wedgeAfterExpiredToken: Bool = false,
        requireNumericIssuedAt: Bool = false,
        keyRejections: [String: APNsReason] = [:],
        additionalKeyIDs: Set<String> = []
    ) {
        self.keyRejections = keyRejections
        self.additionalKeyIDs = additionalKeyIDs.union(keyRejections.keys)
        self.keyID = keyID
        self.teamID = teamID
        self.tokenMaxAge = tokenMaxAge
        self.maxClockSkew = maxClockSkew
        self.minTokenRefreshInterval = minTokenRefreshInterval
        self.wedgeAfterExpiredToken = wedgeAfterExpiredToken
        self.requireNumericIssuedAt = requireNumericIssuedAt
    }
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
///    once per distinct token per connection), go to 8.
/// 4. The same bytes as the last other token seen: reuse its verification result instead of verifying
///    again (a rejected token stays rejected; a verified one goes through 6–9 again, time may have passed).
/// 5. Verification fails, the JWT is longer than the cache (`tokenCapacity`), `kid` is not the configured
///    key, `iss` not the configured team, or `iat` is a string while `requireNumericIssuedAt`
///    → `InvalidProviderToken`.
/// 5a. `kid` is a key the policy restricts (`keyRejections`: another environment's key, a topic-specific key
///    without this app) → its reason (`BadEnvironmentKeyIdInToken` or `UnrelatedKeyIdInToken`).
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
        boundTeamID = nil
        boundKeyID = nil
        isWedged = false
        verificationCount = 0
        tokenChangeCount = 0
    }

    /// The identity of the token currently accepted on this connection.
    public var currentIdentity: VerifiedProviderToken? { current }

    /// Checks one request's `authorization` header value; nil means authorised.
    public func check(authorization: HeaderValue, now: SimulatorInstant) -> APNsReason? {
        switch authorization {
        case .absent:
            return isWedged ? .expiredProviderToken : .missingProviderToken
        case .oversized:
            return isWedged ? .expiredProviderToken : .invalidProviderToken
        case .present(let bytes):
            return check(authorization: bytes, now: now)
        }
    }

    /// Checks one request's `authorization` header value (nil when absent); nil means authorised.
    public func check(authorization: UnsafeRawBufferPointer?, now: SimulatorInstant) -> APNsReason? {
        if isWedged { return .expiredProviderToken }
        guard let authorization, let jwt = Self.bearerToken(authorization) else { return .missingProviderToken }

        if currentTokenCount > 0,
            jwt.equals(UnsafeRawBufferPointer(currentToken).slice(from: 0, count: currentTokenCount))
        {
            assert(current != nil)
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
            verificationCount += 1
            var verified = verifier.verify(jwt: jwt)
            var rejection = APNsReason.invalidProviderToken
            if let token = verified {
                if !isAllowedByPolicy(token) {
                    verified = nil
                } else if let reason = policy.keyRejections[token.keyID] {
                    verified = nil
                    rejection = reason
                }
            }
            remember(jwt, in: candidateToken, count: &candidateTokenCount)
            candidate = verified
            candidateRejection = rejection
            guard let verified else { return rejection }
            identity = verified
        }

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
        candidateTokenCount = 0
        candidate = nil
        lastTokenChange = now
        if boundTeamID == nil {
            boundTeamID = identity.teamID
            boundKeyID = identity.keyID
        }
        return nil
    }

    private func isAllowedByPolicy(_ identity: VerifiedProviderToken) -> Bool {
        if let keyID = policy.keyID, identity.keyID != keyID, !policy.additionalKeyIDs.contains(identity.keyID) {
            return false
        }
        if let teamID = policy.teamID, identity.teamID != teamID { return false }
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

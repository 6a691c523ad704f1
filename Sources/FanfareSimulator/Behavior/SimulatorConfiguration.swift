import FanfareCore

/// A configuration value that cannot work, with what to change.
public enum SimulatorConfigurationError: Error, Equatable, CustomStringConvertible {
    case invalid(field: String, problem: String)
    case badFaultRule(String)
    case unknownFaultReason(String)
    /// `text` does not follow `expected` (`what` names the setting).
    case badSpelling(what: String, text: String, expected: String)

    public var description: String {
        switch self {
        case .invalid(let field, let problem):
            "simulator configuration: \(field): \(problem)"
        case .badFaultRule(let text):
            "fault rule '\(text)' is not 'Reason:probability' with a probability between 0 and 1 (e.g. TooManyRequests:0.01)"
        case .unknownFaultReason(let name):
            "fault reason '\(name)' is not an APNs reason string (e.g. TooManyRequests, Unregistered, InternalServerError)"
        case .badSpelling(let what, let text, let expected):
            "\(what) '\(text)' is not \(expected)"
        }
    }
}

/// Every knob of `fanfare simulate` that changes what the simulated APNs answers. Defaults emulate
/// production APNs as described in apns-spec.md (§1.2–1.5, §2, §3.4, §6.1, §7, §10).
public struct SimulatorConfiguration: Sendable, Equatable {
    /// Which APNs environment the simulator plays.
    public enum Environment: String, Sendable, CaseIterable {
        /// `api.push.apple.com`.
        case production
        /// `api.sandbox.push.apple.com`: 200 responses also carry `apns-unique-id`.
        case sandbox
    }

    /// What a well-formed token outside `knownTokens` gets.
    public enum UnknownTokenReply: String, Sendable, CaseIterable {
        /// 410 `Unregistered` with a `timestamp` (the token was valid once; the app is gone).
        case unregistered
        /// 400 `BadDeviceToken` (never valid here, e.g. a sandbox token sent to production).
        case badDeviceToken

        public var reason: APNsReason {
            switch self {
            case .unregistered: .unregistered
            case .badDeviceToken: .badDeviceToken
            }
        }
    }

    // MARK: Identity

    /// The app: valid topics are this ID alone or with a push-type suffix (`.push-type.liveactivity`, …).
    /// Not used when `apps` lists apps.
    public var bundleID = "com.example.fanfare"
    /// The only JWT `iss` accepted; nil accepts any team (a connection still binds to its first team).
    /// Not used when `apps` lists apps (each key has its team).
    public var teamID: String? = "TEAMID0001"
    /// The only JWT `kid` accepted (besides `providerKeys`); nil accepts any key the verifier accepts.
    /// Not used when `apps` lists apps.
    public var keyID: String? = "KEYID00001"
    /// Production or sandbox (sandbox adds `apns-unique-id` to 200s). `APNsSimulator` plays sandbox on its second
    /// listener (`Options.sandboxListen`) with a copy of this configuration.
    public var environment = Environment.production
    /// Several apps, each with the provider keys listed for it (`fanfare simulate --apps FILE`): a topic must be one
    /// of theirs (else 400 `TopicDisallowed`), a token must name one of their keys (else 403
    /// `InvalidProviderToken`) with that key's team, allowed in this environment (else 403
    /// `BadEnvironmentKeyIdInToken`) and for the topic (`SimulatedProviderKey.rejection(for:listedByApp:)`).
    /// Empty: the one app `bundleID`, `teamID`, `keyID` and `providerKeys` describe.
    public var apps: [SimulatedApp] = []
    /// Tokens whose hex starts with this prefix (any case) are sandbox tokens, all others production tokens; a
    /// token sent to the other environment gets 400 `BadDeviceToken`, as APNs answers it (apns-spec.md §7.4).
    /// nil: every token belongs to the environment it is sent to.
    public var sandboxTokenPrefix: String? = nil

    // MARK: HTTP/2 SETTINGS and connection behaviour (apns-spec.md §1.3, §10)

    /// `SETTINGS_MAX_CONCURRENT_STREAMS` on a new connection: APNs allows one stream until a push with a
    /// valid provider token succeeds.
    public var initialMaxConcurrentStreams = 1
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` after the first accepted push (observed 500, 1000, 1500).
    public var maxConcurrentStreams = 1000
    /// Chaos mode seen in 2016–2020: a rejected push drops the stream limit to 1; the next 200 restores it.
    public var dropStreamsToOneAfterRejection = false
    /// `SETTINGS_HEADER_TABLE_SIZE` (HPACK dynamic table).
    public var headerTableSize = 4096
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`.
    public var maxHeaderListSize = 8000
    /// `SETTINGS_INITIAL_WINDOW_SIZE`.
    public var initialWindowSize = 65535
    /// `SETTINGS_MAX_FRAME_SIZE`.
    public var maxFrameSize = 16384
    /// Send GOAWAY on a connection after this many streams (tests client reconnection); nil = never.
    public var goAwayAfterStreams: Int? = nil

    // MARK: Timing and failures

    /// Delay before each response.
    public var latency = LatencyModel.none
    /// Tokens (hex, any case) that exist; nil = every well-formed token exists.
    public var knownTokens: Set<String>? = nil
    /// What a well-formed token outside `knownTokens` gets.
    public var unknownTokenReply = UnknownTokenReply.unregistered
    /// Tokens whose hex starts with a rule's prefix get its reason (checked with `knownTokens`): a
    /// deterministic way to see a 410 or a 400 (`fanfare serve --simulator` answers tokens starting with `0410`
    /// with 410 `Unregistered`, `0400` with 400 `BadDeviceToken`).
    public var tokenPrefixReplies: [TokenPrefixReply] = []
    /// Failures injected into otherwise valid pushes, drawn from the seeded PRNG.
    public var faults: [FaultRule] = []
    /// Pushes per token per one-second window before 429 `TooManyRequests`; 0 = no limit. Counted per
    /// worker thread (each worker keeps its own table), over fixed one-second windows.
    public var perTokenRateLimit = 0
    /// Share of new streams (0...1) reset with RST_STREAM `REFUSED_STREAM` before anything of them is read:
    /// never processed, so a client may resend them anywhere (RFC 9113 §8.7).
    public var refusedStreamProbability = 0.0
    /// Faults that switch on for a window of requests or time (429 / 500 / 503 bursts).
    public var faultBursts: [FaultBurst] = []
    /// Connections reset abruptly (TCP RST) after some requests, with requests in flight; nil = never.
    public var connectionReset: ConnectionResetRule? = nil
    /// Responses held back (decided at once, answered late), e.g. past a client's deadline; nil = never.
    public var heldResponses: HeldResponseRule? = nil
    /// Slots in each worker's per-token rate table (tokens tracked within one second); a power of two.
    /// When full, further tokens in that second are not limited (counted in `rateLimiterOverflows`).
    public var perTokenRateTableCapacity = 1 << 16

    // MARK: Payload (apns-spec.md §3.4)

    /// Body limit for token pushes (413 `PayloadTooLarge` above it).
    public var maxPayloadBytes = 4096
    /// Body limit for `apns-push-type: voip`.
    public var voipMaxPayloadBytes = 5120
    /// Body limit for broadcast pushes.
    public var broadcastMaxPayloadBytes = 5120
    /// Reason for a body that is not a JSON object with an `aps` object on `/3/device`; nil skips the check
    /// (pushy's mock does not check). [U] Apple documents no device-push reason for malformed JSON; the
    /// default `PayloadEmpty` is the closest documented one. Broadcast pushes get `BadRequestPayload`
    /// (documented for broadcast) whenever this check is on.
    public var malformedPayloadReason: APNsReason? = .payloadEmpty

    // MARK: Provider tokens (apns-spec.md §6.1)

    /// `iat` older than this (seconds) → 403 `ExpiredProviderToken`.
    public var tokenMaxAge: Int64 = 3600
    /// `iat` this far (seconds) in the future is still accepted; beyond → `InvalidProviderToken`.
    public var maxTokenClockSkew: Int64 = 60
    /// A new JWT on one connection sooner than this (seconds) after the last change → 429
    /// `TooManyProviderTokenUpdates`; 0 = off.
    public var minTokenRefreshInterval: Int64 = 1200
    /// After `ExpiredProviderToken`, reject everything on that connection with it.
    public var wedgeAfterExpiredToken = false
    /// Read provider-token claims the strict RFC 7519 way: `iat` must be a JSON number. Off by default, as
    /// APNs accepts a decimal string (`"iat":"1700000000"`, sent by APNSwift); an extra `kid` claim and other
    /// members are ignored either way.
    public var strictProviderToken = false

    // MARK: Strictness switches for undocumented behaviour

    /// An absent `apns-push-type` → `InvalidPushType` [U: Apple calls it required only on watchOS, but a
    /// Live Activity push without it is a sender bug]. When false, the push type is inferred from the topic.
    public var requirePushType = true
    /// `apns-id` must be lowercase hex [U: Apple documents lowercase; uppercase is widely sent and accepted].
    public var requireLowercaseMessageID = false
    /// Serve `/4/broadcasts/apps/<bundle>`; when false that path is 404 `BadPath`.
    public var acceptBroadcasts = true

    // MARK: Broadcast channels (apns-spec.md §8)

    /// Channels one app may have in one environment; one more → 400 `CannotCreateChannelConfig`. APNs: 10,000.
    public var maxChannelsPerApp = 10_000
    /// What a broadcast whose `aps.event` is `start` gets (broadcast cannot start an activity, §8.3); nil
    /// accepts it. [U] Apple names no reason for it; the default `BadRequestPayload` is §7.5's reason for a
    /// payload the broadcast endpoint cannot take (`BadRequestParams` is documented for the management API's
    /// attributes, `InvalidPushType` for the header).
    public var broadcastStartEventReason: APNsReason? = .badRequestPayload

    // MARK: Provider keys since 2025 (apns-spec.md §6.1)

    /// What the simulator knows of particular keys (by `kid`): the environment a team-scoped key is
    /// restricted to, the topics (bundle IDs) of a topic-specific key. A key named here is accepted besides
    /// `keyID` (it must verify with the same public key). Keys not named here work everywhere. Not used when
    /// `apps` lists apps (their keys carry their scopes).
    public var providerKeys: [String: ProviderKeyScope] = [:]
    /// The reason for a key restricted to the other environment: `BadEnvironmentKeyIdInToken` (default) or
    /// `BadEnvironmentKeyInToken` [U: both spellings are seen].
    public var environmentKeyReason = APNsReason.badEnvironmentKeyIdInToken

    // MARK: Output and determinism

    /// JSON-lines log of accepted pushes (one file shared by all workers, whole-line appends); nil = off.
    public var acceptedLogPath: String? = nil
    /// Seed of every worker's PRNG (faults, latency); worker i uses stream i.
    public var seed: UInt64 = 0x00FA_FA4E
    /// Header-value bytes each stream slot keeps (`RequestHead` arena).
    public var requestHeadArenaBytes = RequestHead.defaultArenaCapacity

    public init() {}

    /// The JWT rules for `ConnectionAuthState`, in `environment`.
    public var providerTokenPolicy: ProviderTokenPolicy {
        ProviderTokenPolicy(
            keyID: apps.isEmpty ? keyID : nil,
            teamID: apps.isEmpty ? teamID : nil,
            tokenMaxAge: tokenMaxAge,
            maxClockSkew: maxTokenClockSkew,
            minTokenRefreshInterval: minTokenRefreshInterval,
            wedgeAfterExpiredToken: wedgeAfterExpiredToken,
            requireNumericIssuedAt: strictProviderToken,
            keys: providerKeyRules,
            acceptsOnlyKnownKeys: !apps.isEmpty
        )
    }

    /// Body bytes a `RequestHead` must keep to check every limit (largest limit + 1).
    public var requestBodyCapacity: Int {
        max(maxPayloadBytes, voipMaxPayloadBytes, broadcastMaxPayloadBytes) + 1
    }

    /// Throws the first setting that cannot work.
    public func validate() throws(SimulatorConfigurationError) {
        let bundleBytes = Array(bundleID.utf8)
        let bundleIsValid = bundleBytes.withUnsafeBytes { HeaderSyntax.isTopicSyntax($0) }
        try Self.require(bundleIsValid, "bundleID", "'\(bundleID)' must be non-empty and use only A-Z a-z 0-9 . -")
        try Self.require(bundleBytes.count <= 255, "bundleID", "must be at most 255 bytes")
        try validateHTTP2Settings()
        try validateFaults()
        try validateRequestLimits()
        try validateAuthenticationAndReplies()
        try validateApps()
    }

    /// What the server advertises in SETTINGS, and when it sends GOAWAY.
    private func validateHTTP2Settings() throws(SimulatorConfigurationError) {
        try Self.require(initialMaxConcurrentStreams >= 1, "initialMaxConcurrentStreams", "must be at least 1")
        try Self.require(
            maxConcurrentStreams >= initialMaxConcurrentStreams, "maxConcurrentStreams",
            "must be at least initialMaxConcurrentStreams (\(initialMaxConcurrentStreams))")
        // Each connection keeps a response queue of this size.
        try Self.require(maxConcurrentStreams <= 1 << 20, "maxConcurrentStreams", "must be at most \(1 << 20)")
        try Self.require(
            headerTableSize >= 0 && headerTableSize <= Int(UInt32.max), "headerTableSize", "must be in 0...2^32-1")
        try Self.require(
            maxHeaderListSize > 0 && maxHeaderListSize <= Int(UInt32.max), "maxHeaderListSize", "must be in 1...2^32-1")
        try Self.require(
            initialWindowSize > 0 && initialWindowSize <= Int(Int32.max), "initialWindowSize", "must be in 1...2^31-1")
        try Self.require(
            maxFrameSize >= 16384 && maxFrameSize <= 16_777_215, "maxFrameSize",
            "must be in 16384...16777215 (RFC 9113)")
        if let goAwayAfterStreams {
            try Self.require(goAwayAfterStreams >= 1, "goAwayAfterStreams", "must be at least 1 (or unset)")
        }
    }

    /// Latency and the faults drawn at random: each probability in 0...1, the faults' together at most 1.
    private func validateFaults() throws(SimulatorConfigurationError) {
        if let problem = latency.problem { throw .invalid(field: "latency", problem: problem) }
        var total = 0.0
        for rule in faults {
            try Self.require(
                rule.probability >= 0 && rule.probability <= 1, "faults",
                "probability of \(rule.reason.rawValue) must be in 0...1")
            total += rule.probability
        }
        try Self.require(
            total <= 1.000_000_1, "faults", "probabilities add up to \(total); they must add up to at most 1")
        try Self.require(
            refusedStreamProbability >= 0 && refusedStreamProbability <= 1, "refusedStreamProbability",
            "must be in 0...1")
        for burst in faultBursts {
            if let problem = burst.problem { throw .invalid(field: "faultBursts", problem: "\(burst): \(problem)") }
        }
        if let connectionReset {
            try Self.require(
                connectionReset.probability >= 0 && connectionReset.probability <= 1, "connectionReset",
                "probability must be in 0...1")
            try Self.require(connectionReset.afterRequests >= 1, "connectionReset", "afterRequests must be at least 1")
        }
        if let heldResponses {
            try Self.require(
                heldResponses.probability >= 0 && heldResponses.probability <= 1, "heldResponses",
                "probability must be in 0...1")
            try Self.require(heldResponses.delayNanoseconds > 0, "heldResponses", "delay must be positive")
        }
    }

    private func validateRequestLimits() throws(SimulatorConfigurationError) {
        try Self.require(perTokenRateLimit >= 0, "perTokenRateLimit", "must not be negative (0 turns it off)")
        try Self.require(
            perTokenRateTableCapacity > 0 && perTokenRateTableCapacity & (perTokenRateTableCapacity - 1) == 0,
            "perTokenRateTableCapacity", "must be a power of two")
        try Self.require(
            maxPayloadBytes > 0 && voipMaxPayloadBytes > 0 && broadcastMaxPayloadBytes > 0,
            "maxPayloadBytes", "payload limits must be positive")
    }

    /// Provider tokens and keys, and the replies set for some requests. The request head's arena and the channels
    /// per app are checked among them so that the first bad setting reported stays the one it always was.
    private func validateAuthenticationAndReplies() throws(SimulatorConfigurationError) {
        try Self.require(tokenMaxAge > 0, "tokenMaxAge", "must be positive")
        try Self.require(maxTokenClockSkew >= 0, "maxTokenClockSkew", "must not be negative")
        try Self.require(
            minTokenRefreshInterval >= 0, "minTokenRefreshInterval", "must not be negative (0 turns it off)")
        try Self.require(requestHeadArenaBytes >= 512, "requestHeadArenaBytes", "must be at least 512")
        if let malformedPayloadReason {
            try Self.require(malformedPayloadReason.status == 400, "malformedPayloadReason", "must be a 400 reason")
        }
        if let keyID { try Self.require(!keyID.isEmpty, "keyID", "must not be empty (unset it to accept any key)") }
        try Self.require(maxChannelsPerApp >= 0, "maxChannelsPerApp", "must not be negative")
        if let broadcastStartEventReason {
            try Self.require(
                broadcastStartEventReason.status == 400, "broadcastStartEventReason",
                "must be a 400 reason (or unset to accept start events)")
        }
        try Self.require(
            environmentKeyReason == .badEnvironmentKeyIdInToken || environmentKeyReason == .badEnvironmentKeyInToken,
            "environmentKeyReason", "must be BadEnvironmentKeyIdInToken or BadEnvironmentKeyInToken")
        for (keyID, scope) in providerKeys {
            try Self.require(!keyID.isEmpty, "providerKeys", "a key id must not be empty")
            if let topics = scope.topics {
                try Self.require(
                    !topics.isEmpty, "providerKeys", "key \(keyID): a topic-specific key needs at least one topic")
            }
        }
        if let teamID { try Self.require(!teamID.isEmpty, "teamID", "must not be empty (unset it to accept any team)") }
    }

    private static func require(
        _ condition: Bool, _ field: String, _ problem: String
    ) throws(SimulatorConfigurationError) {
        if !condition { throw .invalid(field: field, problem: problem) }
    }
}

/// What APNs knows of one provider key since 2025 (apns-spec.md §6.1).
public struct ProviderKeyScope: Sendable, Equatable {
    /// A team-scoped key restricted to one environment; nil = both (keys made before 2025).
    public var environment: SimulatorConfiguration.Environment?
    /// A topic-specific key's topics (bundle IDs); nil = a team-scoped key (every app of the team).
    public var topics: Set<String>?

    public init(environment: SimulatorConfiguration.Environment? = nil, topics: Set<String>? = nil) {
        self.environment = environment
        self.topics = topics
    }
}

/// A token prefix (hex, any case, at most 200 digits) and the reason its tokens get.
public struct TokenPrefixReply: Sendable, Equatable {
    /// Lowercase hex digits.
    public let prefix: [UInt8]
    public let reason: APNsReason

    /// nil if `prefix` is empty, longer than a token, or not hex.
    public init?(prefix: String, reason: APNsReason) {
        let bytes = Array(prefix.lowercased().utf8)
        guard !bytes.isEmpty, bytes.count <= 200,
            bytes.allSatisfy({
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                    || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
            })
        else { return nil }
        self.prefix = bytes
        self.reason = reason
    }

    /// Whether `token` (hex digits, any case) starts with the prefix.
    func matches(_ token: UnsafeRawBufferPointer) -> Bool {
        guard token.count >= prefix.count else { return false }
        for (position, digit) in prefix.enumerated() where token[position] | 0x20 != digit { return false }
        return true
    }
}

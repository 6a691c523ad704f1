import FanfareCore

/// What the simulated APNs answers to one request.
public enum SimulatorDecision: Sendable, Equatable {
    /// 200, `apns-id`, no body.
    case accept
    /// An error status with `{"reason": ...}`; `timestamp` (ms since the epoch) only for 410s.
    case reject(APNsReason, timestamp: Int64?)

    /// The `:status` to send.
    public var status: Int {
        switch self {
        case .accept: 200
        case .reject(let reason, _): reason.status
        }
    }

    /// A rejection, adding the 410 `timestamp` APNs sends with every 410.
    static func reject(_ reason: APNsReason, now: SimulatorInstant) -> SimulatorDecision {
        .reject(reason, timestamp: reason.status == 410 ? now.milliseconds : nil)
    }
}

/// Decides what APNs would answer to a request, given its headers and body (`RequestHead`) and the
/// connection's provider-token state. One validator per worker thread (it owns the worker's PRNG and
/// per-token rate table); `decide` allocates nothing.
///
/// Device pushes (`/3/device/…`) are checked in this order; the first failing rule answers
/// (pushy's mock order, apns-spec.md §10, with the path moved up so a bad path is never blamed on a
/// header):
///
///  1. `apns-id` present and not a canonical 8-4-4-4-12 UUID → 400 `BadMessageId`
///  2. `:method` not `POST` → 405 `MethodNotAllowed`
///  3. `:path`: `/3/device/` alone → 400 `MissingDeviceToken`; neither `/3/device/<x>` nor
///     `/4/broadcasts/apps/<x>` → 404 `BadPath` (broadcasts: see below)
///  4. `apns-topic` absent or empty → 400 `MissingTopic`
///  5. topic syntax (only `A-Z a-z 0-9 . -`) → 400 `BadTopic`; well-formed but no served app's bundle ID (alone
///     or + a known push-type suffix) → 400 `TopicDisallowed` (§7.4: "pushing to this topic not allowed";
///     [U] APNs documents no other reason for a foreign topic: `DeviceTokenNotForTopic` is about the token, and
///     the simulator only knows a token's environment, not its app)
///  6. any recognised header repeated → 400 `DuplicateHeaders`
///  7. `apns-collapse-id` longer than 64 bytes → 400 `BadCollapseId`
///  8. `apns-priority` present and not `1`, `5` or `10` → 400 `BadPriority` (absent = 10)
///  9. `apns-push-type` unknown, or absent while `requirePushType` → 400 `InvalidPushType`; the push
///     type's required topic (§2.2) differs from the topic → 400 `DeviceTokenNotForTopic` (documented for
///     a Live Activity token without `.push-type.liveactivity`; [U] for other mismatches)
/// 10. `apns-expiration` present and not a non-negative decimal integer → 400 `BadExpirationDate`
/// 11. token not hex with an even number of digits, 32...100 bytes (64...200 digits) → 400 `BadDeviceToken`
/// 12. provider token for the topic's app (`ConnectionAuthState`, its own rule order) → 403 / 429 reasons
/// 13. empty body → 400 `PayloadEmpty`
/// 14. body over the limit (4096; 5120 for `voip`) → 413 `PayloadTooLarge`
/// 15. body not a JSON object with an `aps` object → `malformedPayloadReason` (default 400
///     `PayloadEmpty` [U]; nil skips the check)
/// 16. token of the other environment (`sandboxTokenPrefix`) → 400 `BadDeviceToken`; token starting with a
///     `tokenPrefixReplies` prefix → its reason; token outside `knownTokens` → 410 `Unregistered`
///     (+ timestamp) or 400 `BadDeviceToken`
/// 17. more than `perTokenRateLimit` pushes to the token in this second → 429 `TooManyRequests`
/// 18. injected faults (one uniform draw per push): the active `faultBursts` first, then `faults` → the
///     rule's reason
/// 19. otherwise 200.
///
/// A channel-management path (`/1/apps/…`) is 404 `BadPath` right after rule 1, whatever its method: this port
/// does not serve it (APNs has the management API on another host and port, §1.1).
///
/// Broadcast pushes (`/4/broadcasts/apps/<bundle>`, apns-spec.md §8.3) use: 1 (`apns-id` and
/// `apns-request-id` → `BadMessageId`), 2, 3, a served bundle in the path with a push-type suffix
/// → `TopicDisallowed`, no served bundle → 403 `TopicMismatch` [U], 6, `apns-channel-id` absent
/// → `MissingChannelId`, not base64 → `BadChannelId`, `apns-priority` absent or not `5`/`10`
/// → `BadPriority` (Apple lists it as required), push type absent → `MissingPushType`, not
/// `liveactivity` → `InvalidPushType`, 10, 12, then with the channels (`BroadcastChannels`, one lookup
/// under its lock: only broadcasts pay for it): no such channel for the app in this environment
/// → `ChannelNotRegistered`, a storage-policy-0 channel with a non-zero `apns-expiration`
/// → `BadExpirationDate`; then 13, 14 (limit 5120), 15 (→ `BadRequestPayload`), `aps.event` = `start`
/// → `broadcastStartEventReason` (default `BadRequestPayload`; broadcast cannot start an activity), 18.
/// The channel is looked up after authentication, so an unauthenticated caller learns nothing about
/// channels, and before the body, as APNs checks headers before payloads.
///
/// A header whose value did not fit the head's arena counts as a malformed value of that header.
public struct RequestValidator {
    public let configuration: SimulatorConfiguration
    /// The apps requests are for (one without `configuration.apps`).
    let apps: SimulatedAppTable
    /// Matches sandbox tokens (`sandboxTokenPrefix`); nil: every token belongs here.
    private let sandboxTokens: TokenPrefixReply?
    /// Whether this validator plays sandbox (`configuration.environment`).
    private let isSandbox: Bool
    private let knownTokens: DeviceTokenSet?
    private let rateLimiter: PerTokenRateLimiter?
    /// Fault reasons with cumulative probabilities (draw u in [0,1); the first rule with u < bound fires).
    private let faultReasons: [APNsReason]
    private let faultBounds: [Double]
    /// Bursts that can work (`FaultBurst.problem == nil`), and the request count and first-request time
    /// their windows are measured from.
    private let bursts: [FaultBurst]
    private var decidedRequests = 0
    private var firstRequestTime: Int64 = -1
    /// The worker's PRNG (faults here; the server may also use it for latency via `random`).
    public var random: SimulatorRandom
    /// The simulator's broadcast channels; nil = none are tracked (every well-formed channel id is taken).
    private let channels: BroadcastChannels?
    /// The last decided request was a broadcast (its response carries `apns-request-id`).
    public private(set) var lastWasBroadcast = false
    /// The app (index in `apps`) the last decided request was for; -1 before its topic or path named one.
    private(set) var lastApp = -1

    /// - Parameters:
    ///   - worker: the worker's index; selects the PRNG stream so workers draw different sequences.
    ///   - knownTokens: a set built once and shared by all workers; when nil and the configuration has
    ///     `knownTokens`, this validator builds its own.
    ///   - channels: the broadcast channels broadcasts are checked against; nil checks only the id's syntax.
    public init(
        configuration: SimulatorConfiguration, worker: Int = 0, knownTokens: DeviceTokenSet? = nil,
        channels: BroadcastChannels? = nil
    ) {
        self.configuration = configuration
        self.channels = channels
        apps = SimulatedAppTable(configuration)
        sandboxTokens = configuration.sandboxTokenPrefix.flatMap {
            TokenPrefixReply(prefix: $0, reason: .badDeviceToken)
        }
        isSandbox = configuration.environment == .sandbox
        if let knownTokens {
            self.knownTokens = knownTokens
        } else {
            self.knownTokens = configuration.knownTokens.map { DeviceTokenSet(hexTokens: $0) }
        }
        rateLimiter =
            configuration.perTokenRateLimit > 0
            ? PerTokenRateLimiter(
                limit: configuration.perTokenRateLimit, capacity: configuration.perTokenRateTableCapacity)
            : nil
        var reasons: [APNsReason] = []
        var bounds: [Double] = []
        var cumulative = 0.0
        for rule in configuration.faults where rule.probability > 0 {
            cumulative += rule.probability
            reasons.append(rule.reason)
            bounds.append(cumulative)
        }
        faultReasons = reasons
        faultBounds = bounds
        bursts = configuration.faultBursts.filter { $0.problem == nil && $0.rule.probability > 0 }
        random = SimulatorRandom(seed: configuration.seed, stream: UInt64(worker))
    }

    /// Pushes admitted without rate tracking because the worker's rate table was full.
    public var rateLimiterOverflows: Int { rateLimiter?.overflows ?? 0 }

    /// The answer to one complete request (headers and END_STREAM seen).
    public mutating func decide(
        _ head: borrowing RequestHead, auth: ConnectionAuthState, now: SimulatorInstant
    ) -> SimulatorDecision {
        decidedRequests &+= 1
        if firstRequestTime < 0 { firstRequestTime = now.nanosecondsSinceEpoch }
        lastWasBroadcast = false
        lastApp = -1
        // 1. apns-id
        if let reason = checkUUID(head.lookup(.apnsID)) { return .reject(reason, now: now) }
        // The management API lives on its own port.
        let path = head.value(.path)
        if let path, path.hasPrefix("/1/apps/") { return .reject(.badPath, now: now) }
        // 2. method
        guard let method = head.value(.method), method.equals("POST") else {
            return .reject(.methodNotAllowed, now: now)
        }
        // 3. path
        guard let path else { return .reject(.badPath, now: now) }
        switch RequestRoute.classify(path: path) {
        case .device:
            return decideDevice(head, path: path, auth: auth, now: now)
        case .deviceWithoutToken:
            return .reject(.missingDeviceToken, now: now)
        case .broadcast where configuration.acceptBroadcasts:
            return decideBroadcast(head, path: path, auth: auth, now: now)
        case .broadcast, .unknown:
            return .reject(.badPath, now: now)
        }
    }

    // MARK: - Device pushes

    private mutating func decideDevice(
        _ head: borrowing RequestHead, path: UnsafeRawBufferPointer, auth: ConnectionAuthState, now: SimulatorInstant
    ) -> SimulatorDecision {
        // 4–5. topic
        let topic: UnsafeRawBufferPointer
        switch head.lookup(.apnsTopic) {
        case .absent: return .reject(.missingTopic, now: now)
        case .oversized: return .reject(.badTopic, now: now)
        case .present(let value):
            guard value.count > 0 else { return .reject(.missingTopic, now: now) }
            topic = value
        }
        guard HeaderSyntax.isTopicSyntax(topic) else { return .reject(.badTopic, now: now) }
        guard let (app, topicKind) = apps.match(topic: topic) else { return .reject(.topicDisallowed, now: now) }
        lastApp = app
        // 6. duplicates
        if head.hasDuplicateHeaders { return .reject(.duplicateHeaders, now: now) }
        // 7. collapse id
        switch head.lookup(.apnsCollapseID) {
        case .absent: break
        case .oversized: return .reject(.badCollapseId, now: now)
        case .present(let value): if value.count > 64 { return .reject(.badCollapseId, now: now) }
        }
        // 8. priority
        if let reason = checkPriority(head.lookup(.apnsPriority)) { return .reject(reason, now: now) }
        // 9. push type ↔ topic
        guard let pushType = requestedPushType(head.lookup(.apnsPushType), topic: topicKind) else {
            return .reject(.invalidPushType, now: now)
        }
        if pushType.requiredTopic != topicKind { return .reject(.deviceTokenNotForTopic, now: now) }
        // 10. expiration
        if let reason = checkExpiration(head.lookup(.apnsExpiration)) { return .reject(reason, now: now) }
        // 11. token syntax
        let token = RequestRoute.deviceToken(inPath: path)
        guard HeaderSyntax.isDeviceToken(token, minimumBytes: 32, maximumBytes: 100) else {
            return .reject(.badDeviceToken, now: now)
        }
        // 12. provider token
        if let reason = auth.check(authorization: head.lookup(.authorization), app: app, now: now) {
            return .reject(reason, now: now)
        }
        // 13–15. body
        let limit = pushType == .voip ? configuration.voipMaxPayloadBytes : configuration.maxPayloadBytes
        if let reason = checkBody(head, limit: limit, malformedReason: configuration.malformedPayloadReason) {
            return .reject(reason, now: now)
        }
        // 16–18. the token's own answer
        if let reason = checkToken(token, now: now) { return .reject(reason, now: now) }
        return .accept
    }

    /// The push type a request names (or its topic implies, when it names none and none is required); nil: the
    /// push type is missing, too long or unknown.
    private func requestedPushType(_ value: HeaderValue, topic: TopicKind) -> PushTypeValue? {
        switch value {
        case .absent:
            if configuration.requirePushType { return nil }
            return Self.inferredPushType(for: topic)
        case .oversized:
            return nil
        case .present(let value):
            return PushTypeValue.recognise(value)
        }
    }

    /// What a well-formed push to `token` gets instead of acceptance, if anything: a fixed reply for its prefix or
    /// for an unknown token, the per-token rate limit, or a fault drawn at random.
    private mutating func checkToken(_ token: UnsafeRawBufferPointer, now: SimulatorInstant) -> APNsReason? {
        // 16. the token's environment, known tokens (and token prefixes with a fixed reply)
        if let sandboxTokens, sandboxTokens.matches(token) != isSandbox { return .badDeviceToken }
        if !configuration.tokenPrefixReplies.isEmpty {
            for rule in configuration.tokenPrefixReplies where rule.matches(token) {
                return rule.reason
            }
        }
        if let knownTokens, !knownTokens.contains(token) {
            return configuration.unknownTokenReply.reason
        }
        // 17. per-token rate
        if let rateLimiter, !rateLimiter.admit(token: token, now: now) {
            return .tooManyRequests
        }
        // 18. faults
        return drawFault(now: now)
    }

    /// The push type a topic implies when the request has no `apns-push-type`.
    static func inferredPushType(for topic: TopicKind) -> PushTypeValue {
        switch topic {
        case .bundle: .alert
        case .complication: .complication
        case .controls: .controls
        case .fileprovider: .fileprovider
        case .liveActivity: .liveactivity
        case .location: .location
        case .pushToTalk: .pushtotalk
        case .voip: .voip
        case .widgets: .widgets
        }
    }

    // MARK: - Broadcast pushes

    private mutating func decideBroadcast(
        _ head: borrowing RequestHead, path: UnsafeRawBufferPointer, auth: ConnectionAuthState, now: SimulatorInstant
    ) -> SimulatorDecision {
        lastWasBroadcast = true
        if let reason = checkUUID(head.lookup(.apnsRequestID)) { return .reject(reason, now: now) }
        let pathBundle = RequestRoute.broadcastBundle(inPath: path)
        guard let (app, topicKind) = apps.match(topic: pathBundle) else { return .reject(.topicMismatch, now: now) }
        guard topicKind == .bundle else { return .reject(.topicDisallowed, now: now) }
        lastApp = app
        if head.hasDuplicateHeaders { return .reject(.duplicateHeaders, now: now) }
        let channelID: UnsafeRawBufferPointer
        switch head.lookup(.apnsChannelID) {
        case .absent: return .reject(.missingChannelId, now: now)
        case .oversized: return .reject(.badChannelId, now: now)
        case .present(let value):
            guard HeaderSyntax.isBase64(value), value.count <= BroadcastChannelID.maximumByteCount else {
                return .reject(.badChannelId, now: now)
            }
            channelID = value
        }
        guard let priority = head.value(.apnsPriority), priority.equals("10") || priority.equals("5") else {
            return .reject(.badPriority, now: now)
        }
        switch head.lookup(.apnsPushType) {
        case .absent: return .reject(.missingPushType, now: now)
        case .oversized: return .reject(.invalidPushType, now: now)
        case .present(let value):
            guard PushTypeValue.recognise(value) == .liveactivity else { return .reject(.invalidPushType, now: now) }
        }
        if let reason = checkExpiration(head.lookup(.apnsExpiration)) { return .reject(reason, now: now) }
        if let reason = auth.check(authorization: head.lookup(.authorization), app: app, now: now) {
            return .reject(reason, now: now)
        }
        if let channels {
            guard let policy = channels.storagePolicy(ofChannel: channelID, bundle: pathBundle) else {
                return .reject(.channelNotRegistered, now: now)
            }
            if policy == 0, let expiration = head.value(.apnsExpiration),
                HeaderSyntax.parseNonNegativeInteger(expiration) != 0
            {
                return .reject(.badExpirationDate, now: now)
            }
        }
        let malformed: APNsReason? = configuration.malformedPayloadReason == nil ? nil : .badRequestPayload
        if let reason = checkBody(head, limit: configuration.broadcastMaxPayloadBytes, malformedReason: malformed) {
            return .reject(reason, now: now)
        }
        if let reason = configuration.broadcastStartEventReason, head.isBodyFullyStored, Self.isStartEvent(head.body) {
            return .reject(reason, now: now)
        }
        if let reason = drawFault(now: now) { return .reject(reason, now: now) }
        return .accept
    }

    /// Whether a payload's `aps.event` is `"start"`.
    static func isStartEvent(_ body: UnsafeRawBufferPointer) -> Bool {
        guard let aps = SimulatorJSON.topLevelMember(body, key: "aps"), let aps else { return false }
        let object = body.slice(from: aps.lowerBound, count: aps.count)
        guard let event = SimulatorJSON.topLevelMember(object, key: "event"), let event else { return false }
        return object.slice(from: event.lowerBound, count: event.count).equals("\"start\"")
    }

    // MARK: - Shared rules

    private func checkUUID(_ value: HeaderValue) -> APNsReason? {
        switch value {
        case .absent: return nil
        case .oversized: return .badMessageId
        case .present(let bytes):
            return HeaderSyntax.isCanonicalUUID(bytes, requireLowercase: configuration.requireLowercaseMessageID)
                ? nil : .badMessageId
        }
    }

    private func checkPriority(_ value: HeaderValue) -> APNsReason? {
        switch value {
        case .absent: return nil
        case .oversized: return .badPriority
        case .present(let bytes):
            return bytes.equals("10") || bytes.equals("5") || bytes.equals("1") ? nil : .badPriority
        }
    }

    private func checkExpiration(_ value: HeaderValue) -> APNsReason? {
        switch value {
        case .absent: return nil
        case .oversized: return .badExpirationDate
        case .present(let bytes):
            return HeaderSyntax.parseNonNegativeInteger(bytes) == nil ? .badExpirationDate : nil
        }
    }

    private func checkBody(_ head: borrowing RequestHead, limit: Int, malformedReason: APNsReason?) -> APNsReason? {
        if head.bodyByteCount == 0 { return .payloadEmpty }
        if head.bodyByteCount > limit { return .payloadTooLarge }
        guard let malformedReason else { return nil }
        // Needs the whole body (RequestHead bodyCapacity ≥ configuration.requestBodyCapacity); a server
        // that only counted the body with `appendBody(count:)` gets no JSON check.
        guard head.isBodyFullyStored else { return nil }
        return PayloadShape(of: head.body) == .objectWithAPS ? nil : malformedReason
    }

    private mutating func drawFault(now: SimulatorInstant) -> APNsReason? {
        guard !faultBounds.isEmpty || !bursts.isEmpty else { return nil }
        var draw = random.nextUnitInterval()
        if !bursts.isEmpty {
            let elapsed = now.nanosecondsSinceEpoch &- firstRequestTime
            for index in 0..<bursts.count where bursts[index].isActive(requests: decidedRequests - 1, elapsed: elapsed)
            {
                let probability = bursts[index].rule.probability
                if draw < probability { return bursts[index].rule.reason }
                draw -= probability
            }
        }
        for index in 0..<faultBounds.count where draw < faultBounds[index] {
            return faultReasons[index]
        }
        return nil
    }
}

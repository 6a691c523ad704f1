import FanfareCore

/// Which kind of Live Activity token a registration holds (apns-spec.md §5).
public enum TokenKind: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// One activity instance's update token: receives `update` and `end` events.
    case update = 0
    /// A device's push-to-start token for one ActivityAttributes type: receives `start` events.
    case pushToStart = 1

    public var description: String { self == .update ? "update" : "push-to-start" }
}

/// The APNs environment a token belongs to (a sandbox token sent to production is a BadDeviceToken).
public enum APNsEnvironment: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case production = 0
    case sandbox = 1

    public var description: String { self == .production ? "production" : "sandbox" }
}

/// One registered token and what it follows. The token itself is the key: registering it again replaces the
/// other fields and the channel list, keeps `createdAt`, and moves `lastSeenAt` forward.
public struct TokenRegistration: Sendable, Equatable {
    public var token: DeviceToken
    public var kind: TokenKind
    /// Update tokens: the activity instance (the app's id for it).
    public var activityID: String?
    /// Push-to-start tokens: the device and the ActivityAttributes type the token starts.
    public var deviceID: String?
    public var attributesType: String?
    public var bundleID: String
    public var environment: APNsEnvironment
    /// The app reported `frequentPushesEnabled`: the activity gets the frequent-updates priority-10 budget.
    public var frequentUpdates: Bool
    /// Push-to-start tokens: the device runs iOS 18+, so a start may carry `input-push-channel` (the activity
    /// then receives its updates through a broadcast channel).
    public var supportsBroadcast: Bool
    /// Channels (live events, e.g. one match) this token follows; at least one.
    public var channels: [String]
    /// UNIX milliseconds.
    public var createdAt: Int64
    public var lastSeenAt: Int64

    public init(
        token: DeviceToken, kind: TokenKind, activityID: String? = nil, deviceID: String? = nil,
        attributesType: String? = nil, bundleID: String, environment: APNsEnvironment, frequentUpdates: Bool = false,
        supportsBroadcast: Bool = false, channels: [String], createdAt: Int64, lastSeenAt: Int64? = nil
    ) {
        self.token = token
        self.kind = kind
        self.activityID = activityID
        self.deviceID = deviceID
        self.attributesType = attributesType
        self.bundleID = bundleID
        self.environment = environment
        self.frequentUpdates = frequentUpdates
        self.supportsBroadcast = supportsBroadcast
        self.channels = channels
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt ?? createdAt
    }
}

/// Why the registry refused or failed an operation. Nothing is half-applied: a failed batch changes nothing.
public enum RegistryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A registration is malformed (index in the batch, what is wrong).
    case invalidRegistration(index: Int, reason: String)
    /// The database could not be opened, read or written (or holds a row it cannot read back).
    case storage(String)
    /// The database server cannot be reached now (refused, lost, timed out): nothing was changed; the same call
    /// may work once it is back.
    case unavailable(String)
    /// A `WaveStore` call named a wave that was never saved (or was pruned).
    case unknownWave(id: UInt64)
    /// A `WaveStore` call passed a wave, checkpoint or report the store refuses (which wave, what is wrong).
    case invalidWave(id: UInt64, reason: String)

    public var description: String {
        switch self {
        case .invalidRegistration(let index, let reason): return "registration #\(index) is invalid: \(reason)"
        case .storage(let message): return "token registry: \(message)"
        case .unavailable(let message): return "token registry unreachable: \(message)"
        case .unknownWave(let id): return "wave \(id) is unknown (never saved, or pruned)"
        case .invalidWave(let id, let reason): return "wave \(id) cannot be stored: \(reason)"
        }
    }
}

/// A token APNs reported dead, for `TokenStore.invalidate(_:)`.
public struct TokenInvalidation: Sendable, Equatable {
    public var token: DeviceToken
    /// From a 410's `timestamp` (UNIX ms): removed only if not registered again after it; nil removes it.
    public var invalidSince: Int64?
    /// APNs' reason (e.g. "Unregistered"), kept in the token's ledger history.
    public var reason: String?

    public init(token: DeviceToken, invalidSince: Int64?, reason: String? = nil) {
        self.token = token
        self.invalidSince = invalidSince
        self.reason = reason
    }
}

/// What the fan-out engine needs from durable storage. SQLite is the embedded default
/// (`SQLiteTokenStore`); a server database can take its place by implementing this.
///
/// Every mutating call is durable when it returns (committed and synced), so an acknowledged registration
/// survives a crash. Calls may come from any thread; implementations serialise writes themselves.
public protocol TokenStore: AnyObject, Sendable {
    /// Inserts or replaces token registrations and broadcast subscriptions in one transaction (tokens first, then
    /// subscriptions, each in batch order). Validates every entry first (non-empty bundle id and channel list,
    /// activity id for update tokens and subscriptions, device id and attributes type for push-to-start tokens)
    /// and throws `.invalidRegistration` for the first bad one without writing anything (subscriptions are
    /// numbered after the tokens).
    ///
    /// Replacement rules (docs/fanout.md, "Registry"): a push-to-start token replaces the other push-to-start
    /// tokens of its (app, device id, attributes type); an update token removes the subscription of its
    /// activity; a subscription removes the update tokens of its activity. The result names what was replaced,
    /// so the caller drops those tokens from memory at once, and how each channel's subscription count changed.
    func register(
        _ registrations: [TokenRegistration], subscriptions: [BroadcastSubscription]
    )
        throws(RegistryError) -> RegistrationResult

    /// Removes tokens (all their channels) registered in `scope`. Returns how many were registered there. Unknown
    /// tokens, and tokens of apps outside `scope`, are ignored.
    func unregister(_ tokens: [DeviceToken], in scope: RegistryScope) throws(RegistryError) -> Int

    /// Removes a token APNs reported dead (410, BadDeviceToken, DeviceTokenNotForTopic), unless it was
    /// registered again after `invalidSince` (UNIX ms, from a 410's `timestamp`; nil removes it regardless).
    /// Returns true if the token was removed.
    func invalidate(_ token: DeviceToken, invalidSince: Int64?) throws(RegistryError) -> Bool

    /// `invalidate` for many tokens in one transaction (one fsync), with the same rule per token. Returns, in
    /// order, whether each was removed; on an error nothing of the batch is applied.
    func invalidate(_ batch: [TokenInvalidation]) throws(RegistryError) -> [Bool]

    /// Calls `body` for every registration of one app (bundle id and environment), in no particular order.
    /// Used once at start-up to fill the in-memory shard tables.
    func forEachRegistration(
        bundleID: String, environment: APNsEnvironment, _ body: (TokenRegistration) throws -> Void
    ) throws(RegistryError)

    /// `forEachRegistration` for the tokens of some shards: those whose `DeviceToken.shardHash % shardCount` is
    /// in `shards` (the fan-out engine's routing). Several nodes load only the shards they hold; the default
    /// filters one scan.
    func forEachRegistration(
        bundleID: String, environment: APNsEnvironment, shards: Set<Int>, of shardCount: Int,
        _ body: (TokenRegistration) throws -> Void
    ) throws(RegistryError)

    /// Removes the update tokens and broadcast subscriptions of `scope` that follow `channel` (its activities ended
    /// and were dismissed); push-to-start tokens stay.
    func retire(following channel: String, in scope: RegistryScope) throws(RegistryError) -> RetirementResult

    /// Removes update tokens and broadcast subscriptions of `scope` created before `createdBefore` (UNIX ms):
    /// activities past ActivityKit's 8 + 4 hour lifetime. Also prunes ledger history past its retention (of every
    /// app: the retention is the deployment's).
    func retire(createdBefore: Int64, in scope: RegistryScope) throws(RegistryError) -> RetirementResult

    /// Live broadcast subscriptions per channel of one app (channels without any are absent).
    func subscriptionCounts(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [String: Int]

    /// What the registry knows about `token` in one app: its registration, links, retirement and history; nil
    /// when it knows nothing (never registered, or its history was pruned).
    func ledger(
        token: DeviceToken, bundleID: String, environment: APNsEnvironment, activityLifetime: Duration
    )
        throws(RegistryError) -> TokenLedgerEntry?

    /// Number of registered tokens (all apps).
    func count() throws(RegistryError) -> Int
}

extension TokenStore {
    /// `ledger(token:...)` with ActivityKit's activity lifetime (8 hours live plus 4 on the lock screen).
    public func ledger(
        token: DeviceToken, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> TokenLedgerEntry? {
        try ledger(token: token, bundleID: bundleID, environment: environment, activityLifetime: .seconds(12 * 3600))
    }

    /// Registers tokens only (see `register(_:subscriptions:)`).
    @discardableResult
    public func register(_ registrations: [TokenRegistration]) throws(RegistryError) -> RegistrationResult {
        try register(registrations, subscriptions: [])
    }

    /// `unregister(_:in:)` for every app.
    public func unregister(_ tokens: [DeviceToken]) throws(RegistryError) -> Int {
        try unregister(tokens, in: .everything)
    }

    /// `retire(following:in:)` for every app.
    public func retire(following channel: String) throws(RegistryError) -> RetirementResult {
        try retire(following: channel, in: .everything)
    }

    /// `retire(createdBefore:in:)` for every app.
    public func retire(createdBefore: Int64) throws(RegistryError) -> RetirementResult {
        try retire(createdBefore: createdBefore, in: .everything)
    }

    /// `retire(following:)`'s removed tokens.
    public func retireUpdateTokens(following channel: String) throws(RegistryError) -> [DeviceToken] {
        try retire(following: channel).tokens
    }

    /// `retire(createdBefore:)`'s removed tokens.
    public func retireUpdateTokens(createdBefore: Int64) throws(RegistryError) -> [DeviceToken] {
        try retire(createdBefore: createdBefore).tokens
    }

    public func forEachRegistration(
        bundleID: String, environment: APNsEnvironment, shards: Set<Int>, of shardCount: Int,
        _ body: (TokenRegistration) throws -> Void
    ) throws(RegistryError) {
        let count = UInt64(max(1, shardCount))
        try forEachRegistration(bundleID: bundleID, environment: environment) { registration in
            if shards.contains(Int(registration.token.shardHash % count)) { try body(registration) }
        }
    }

    /// One `invalidate` call per token (stores that can batch override this with one transaction).
    public func invalidate(_ batch: [TokenInvalidation]) throws(RegistryError) -> [Bool] {
        var removed: [Bool] = []
        removed.reserveCapacity(batch.count)
        for item in batch { removed.append(try invalidate(item.token, invalidSince: item.invalidSince)) }
        return removed
    }
}

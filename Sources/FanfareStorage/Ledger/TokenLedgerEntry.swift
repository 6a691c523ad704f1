import FanfareCore

/// What the registry knows about one token (`TokenStore.ledger(token:...)`, `GET /v1/tokens/{token}`).
public struct TokenLedgerEntry: Sendable, Equatable {
    public var token: DeviceToken
    public var bundleID: String
    public var environment: APNsEnvironment
    /// The live registration; nil once it ended (the history says how).
    public var registration: TokenRegistration?
    /// An update token: the registered push-to-start token of the same device and attributes type (the one that
    /// started it), when the update token names its device and type.
    public var startedBy: DeviceToken?
    /// A push-to-start token: the activities of its device and attributes type (update tokens and broadcast
    /// subscriptions).
    public var activities: [LedgerActivity] = []
    /// When the registration retires at the latest (UNIX ms): update tokens at `createdAt` + ActivityKit's
    /// lifetime; nil for push-to-start tokens and gone tokens.
    public var retiresByLifetimeAt: Int64?
    /// Pending channel retirements (an `end` was published; the dismissal window runs): channel -> due, UNIX s.
    public var pendingRetirements: [String: Int64] = [:]
    /// Newest first: how each past registration of the token ended, and when the live one began.
    public var history: [TokenLedgerEvent] = []

    public init(token: DeviceToken, bundleID: String, environment: APNsEnvironment) {
        self.token = token
        self.bundleID = bundleID
        self.environment = environment
    }
}

/// An activity linked to a push-to-start token: an update token or a broadcast subscription.
public struct LedgerActivity: Sendable, Equatable {
    public var activityID: String
    /// The update token; nil for a broadcast subscription.
    public var token: DeviceToken?
    public var channels: [String]
    /// UNIX ms.
    public var createdAt: Int64

    public var isBroadcastSubscription: Bool { token == nil }

    public init(activityID: String, token: DeviceToken?, channels: [String], createdAt: Int64) {
        self.activityID = activityID
        self.token = token
        self.channels = channels
        self.createdAt = createdAt
    }
}

/// One event of a token's (or a subscription's) life.
public struct TokenLedgerEvent: Sendable, Equatable {
    public enum Kind: Int, Sendable, CaseIterable, CustomStringConvertible {
        /// A registration began (`at` is its `createdAt`).
        case registered = 0
        /// Another registration took its place: `replacedBy` (a push-to-start token of the same device and
        /// type, or an update token of the same activity), or a broadcast subscription of its activity (nil).
        case replaced = 1
        /// Its channel ended and the dismissal window passed (`channel`).
        case retiredChannelEnded = 2
        /// Older than ActivityKit's activity lifetime.
        case retiredLifetime = 3
        /// APNs reported it dead (`reason`, `invalidSince`).
        case invalidated = 4
        /// Removed through the API (`DELETE /v1/tokens`) or the library's `unregister`.
        case unregistered = 5

        public var description: String {
            switch self {
            case .registered: return "registered"
            case .replaced: return "replaced"
            case .retiredChannelEnded: return "retired_channel_ended"
            case .retiredLifetime: return "retired_lifetime"
            case .invalidated: return "invalidated"
            case .unregistered: return "unregistered"
            }
        }
    }

    public var kind: Kind
    /// UNIX ms.
    public var at: Int64
    /// The registration this event belongs to: what it was.
    public var registrationKind: LedgerRegistrationKind
    public var activityID: String?
    public var replacedBy: DeviceToken?
    public var channel: String?
    /// APNs' reason.
    public var reason: String?
    /// APNs' timestamp of the invalidation (UNIX ms).
    public var invalidSince: Int64?

    public init(
        kind: Kind, at: Int64, registrationKind: LedgerRegistrationKind, activityID: String? = nil,
        replacedBy: DeviceToken? = nil, channel: String? = nil, reason: String? = nil, invalidSince: Int64? = nil
    ) {
        self.kind = kind
        self.at = at
        self.registrationKind = registrationKind
        self.activityID = activityID
        self.replacedBy = replacedBy
        self.channel = channel
        self.reason = reason
        self.invalidSince = invalidSince
    }
}

/// What kind of registration a ledger event is about (the history's `kind` column).
public enum LedgerRegistrationKind: Int, Sendable, CaseIterable, CustomStringConvertible {
    case update = 0
    case pushToStart = 1
    case broadcastSubscription = 2

    package init(_ kind: TokenKind) { self = kind == .update ? .update : .pushToStart }

    public var description: String {
        switch self {
        case .update: return "update"
        case .pushToStart: return "push_to_start"
        case .broadcastSubscription: return "broadcast"
        }
    }
}

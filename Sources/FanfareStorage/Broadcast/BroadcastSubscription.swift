import FanfareCore

/// An activity started with a broadcast channel (iOS 18+, e.g. from a push-to-start carrying
/// `input-push-channel`): it has no update token; APNs fans the channel's broadcasts out to it. Keyed by
/// (app, activity id). Registering it removes the update tokens of the same activity (one activity, one path).
public struct BroadcastSubscription: Sendable, Equatable {
    /// The activity instance (the app's id for it).
    public var activityID: String
    /// The device and ActivityAttributes type, when the app knows them (they link it to its push-to-start token).
    public var deviceID: String?
    public var attributesType: String?
    public var bundleID: String
    public var environment: APNsEnvironment
    /// The app reported `frequentPushesEnabled`.
    public var frequentUpdates: Bool
    /// Fanfare channels (live events) the activity follows; at least one.
    public var channels: [String]
    /// UNIX milliseconds.
    public var createdAt: Int64
    public var lastSeenAt: Int64

    public init(
        activityID: String, deviceID: String? = nil, attributesType: String? = nil, bundleID: String,
        environment: APNsEnvironment, frequentUpdates: Bool = false, channels: [String], createdAt: Int64,
        lastSeenAt: Int64? = nil
    ) {
        self.activityID = activityID
        self.deviceID = deviceID
        self.attributesType = attributesType
        self.bundleID = bundleID
        self.environment = environment
        self.frequentUpdates = frequentUpdates
        self.channels = channels
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt ?? createdAt
    }
}

/// What a `register` call changed beyond the registrations it was given.
public struct RegistrationResult: Sendable, Equatable {
    /// Tokens the batch replaced (an older push-to-start token of the same device and attributes type, update
    /// tokens of an activity now registered as a broadcast subscription), now gone from the registry: drop them
    /// from memory. Never a token the batch itself keeps registered.
    public var replacedTokens: [DeviceToken] = []
    /// Activity ids of broadcast subscriptions an update token of the same activity replaced.
    public var replacedSubscriptions: [String] = []
    /// Per channel, how the number of live broadcast subscriptions changed (no zero entries).
    public var subscriptionDeltas: [String: Int] = [:]

    /// Registrations replaced: tokens and subscriptions.
    public var replacedCount: Int { replacedTokens.count + replacedSubscriptions.count }

    public init() {}
}

/// What a `retire` call removed.
public struct RetirementResult: Sendable, Equatable {
    /// Update tokens retired.
    public var tokens: [DeviceToken] = []
    /// Activity ids of broadcast subscriptions retired.
    public var subscriptions: [String] = []
    /// Per channel, how the number of live broadcast subscriptions changed (negative; no zero entries).
    public var subscriptionDeltas: [String: Int] = [:]

    public init() {}
}

extension Dictionary where Key == String, Value == Int {
    /// Adds `delta` to `key`'s count, dropping the entry when it reaches zero.
    package mutating func add(_ delta: Int, to key: String) {
        let value = self[key, default: 0] + delta
        self[key] = value == 0 ? nil : value
    }
}

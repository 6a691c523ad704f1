import FanfareCore

/// What the registry knows about one activity (a store's `ledger(activityID:...)`).
public struct ActivityLedgerEntry: Sendable, Equatable {
    public var activityID: String
    /// Its live update tokens (usually one).
    public var updateTokens: [DeviceToken] = []
    /// Its live broadcast subscription.
    public var subscription: BroadcastSubscription?
    /// Newest first: how registrations of this activity ended, and when they began.
    public var history: [TokenLedgerEvent] = []

    public init(activityID: String) { self.activityID = activityID }
}

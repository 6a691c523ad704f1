import FanfareCore

/// What a registry offers beyond `TokenStore` about broadcast subscriptions and the ledger: SQLite and PostgreSQL
/// both keep them, with the same rules (the store expectations run against both).
public protocol SubscriptionLedgerStore: TokenStore {
    /// One broadcast subscription, or nil.
    func subscription(
        activityID: String, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> BroadcastSubscription?

    /// Removes broadcast subscriptions (by activity id) of one app. Unknown ones are ignored.
    func unregisterSubscriptions(
        activityIDs: [String], bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> RetirementResult

    /// What the registry knows about one activity of one app, or nil when it knows nothing.
    func ledger(
        activityID: String, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> ActivityLedgerEntry?

    /// Deletes ledger history older than `before` (UNIX ms); returns how many rows went.
    @discardableResult
    func pruneLedgerHistory(before: Int64) throws(RegistryError) -> Int

    /// Live broadcast subscriptions following one channel of one app.
    func subscriptionCount(
        channel: String, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> Int
}

/// How long the ledger keeps what happened to tokens, unless configured (`fanfare serve --ledger-retention-days`).
public enum LedgerRetention {
    public static let `default`: Duration = .seconds(30 * 86_400)

    /// `retention` in milliseconds, at least one.
    public static func milliseconds(_ retention: Duration) -> Int64 {
        let (seconds, attoseconds) = retention.components
        let (milliseconds, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return seconds < 0 ? 1 : Int64.max / 2 }
        return max(1, milliseconds + attoseconds / 1_000_000_000_000_000)
    }
}

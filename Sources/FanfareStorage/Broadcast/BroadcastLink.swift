/// A Fanfare channel (a match) linked to an APNs broadcast channel (apns-spec.md §8.4): publishing on the
/// Fanfare channel broadcasts on `channelID` for the activities subscribed to it.
public struct BroadcastLink: Sendable, Equatable {
    /// The Fanfare channel.
    public var channel: String
    /// The APNs channel id (base64: may hold `/`, `+`, `=`).
    public var channelID: String
    /// `message-storage-policy`: 0 (no storage) or 1 (the most recent message is stored).
    public var storagePolicy: Int
    /// Fanfare created the APNs channel (and deletes it after the `end` plus its dismissal window); false when
    /// the caller gave it.
    public var createdByUs: Bool
    /// UNIX ms.
    public var createdAt: Int64
    /// When the APNs channel may be deleted (UNIX s); nil while it is in use.
    public var deleteAfter: Int64?

    public init(
        channel: String, channelID: String, storagePolicy: Int, createdByUs: Bool, createdAt: Int64,
        deleteAfter: Int64? = nil
    ) {
        self.channel = channel
        self.channelID = channelID
        self.storagePolicy = storagePolicy
        self.createdByUs = createdByUs
        self.createdAt = createdAt
        self.deleteAfter = deleteAfter
    }
}

/// Where the planner keeps its broadcast links. Every call is one transaction, durable when it returns.
/// `SQLiteTokenStore` implements it on the registry's file (table `broadcast_links`); a server database can too.
public protocol BroadcastLinkStore: AnyObject, Sendable {
    /// Inserts or replaces the link of `link.channel`.
    func saveBroadcastLink(
        _ link: BroadcastLink, bundleID: String, environment: APNsEnvironment)
        throws(RegistryError)
    /// The link of one channel, or nil.
    func broadcastLink(
        channel: String, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError)
        -> BroadcastLink?
    /// Every link of one app, by channel name.
    func broadcastLinks(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [BroadcastLink]
    /// Sets when the link's APNs channel may be deleted (UNIX s). Returns false if the channel has no link.
    @discardableResult
    func scheduleBroadcastLinkDeletion(
        channel: String, bundleID: String, environment: APNsEnvironment, after: Int64
    )
        throws(RegistryError) -> Bool
    /// Links whose deletion time has come (`deleteAfter <= now`, UNIX s), oldest due first.
    func dueBroadcastLinkDeletions(
        now: Int64, bundleID: String, environment: APNsEnvironment
    )
        throws(RegistryError) -> [BroadcastLink]
    /// Forgets a link. Returns false if there was none.
    @discardableResult
    func removeBroadcastLink(
        channel: String, bundleID: String, environment: APNsEnvironment
    )
        throws(RegistryError) -> Bool
}

extension BroadcastLink {
    /// Why a store refuses the link (nil: it may be saved).
    public var validationFailure: String? {
        if channel.isEmpty { return "the channel is empty" }
        if channel.utf8.count > TokenRegistration.maximumChannelNameByteCount { return "the channel name is too long" }
        if channelID.isEmpty { return "the APNs channel id is empty" }
        if channelID.utf8.count > TokenRegistration.maximumFieldByteCount { return "the APNs channel id is too long" }
        if storagePolicy != 0 && storagePolicy != 1 { return "storage policy \(storagePolicy) is not 0 or 1" }
        return nil
    }
}

/// Several nodes: which one deletes an APNs channel whose match ended (a store shared by nodes implements it).
public protocol BroadcastLinkDeletionClaims: BroadcastLinkStore {
    /// Claims the deletion of `channel`'s APNs channel for `claimant` during `claimFor`: true if no other
    /// claimant holds an unexpired claim on it (then only this one deletes it, until the claim runs out).
    func claimBroadcastLinkDeletion(
        channel: String, bundleID: String, environment: APNsEnvironment, claimant: String, claimFor: Duration
    ) throws(RegistryError) -> Bool
}

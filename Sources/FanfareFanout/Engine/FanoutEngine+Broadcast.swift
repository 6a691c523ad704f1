import FanfareClient
import FanfareCore
import FanfareStorage
import Foundation

/// The audience planner's links (docs/fanout.md, "Broadcast channels: the audience planner"): which channels
/// publish through an APNs broadcast channel, kept in the registry (`BroadcastLinkStore`) when the token store
/// is one, and the APNs channels Fanfare created and deletes.
extension FanoutEngine {
    /// Links `channel` to the APNs broadcast channel `channelID` (created by the caller): from now on every
    /// `update` and `end` published on it is one broadcast for the activities subscribed to the channel plus
    /// per-token pushes for the rest, and kick-offs carry `input-push-channel` for iOS 18+ devices. Durable
    /// when it returns. Replaces an earlier link of the channel (Fanfare does not delete the channel it
    /// replaces: `unlinkBroadcastChannel` first if it should go).
    @discardableResult
    public func linkBroadcastChannel(
        _ channel: String, to channelID: BroadcastChannelID, storagePolicy: Int, createdByUs: Bool = false
    ) throws(FanoutError) -> BroadcastLink {
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        guard !channel.isEmpty, channel.utf8.count <= TokenRegistration.maximumChannelNameByteCount else {
            throw .invalidBroadcastLink(
                "the channel name must be 1 to \(TokenRegistration.maximumChannelNameByteCount) bytes")
        }
        guard storagePolicy == 0 || storagePolicy == 1 else {
            throw .invalidBroadcastLink(
                "storage policy \(storagePolicy): APNs knows 0 (no message stored) and 1 (most recent stored)")
        }
        let link = BroadcastLink(
            channel: channel, channelID: channelID.description, storagePolicy: storagePolicy, createdByUs: createdByUs,
            createdAt: Self.wallMilliseconds())
        try control.withLock { state throws(FanoutError) in
            if let linkStore {
                do throws(RegistryError) {
                    try linkStore.saveBroadcastLink(
                        link, bundleID: configuration.bundleID, environment: configuration.environment)
                } catch {
                    throw .registry(error)
                }
            }
            state.links[channel] = LinkedChannel(channelID: channelID, storagePolicy: storagePolicy, link: link)
        }
        configuration.logger.notice(
            "broadcast: channel \(channel) publishes through APNs channel \(channelID) (policy \(storagePolicy))")
        return link
    }

    /// Creates an APNs broadcast channel through the management API (`FanoutConfiguration.channelManagement`)
    /// and links `channel` to it; Fanfare deletes it after the channel's `end` and its dismissal window.
    @discardableResult
    public func createBroadcastChannel(
        for channel: String, storagePolicy: ChannelStoragePolicy
    ) async throws(FanoutError)
        -> BroadcastLink
    {
        guard let manager = channelManager else { throw .noChannelManagement }
        let channelID: BroadcastChannelID
        do { channelID = try await manager.create(storagePolicy: storagePolicy) } catch { throw .broadcast(error) }
        do {
            return try linkBroadcastChannel(
                channel, to: channelID, storagePolicy: storagePolicy.rawValue, createdByUs: true)
        } catch {
            // Not linked: the channel would only count against the app's 10,000.
            try? await manager.delete(channelID)
            throw error
        }
    }

    /// Ends a link now: the channel publishes per-token only from the next update, and the APNs channel is
    /// deleted if Fanfare created it. Returns the link that was removed (nil if there was none).
    @discardableResult
    public func unlinkBroadcastChannel(_ channel: String) async throws(FanoutError) -> BroadcastLink? {
        guard let linked = try linked(channel) else { return nil }
        if linked.link.createdByUs {
            guard let manager = channelManager else { throw .noChannelManagement }
            do {
                try await manager.delete(linked.channelID)
            } catch let error where error.kind == .rejected(status: 400, reason: .channelNotRegistered, rawReason: nil)
            {
                // Already gone at APNs: nothing more to delete.
            } catch {
                throw .broadcast(error)
            }
        }
        try forgetLink(channel)
        return linked.link
    }

    /// The link of `channel`, if it has one (several nodes: as the shared store has it now).
    public func broadcastLink(of channel: String) throws(FanoutError) -> BroadcastLink? {
        try linked(channel)?.link
    }

    /// Every link, by channel name (several nodes: as the shared store has them now).
    public var broadcastLinks: [BroadcastLink] {
        get throws(FanoutError) {
            if linksAreShared, let linkStore {
                do throws(RegistryError) {
                    return try linkStore.broadcastLinks(
                        bundleID: configuration.bundleID, environment: configuration.environment)
                } catch {
                    throw .registry(error)
                }
            }
            return control.withLock { state in state.links.values.map(\.link).sorted { $0.channel < $1.channel } }
        }
    }

    /// Activities registered as subscribed to `channel`'s broadcasts (several nodes: counted in the shared
    /// store now, since any node registers them).
    public func broadcastSubscribers(of channel: String) throws(FanoutError) -> Int {
        if linksAreShared, let counts = store as? any SubscriptionLedgerStore {
            do throws(RegistryError) {
                return try counts.subscriptionCount(
                    channel: channel, bundleID: configuration.bundleID, environment: configuration.environment)
            } catch {
                throw .registry(error)
            }
        }
        return control.withLock { $0.subscribers[channel] ?? 0 }
    }

    /// `broadcastSubscribers(of:)` for every channel that has any.
    public func broadcastSubscriberCounts() throws(FanoutError) -> [String: Int] {
        if linksAreShared {
            do throws(RegistryError) {
                return try store.subscriptionCounts(
                    bundleID: configuration.bundleID, environment: configuration.environment)
            } catch {
                throw .registry(error)
            }
        }
        return control.withLock { $0.subscribers }
    }

    // MARK: - Internals

    /// Several nodes keep links in the shared store only: any node may link or unlink, so each reads the store
    /// (this node's memory would be stale). One node: the memory is the store's copy.
    var linksAreShared: Bool { sharedStore != nil && linkStore != nil }

    /// `channel`'s link as the planner uses it: from the shared store (several nodes) or memory.
    func linked(_ channel: String) throws(FanoutError) -> LinkedChannel? {
        guard linksAreShared, let linkStore else { return control.withLock { $0.links[channel] } }
        let link: BroadcastLink?
        do throws(RegistryError) {
            link = try linkStore.broadcastLink(
                channel: channel, bundleID: configuration.bundleID, environment: configuration.environment)
        } catch {
            throw .registry(error)
        }
        guard let link else { return nil }
        guard let channelID = try? BroadcastChannelID(link.channelID) else {
            configuration.logger.error(
                "broadcast: the stored link of \(channel) names channel id '\(link.channelID)', not base64; ignored")
            return nil
        }
        return LinkedChannel(channelID: channelID, storagePolicy: link.storagePolicy, link: link)
    }

    /// The broadcast half of a stored wave (resumed, or started from the shared feed): the APNs channel as
    /// published; the audience as counted then (several nodes) or now; `apns-expiration` from the link's storage
    /// policy (0, which APNs takes on any channel, when the link is gone). Not holding `control`.
    func broadcastPart(of record: WaveRecord) -> BroadcastPart? {
        guard let text = record.broadcastChannelID else { return nil }
        guard let channelID = try? BroadcastChannelID(text) else {
            configuration.logger.error(
                "durable waves: wave \(record.id)'s broadcast channel id is not base64; its broadcast is not sent")
            return nil
        }
        var subscribers = record.broadcastSubscribers ?? 0
        var policy = 0
        if linksAreShared {
            policy = ((try? linked(record.channel)) ?? nil)?.storagePolicy ?? 0
        } else {
            (policy, subscribers) = control.withLock { state in
                (state.links[record.channel]?.storagePolicy ?? 0, state.subscribers[record.channel] ?? 0)
            }
        }
        return BroadcastPart(
            channelID: channelID, subscribers: subscribers,
            expiration: policy == 1 ? record.freshUntil ?? 0 : 0, wave: record.id,
            shard: Self.broadcastShard(record.channel, shards: shards.count))
    }

    func forgetLink(_ channel: String) throws(FanoutError) {
        try control.withLock { state throws(FanoutError) in
            if let linkStore {
                do throws(RegistryError) {
                    try linkStore.removeBroadcastLink(
                        channel: channel, bundleID: configuration.bundleID, environment: configuration.environment)
                } catch {
                    throw .registry(error)
                }
            }
            state.links[channel] = nil
        }
    }

    /// Maintenance (registry thread): the channel's activities retired (its `end` plus the dismissal window):
    /// its link is due for removal at `dueAt` (UNIX s), kept in the store so a failed deletion is tried again,
    /// also after a restart.
    func scheduleLinkRemoval(_ channel: String, dueAt: Int64) {
        let scheduled: Bool = control.withLock { state in
            guard state.links[channel] != nil else { return false }
            state.links[channel]!.link.deleteAfter = dueAt
            return true
        }
        // Several nodes: the link may be another node's; the store says whether there is one.
        guard scheduled || linksAreShared, let linkStore else { return }
        do {
            try linkStore.scheduleBroadcastLinkDeletion(
                channel: channel, bundleID: configuration.bundleID, environment: configuration.environment, after: dueAt
            )
        } catch {
            registryWorker.noteError("broadcast: scheduling the removal of \(channel)'s link: \(error)")
        }
    }

    /// Maintenance (registry thread): links whose removal is due are removed, their APNs channels deleted when
    /// Fanfare created them. A deletion APNs refuses for a transient reason is tried again next pass.
    func removeDueLinks(now: Int64) {
        for channel in dueLinkRemovals(now: now) {
            let done = DispatchSemaphore(value: 0)
            let outcome = LinkRemovalOutcome()
            Task {
                do {
                    _ = try await self.unlinkBroadcastChannel(channel)
                } catch {
                    outcome.error = "\(error)"
                }
                done.signal()
            }
            // Bounded: the management client times out its calls.
            if done.wait(timeout: .now() + .seconds(60)) == .timedOut {
                registryWorker.noteError(
                    "broadcast: removing \(channel)'s link timed out; next maintenance pass tries again")
            } else if let error = outcome.error {
                registryWorker.noteError(
                    "broadcast: removing \(channel)'s link: \(error); next maintenance pass tries again")
            } else {
                configuration.logger.notice("broadcast: \(channel) ended; its link is gone")
            }
        }
    }
}

extension FanoutEngine {
    /// How long a node's claim on deleting a channel's APNs channel lasts (a deletion times out after 60 s).
    static let linkDeletionClaim: Duration = .seconds(300)

    /// Channels whose links are due for removal now. Several nodes: read from the shared store, and only those
    /// this engine claimed, so one node deletes each APNs channel.
    func dueLinkRemovals(now: Int64) -> [String] {
        guard linksAreShared, let linkStore else {
            return control.withLock { state in
                state.links.values.filter { ($0.link.deleteAfter ?? .max) <= now }.map(\.link.channel)
            }
        }
        let (bundleID, environment) = (configuration.bundleID, configuration.environment)
        do {
            let due = try linkStore.dueBroadcastLinkDeletions(now: now, bundleID: bundleID, environment: environment)
            guard let claims = linkStore as? any BroadcastLinkDeletionClaims else { return due.map(\.channel) }
            return try due.map(\.channel).filter { channel in
                try claims.claimBroadcastLinkDeletion(
                    channel: channel, bundleID: bundleID, environment: environment, claimant: claimant,
                    claimFor: Self.linkDeletionClaim)
            }
        } catch {
            registryWorker.noteError("broadcast: reading the links due for removal: \(error); next pass tries again")
            return []
        }
    }
}

private final class LinkRemovalOutcome: @unchecked Sendable {
    var error: String?
}

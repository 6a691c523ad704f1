import FanfareClient
import FanfareCore

/// What the engine's control path asks of a shard, through its lock-free control queue (single pushes have a
/// queue of their own: `Shard.singles`).
enum ShardCommand {
    /// Start a wave on this shard's part of the channel's audience.
    case publish(PublishedUpdate)
    /// Add or replace tokens (already durable in the registry).
    case register(RegistrationBatch)
    /// Remove tokens (unregistered, or retired by age).
    case unregister(TokenBatch)
    /// The channel's activities ended and their dismissal window passed: drop its update tokens.
    case retireChannel(UInt16)
    /// Compact audiences and report the channels this shard has nothing of (see `ChannelSweep`).
    case sweepChannels(ChannelSweep)
    /// Count the live members of one channel's audiences (see `ChannelCensus`).
    case countAudience(ChannelCensus)
    /// The operator closed the invalid-token breaker: settle the held answers (prune their tokens, or keep
    /// them) and resume the paused waves.
    case resumeAfterBreaker(pruneHeldTokens: Bool)
    /// A wave an earlier engine left unfinished (durable waves): pick it up from this shard's checkpoint.
    case resumeWave(ResumedWave)
    /// Several nodes: hand this shard to another node (see `ShardRelease`).
    case release(ShardRelease)
}

/// One push to one token, outside any wave (the token's budget still applies if it is registered), and where its
/// result goes (called on the shard's worker thread).
final class SinglePush: @unchecked Sendable {
    @exclusivity(unchecked) var job: PushJob
    let completion: @Sendable (PushResult) -> Void
    init(job: PushJob, completion: @escaping @Sendable (PushResult) -> Void) {
        self.job = job
        self.completion = completion
    }
}

/// One published update, shared by every shard: the payload is encoded once and its bytes sent by every
/// stream.
final class PublishedUpdate: Sendable {
    let wave: Wave
    /// The engine's id of the channel (`ChannelDirectory`).
    let channel: UInt16
    let kind: Audience.Kind
    let sequence: UInt64
    let payload: PushPayload
    /// A kick-off on a channel linked to a broadcast channel: the body for push-to-start tokens of devices that
    /// support broadcast (with `input-push-channel`); the others get `payload`.
    let channelPayload: PushPayload?
    let priority: UpdatePriority
    nonisolated(unsafe) var hasAlert: Bool
    /// `apns-expiration` (UNIX seconds), and the same moment on the monotonic clock (0 = none).
    let expiration: Int64?
    let deadline: UInt64
    let collapseID: String?

    init(
        wave: Wave, update: ChannelUpdate, channel: UInt16, sequence: UInt64, payload: PushPayload, deadline: UInt64,
        channelPayload: PushPayload? = nil
    ) {
        self.wave = wave
        self.channel = channel
        kind = update.audience
        self.sequence = sequence
        self.payload = payload
        self.channelPayload = channelPayload
        priority = update.priority
        hasAlert = update.hasAlert
        expiration = update.freshUntil
        self.deadline = deadline
        collapseID = update.collapseID
    }
}

/// Registrations routed to one shard, in the compact form the shard stores.
final class RegistrationBatch: Sendable {
    struct Entry: Sendable {
        let token: DeviceToken
        let pushToStart: Bool
        let frequentUpdates: Bool
        /// Push-to-start: the device accepts `input-push-channel` (iOS 18+).
        var supportsBroadcast = false
        /// UNIX seconds.
        let registeredAtSeconds: UInt32
        /// The engine's channel ids (`ChannelDirectory`), at least one.
        let channels: [UInt16]
    }

    let entries: [Entry]
    init(_ entries: [Entry]) { self.entries = entries }
}

final class TokenBatch: Sendable {
    let tokens: [DeviceToken]
    init(_ tokens: [DeviceToken]) { self.tokens = tokens }
}

/// A shard's view of one wave: the shared update, this shard's tally, and what is left to account for.
///
/// The references are unowned(unsafe) so that reading a wave on the per-push path costs no reference
/// counting; `Shard.waveOwners` keeps both alive from the wave's start until it finishes on this shard.
struct ShardWave {
    unowned(unsafe) var update: PublishedUpdate
    unowned(unsafe) var tally: WaveTally
    var channel: Int
    var kind: Audience.Kind
    /// Targeted members without an outcome yet (unvisited, in flight, or owed).
    var outstanding: Int
    /// Targeted members the cursor has not reached yet.
    var unvisited: Int
    var cursorDone: Bool
}

/// A wave found unfinished at start-up, for one shard.
final class ResumedWave: Sendable {
    let update: PublishedUpdate
    let checkpoint: ShardCheckpoint?
    let mode: Shard.ResumeMode
    init(update: PublishedUpdate, checkpoint: ShardCheckpoint?, mode: Shard.ResumeMode) {
        self.update = update
        self.checkpoint = checkpoint
        self.mode = mode
    }
}

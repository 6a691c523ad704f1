import FanfareClient
import FanfareCore
import Synchronization

/// The broadcast half of a wave on a channel linked to an APNs broadcast channel (iOS 18+, apns-spec.md §8):
/// one request reaches every activity subscribed to the channel, while the wave's per-token half reaches the
/// rest. Sent, retried and settled by one shard (the channel's broadcast shard) like a member of the wave;
/// its outcome is written by that shard's thread only and read by anyone for reports.
public final class BroadcastPart: Sendable {
    /// The APNs channel the broadcast goes to.
    public let channelID: BroadcastChannelID
    /// Activities registered as subscribed to the channel when the wave was published (what the broadcast
    /// reaches as far as the registry knows: APNs reports no per-device outcome for broadcasts).
    public let subscribers: Int
    /// `apns-expiration`: 0 on a no-storage channel (APNs refuses anything else there), else the update's
    /// `freshUntil` or 0.
    let expiration: Int64
    /// The same on every attempt, and after a restart (`NameBasedUUID(wave:channel:)`).
    let apnsID: PushIdentifier
    /// The shard that sends it.
    let shard: Int

    private let outcomeStorage = Atomic<UInt8>(BroadcastOutcome.pending.rawValue)
    private let reasonStorage = Atomic<Int>(-1)
    /// Requests sent (first attempt, retries, and a resend after a restart).
    private let requestStorage = Atomic<Int>(0)
    /// The priority of the last request sent (0: none yet).
    private let priorityStorage = Atomic<Int>(0)
    private let downgradedStorage = Atomic<Bool>(false)
    /// Requests sent by an earlier run of the engine (restored from the checkpoint).
    private let resentStorage = Atomic<Bool>(false)

    init(channelID: BroadcastChannelID, subscribers: Int, expiration: Int64, wave: UInt64, shard: Int) {
        self.channelID = channelID
        self.subscribers = subscribers
        self.expiration = expiration
        self.shard = shard
        let uuid = NameBasedUUID(wave: wave, channel: channelID)
        var text = [UInt8](repeating: 0, count: PushIdentifier.byteCount)
        text.withUnsafeMutableBytes { uuid.write(to: $0.baseAddress!) }
        apnsID = PushIdentifier(String(decoding: text, as: UTF8.self)) ?? PushIdentifier()
    }

    public var outcome: BroadcastOutcome {
        BroadcastOutcome(rawValue: outcomeStorage.load(ordering: .acquiring)) ?? .pending
    }
    /// Why it failed (APNs' reason, or DeadlineExceeded / ResendLimitReached / Shutdown / Unconfirmed).
    public var failureReason: String? {
        let reason = reasonStorage.load(ordering: .relaxed)
        return reason < 0 ? nil : FailureReason.name(reason)
    }
    public var requests: Int { requestStorage.load(ordering: .relaxed) }
    public var priority: PushPriority? { PushPriority(rawValue: priorityStorage.load(ordering: .relaxed)) }
    /// It asked for priority 10 and the channel's budget had none left: it went at 5.
    public var downgraded: Bool { downgradedStorage.load(ordering: .relaxed) }
    /// It was sent again after a restart, having possibly gone out before it (at most one duplicate).
    public var resentAfterRestart: Bool { resentStorage.load(ordering: .relaxed) }

    // Written by the broadcast shard's thread.

    func recordRequest(priority: PushPriority, downgraded: Bool) {
        requestStorage.store(requestStorage.load(ordering: .relaxed) + 1, ordering: .relaxed)
        priorityStorage.store(priority.rawValue, ordering: .relaxed)
        if downgraded { downgradedStorage.store(true, ordering: .relaxed) }
    }

    func markResent() { resentStorage.store(true, ordering: .relaxed) }

    func finish(_ outcome: BroadcastOutcome, reason: Int? = nil) {
        assert(outcome != .pending)
        if let reason { reasonStorage.store(reason, ordering: .relaxed) }
        outcomeStorage.store(outcome.rawValue, ordering: .releasing)
    }

    /// A resumed wave's part starts from what its checkpoint says.
    func restore(_ state: ShardCheckpoint.Broadcast) {
        requestStorage.store(state.requests, ordering: .relaxed)
        priorityStorage.store(state.priority, ordering: .relaxed)
        if state.downgraded { downgradedStorage.store(true, ordering: .relaxed) }
        if state.resent { resentStorage.store(true, ordering: .relaxed) }
        if let outcome = BroadcastOutcome(rawValue: state.outcome), outcome != .pending {
            finish(outcome, reason: state.reason.map(FailureReason.index(named:)))
        }
    }

    /// What a checkpoint records; `possiblySent`: a request is out, or went out and got no answer (a restart
    /// that sends it again may duplicate it).
    func snapshot(possiblySent: Bool) -> ShardCheckpoint.Broadcast {
        ShardCheckpoint.Broadcast(
            outcome: outcomeStorage.load(ordering: .relaxed), reason: failureReason, requests: requests,
            priority: priorityStorage.load(ordering: .relaxed), downgraded: downgraded,
            resent: resentAfterRestart, possiblySent: possiblySent)
    }
}

/// Where a wave's broadcast is.
public enum BroadcastOutcome: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// Not answered yet (queued, in flight, or waiting to retry).
    case pending = 0
    /// APNs accepted it (200): it fans out to the channel's subscribers, best effort (apns-spec.md §8.3).
    case delivered = 1
    /// Rejected for good or out of retries; `failureReason` says why.
    case failed = 2
    /// A newer update of the channel was published before it went out: the newer broadcast carries the state.
    case superseded = 3
    /// Its `freshUntil` passed before it went out.
    case expired = 4

    public var description: String {
        switch self {
        case .pending: return "pending"
        case .delivered: return "delivered"
        case .failed: return "failed"
        case .superseded: return "superseded"
        case .expired: return "expired"
        }
    }

    public init?(name: String) {
        guard let match = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = match
    }
}

/// The broadcast half of a wave's report.
public struct BroadcastReport: Sendable, Equatable {
    public var channelID: String
    public var subscribers: Int
    public var outcome: BroadcastOutcome
    public var failureReason: String?
    public var requests: Int
    /// The priority of the last request (nil: none sent).
    public var priority: Int?
    public var downgraded: Bool
    public var resentAfterRestart: Bool

    public init(
        channelID: String, subscribers: Int, outcome: BroadcastOutcome, failureReason: String? = nil, requests: Int,
        priority: Int? = nil, downgraded: Bool = false, resentAfterRestart: Bool = false
    ) {
        self.channelID = channelID
        self.subscribers = subscribers
        self.outcome = outcome
        self.failureReason = failureReason
        self.requests = requests
        self.priority = priority
        self.downgraded = downgraded
        self.resentAfterRestart = resentAfterRestart
    }

    init(_ part: BroadcastPart) {
        self.init(
            channelID: part.channelID.description, subscribers: part.subscribers, outcome: part.outcome,
            failureReason: part.failureReason, requests: part.requests, priority: part.priority?.rawValue,
            downgraded: part.downgraded, resentAfterRestart: part.resentAfterRestart)
    }
}

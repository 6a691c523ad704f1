import FanfareCore

/// Which priority a channel update asks for. The engine decides per activity at send time (apns-spec.md §4).
public enum UpdatePriority: String, Sendable, CaseIterable {
    /// Alert-bearing updates (and `start`) at 10 while the activity's budget allows, else 5; everything else
    /// at 5. The recommended policy.
    case auto
    /// 10 while the budget allows; over budget the push goes at 5 and counts as downgraded.
    case immediate
    /// Always 5 (clock ticks, minor changes): never spends the budget.
    case normal
}

extension UpdatePriority {
    /// Whether a push asks for priority 10 (spending the activity's budget): the one place the `auto` rule is
    /// written. `hasAlert`: the update carries an alert, or starts an activity (`ChannelUpdate.hasAlert`).
    public func wantsImmediate(hasAlert: Bool) -> Bool {
        switch self {
        case .auto: hasAlert
        case .immediate: true
        case .normal: false
        }
    }

    /// The priority a single push of `content` asks for (an activity's budget may still send it at 5).
    public func pushPriority(for content: LiveActivityContent) -> PushPriority {
        wantsImmediate(hasAlert: ChannelUpdate.hasAlert(content)) ? .immediate : .normal
    }
}

/// One new state of a live event, for everyone who follows its channel.
///
/// `start` goes to the channel's push-to-start tokens; `update` and `end` to its activities' update tokens.
/// Updates of a channel are ordered by `content.timestamp` (UNIX seconds; equal timestamps by arrival):
/// a newer one supersedes an older one that has not reached a token yet.
public struct ChannelUpdate: Sendable {
    public var channel: String
    public var content: LiveActivityContent
    public var priority: UpdatePriority
    /// UNIX seconds after which this state is not worth showing: not sent (counted as expired) and used as
    /// `apns-expiration`. nil: no local deadline and no expiration header (APNs stores it as usual).
    public var freshUntil: Int64?
    /// `apns-collapse-id` (≤ 64 bytes), optional.
    public var collapseID: String?

    public init(
        channel: String, content: LiveActivityContent, priority: UpdatePriority = .auto, freshUntil: Int64? = nil,
        collapseID: String? = nil
    ) {
        self.channel = channel
        self.content = content
        self.priority = priority
        self.freshUntil = freshUntil
        self.collapseID = collapseID
    }

    var audience: Audience.Kind { content.event == .start ? .pushToStart : .update }
    var hasAlert: Bool { Self.hasAlert(content) }

    /// An alert, or the start of an activity: what `UpdatePriority.auto` sends at 10.
    static func hasAlert(_ content: LiveActivityContent) -> Bool { content.alert != nil || content.event == .start }
}

/// Why `publish` refused an update. A refused update was never taken: nothing of it is sent.
public enum PublishError: Error, Sendable, Equatable, CustomStringConvertible {
    case emptyChannel
    /// The payload does not encode (too large, breaks a Live Activity rule).
    case invalidPayload(PayloadError)
    /// An update with a newer timestamp was already published on this channel.
    case olderThanCurrent(channel: String, timestamp: Int64, current: Int64)
    /// `freshUntil` is already in the past.
    case alreadyExpired(freshUntil: Int64, now: Int64)
    /// `freshUntil` is further ahead than APNs keeps a push (`limitSeconds`): likely milliseconds, not seconds.
    case freshUntilTooFar(freshUntil: Int64, now: Int64, limitSeconds: Int64)
    /// The channel name is longer than a registration may name (`TokenRegistration.maximumChannelNameByteCount`).
    case channelNameTooLong(bytes: Int, limit: Int)
    /// `FanoutConfiguration.maximumUnfinishedWaves` waves are still running: back-pressure, publish again
    /// when some complete.
    case tooManyUnfinishedWaves(limit: Int)
    /// A shard's command queue is full: slow down and publish again.
    case backPressure(shard: Int)
    /// Empty, over 64 bytes, or with bytes an HTTP header value may not carry (`CollapseID.validate`).
    case invalidCollapseID(CollapseIDError)
    /// The engine already tracks `FanoutEngine.maximumChannels` channels.
    case tooManyChannels(limit: Int)
    case shutDown
    /// The wave store could not record the wave (durable waves): nothing of it is sent.
    case storage(String)
    /// The engine shares its store with other nodes (`FanoutConfiguration.leasedShards`): its waves are
    /// published with `publishShared(_:)` and followed with `report(id:)`, since no single node runs all of one.
    case sharedStore
    /// Several nodes: the token's shard is served by another node (only the holder of a shard's lease sends to
    /// its tokens); nothing was sent.
    case shardElsewhere(shard: Int)

    public var description: String {
        switch self {
        case .emptyChannel: return "the update names no channel"
        case .invalidPayload(let error): return "\(error)"
        case .olderThanCurrent(let channel, let timestamp, let current):
            return "channel \(channel) already has an update with timestamp \(current); \(timestamp) is older"
        case .alreadyExpired(let freshUntil, let now):
            return "freshUntil \(freshUntil) is in the past (now \(now))"
        case .freshUntilTooFar(let freshUntil, let now, let limit):
            return
                "freshUntil \(freshUntil) is more than \(limit / 86_400) days after now (\(now)), longer than APNs keeps a "
                + "push: it must be UNIX seconds (not milliseconds)"
        case .channelNameTooLong(let bytes, let limit):
            return "the channel name is \(bytes) bytes long; at most \(limit) allowed"
        case .tooManyUnfinishedWaves(let limit):
            return "\(limit) waves are still running (back-pressure); publish again when some complete"
        case .backPressure(let shard): return "shard \(shard) is full (back-pressure); publish again later"
        case .invalidCollapseID(let error): return "apns-collapse-id: \(error)"
        case .tooManyChannels(let limit):
            return "more than \(limit) channels in use at once; channels no token follows and no wave runs on are "
                + "forgotten at the next maintenance pass"
        case .shutDown: return "the engine is shut down"
        case .storage(let message): return "the wave could not be recorded, so it was not published: \(message)"
        case .sharedStore:
            return
                "this engine shares its store with other nodes: publish with publishShared(_:) and follow the wave with report(id:)"
        case .shardElsewhere(let shard):
            return "the token's shard (\(shard)) is served by another node of the cluster; nothing was sent"
        }
    }
}

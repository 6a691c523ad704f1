/// A published wave as persisted before `publish` returns: everything a restarted engine needs to send the
/// rest of it exactly as the first process would have.
public struct WaveRecord: Sendable, Equatable {
    /// At most `Int64.max` (stores keep ids as signed 64-bit integers).
    public var id: UInt64
    public var bundleID: String
    public var environment: APNsEnvironment
    public var channel: String
    /// LiveActivityEvent raw value: "start", "update", "end".
    public var event: String
    /// The update's timestamp (UNIX s).
    public var timestamp: Int64
    /// UpdatePriority raw value: "auto", "immediate", "normal".
    public var priority: String
    public var hasAlert: Bool
    /// The exact body every push of the wave carries.
    public var payload: [UInt8]
    /// UNIX s.
    public var freshUntil: Int64?
    public var collapseID: String?
    /// UNIX s.
    public var dismissalDate: Int64?
    /// UNIX ms.
    public var publishedAt: Int64
    public var shardCount: Int
    /// Per shard, where the wave's walk starts (engine-defined; may be empty).
    public var startKeys: [UInt64]
    /// The APNs broadcast channel the wave's broadcast part publishes on; nil without a broadcast part.
    public var broadcastChannelID: String?
    /// A start wave: the body for push-to-start tokens that support broadcast (it carries
    /// `input-push-channel`); nil when every token gets `payload`.
    public var channelPayload: [UInt8]?
    /// A wave published by one of several nodes with a broadcast part: the subscribers the publishing node
    /// counted in the shared registry, which every node reports (kept by shared stores only; nil otherwise).
    public var broadcastSubscribers: Int?
    /// A wave published by one of several nodes: the registry's change-feed position when it was published (every
    /// registration acknowledged before the publish is at or before it). A node starts the wave on its shards only
    /// once it has applied its feed this far, so the wave reaches every token registered before it, whichever node
    /// took the registration. Set by shared stores (nil otherwise, and for waves published before migration 10).
    public var registryPosition: Int64?

    public init(
        id: UInt64, bundleID: String, environment: APNsEnvironment, channel: String, event: String, timestamp: Int64,
        priority: String, hasAlert: Bool, payload: [UInt8], freshUntil: Int64?, collapseID: String?,
        dismissalDate: Int64?, publishedAt: Int64, shardCount: Int, startKeys: [UInt64],
        broadcastChannelID: String? = nil, channelPayload: [UInt8]? = nil, broadcastSubscribers: Int? = nil
    ) {
        self.id = id
        self.bundleID = bundleID
        self.environment = environment
        self.channel = channel
        self.event = event
        self.timestamp = timestamp
        self.priority = priority
        self.hasAlert = hasAlert
        self.payload = payload
        self.freshUntil = freshUntil
        self.collapseID = collapseID
        self.dismissalDate = dismissalDate
        self.publishedAt = publishedAt
        self.shardCount = shardCount
        self.startKeys = startKeys
        self.broadcastChannelID = broadcastChannelID
        self.channelPayload = channelPayload
        self.broadcastSubscribers = broadcastSubscribers
    }
}

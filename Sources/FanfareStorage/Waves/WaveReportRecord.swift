/// A complete wave's final report as stored (the engine converts it to and from its `WaveReport`).
public struct WaveReportRecord: Sendable, Equatable {
    public var id: UInt64
    public var bundleID: String
    public var environment: APNsEnvironment
    public var channel: String
    public var event: String
    public var timestamp: Int64
    /// UNIX ms.
    public var publishedAt: Int64
    /// UNIX ms.
    public var completedAt: Int64
    // Counters are never negative.
    public var targeted = 0, sent = 0, delivered = 0, failed = 0, superseded = 0, downgraded = 0, expired = 0,
        invalidated = 0, retried = 0, possibleDuplicates = 0, resentAfterRestart = 0, restarts = 0
    /// Failed outcomes by reason name (any text; counts not negative).
    public var failedByReason: [String: Int] = [:]
    /// ns.
    public var timeToFirstAck: UInt64?
    /// ns.
    public var makespan: UInt64?
    /// The broadcast part of the wave; nil for a wave without one.
    public var broadcast: BroadcastPartRecord?

    public init(
        id: UInt64, bundleID: String, environment: APNsEnvironment, channel: String, event: String, timestamp: Int64,
        publishedAt: Int64, completedAt: Int64
    ) {
        self.id = id
        self.bundleID = bundleID
        self.environment = environment
        self.channel = channel
        self.event = event
        self.timestamp = timestamp
        self.publishedAt = publishedAt
        self.completedAt = completedAt
    }
}

/// A wave's broadcast part as stored: one publish on an APNs broadcast channel for the subscribed activities.
public struct BroadcastPartRecord: Sendable, Equatable {
    public var channelID: String
    /// Live subscriptions the broadcast reached (by the registry's count when it was sent).
    public var subscribers: Int
    /// Broadcast requests sent (retries included).
    public var requests: Int
    /// The engine's outcome name (e.g. "delivered", "failed", "superseded").
    public var outcome: String
    /// APNs' reason when it failed.
    public var reason: String?
    /// The apns-priority sent (5 or 10).
    public var priority: Int?
    /// It asked for priority 10 and went at 5 (the channel's budget was spent).
    public var downgraded: Bool
    /// It was sent again after a restart or a take-over, having possibly gone out before (one possible duplicate,
    /// with the same apns-request-id).
    public var resentAfterRestart: Bool

    public init(
        channelID: String, subscribers: Int, requests: Int, outcome: String, reason: String? = nil,
        priority: Int? = nil,
        downgraded: Bool = false, resentAfterRestart: Bool = false
    ) {
        self.downgraded = downgraded
        self.resentAfterRestart = resentAfterRestart
        self.channelID = channelID
        self.subscribers = subscribers
        self.requests = requests
        self.outcome = outcome
        self.reason = reason
        self.priority = priority
    }
}

extension BroadcastPartRecord {
    /// The stores' `broadcast_flags` column: these bits.
    public static let downgradedFlag: Int64 = 1
    public static let resentFlag: Int64 = 2

    public var flags: Int64 { (downgraded ? Self.downgradedFlag : 0) | (resentAfterRestart ? Self.resentFlag : 0) }
}

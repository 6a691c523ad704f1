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

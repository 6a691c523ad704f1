/// How a worker chooses its connection count (`ClientConfiguration.autoscaling`).
///
/// A fan-out is latency-bound when the pushes it can have in flight (connections × the server's stream
/// limit) are fewer than the rate it could send × the round-trip time (Little's law). Each worker measures,
/// over every `decisionInterval`, whether work waited while every connection was at its stream limit, the
/// mean in flight, the answers and its own CPU time; from these it opens connections (at most
/// `maximumNewConnections` per decision, none while one is still coming up, backing off after failures)
/// and lets surplus ones drain after `idleTimeout` of low use. `ConnectionAutoscaler` is the rule.
public struct ConnectionAutoscaling: Sendable, Equatable {
    /// Connections a worker keeps open (and opens at start).
    public var minimumConnections: Int
    /// The most a worker opens. APNs takes many connections per provider but treats rapid connection churn
    /// as abuse; 16 × 1000 streams is 16,000 pushes in flight per worker, which at a 20-50 ms round trip
    /// carries 300,000+ pushes/s: more than one worker's core can send (~3 µs per push). So 16 is enough
    /// for any latency APNs shows, and a modest footprint per worker.
    public var maximumConnections: Int
    /// How often the worker decides (and over what it measures).
    public var decisionInterval: Duration
    /// How long connections must stay little used (the peak in flight fits in one connection fewer at half
    /// its stream limit) before one is let go (drained: in-flight streams finish, then it closes).
    public var idleTimeout: Duration
    /// New connections per decision at most (APNs' etiquette: grow in steps, never in a burst).
    public var maximumNewConnections: Int
    /// The worker's CPU share (busy time of the interval) above which more connections would not help:
    /// the worker, not the stream credits, is the limit.
    public var cpuBoundShare: Double

    public init(
        minimumConnections: Int = 2, maximumConnections: Int = 16, decisionInterval: Duration = .milliseconds(250),
        idleTimeout: Duration = .seconds(30), maximumNewConnections: Int = 4, cpuBoundShare: Double = 0.9
    ) {
        self.minimumConnections = minimumConnections
        self.maximumConnections = maximumConnections
        self.decisionInterval = decisionInterval
        self.idleTimeout = idleTimeout
        self.maximumNewConnections = maximumNewConnections
        self.cpuBoundShare = cpuBoundShare
    }

    /// The defaults of `fanfare demo`, `fanfare load` and the fan-out engine.
    public static let standard = ConnectionAutoscaling()

    /// Throws the first setting that cannot work (`ClientConfiguration.validate()` calls it).
    func validate() throws(ClientConfigurationError) {
        func require(_ condition: Bool, _ field: String, _ problem: String) throws(ClientConfigurationError) {
            if !condition { throw .invalid(field: "autoscaling.\(field)", problem: problem) }
        }
        let limit = ClientConfiguration.Limits.connectionsPerWorker
        try require(
            (1...limit).contains(minimumConnections), "minimumConnections", "\(minimumConnections) must be 1...\(limit)"
        )
        try require(
            (1...limit).contains(maximumConnections), "maximumConnections", "\(maximumConnections) must be 1...\(limit)"
        )
        try require(
            maximumConnections >= minimumConnections, "maximumConnections",
            "\(maximumConnections) must be at least minimumConnections (\(minimumConnections))")
        try require(
            decisionInterval >= .milliseconds(10) && decisionInterval <= .seconds(3600), "decisionInterval",
            "\(decisionInterval) must be 10 ms...1 h")
        try require(
            idleTimeout >= .zero && idleTimeout <= ClientConfiguration.Limits.longestDuration, "idleTimeout",
            "\(idleTimeout) must be at least 0 and at most \(ClientConfiguration.Limits.longestDuration)")
        try require(
            (1...limit).contains(maximumNewConnections), "maximumNewConnections",
            "\(maximumNewConnections) must be 1...\(limit)")
        try require(cpuBoundShare > 0 && cpuBoundShare <= 1, "cpuBoundShare", "\(cpuBoundShare) must be in (0, 1]")
    }
}

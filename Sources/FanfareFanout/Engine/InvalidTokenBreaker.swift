import FanfareCore
import FanfareStorage
import Logging
import Metrics
import Synchronization

/// Whether the engine deletes tokens APNs calls bad (`FanoutEngine.breakerState`).
public enum InvalidTokenBreakerState: Sendable, Equatable, CustomStringConvertible {
    /// Normal: a token APNs calls dead is removed once its shard judged such answers normal.
    case closed
    /// Too many tokens were called bad at once: nothing is deleted and waves are paused until
    /// `FanoutEngine.resetBreaker(pruneHeldTokens:)`.
    case open(InvalidTokenBreakerTrip)

    public var isOpen: Bool {
        if case .open = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .closed: return "closed"
        case .open(let trip): return "open: \(trip)"
        }
    }
}

/// Why the invalid-token breaker opened: the window of one shard that had too many bad-token answers.
public struct InvalidTokenBreakerTrip: Sendable, Equatable, CustomStringConvertible {
    /// The shard whose window tripped it.
    public var shard: Int
    /// Results in that window.
    public var results: Int
    public var badDeviceToken: Int
    public var deviceTokenNotForTopic: Int
    /// UNIX seconds.
    public var at: Int64
    /// What the engine was configured with, for the message.
    public var host: String
    public var topic: String
    public var environment: APNsEnvironment

    public var description: String {
        "\(badDeviceToken + deviceTokenNotForTopic) of \(results) APNs answers on shard \(shard) said BadDeviceToken "
            + "(\(badDeviceToken)) or DeviceTokenNotForTopic (\(deviceTokenNotForTopic)): the engine is probably pointed at "
            + "the wrong APNs environment or app (host \(host), tokens registered for \(environment), topic \(topic)). "
            + "No token is deleted and waves are paused. Fix the configuration and restart, or call "
            + "resetBreaker(pruneHeldTokens: true) if those tokens really are dead (false keeps them)."
    }
}

/// The engine-wide state of the invalid-token breaker: shards judge their own answers (no lock per push) and
/// open it here; every shard reads `generation` once per loop iteration and pauses its waves while it is odd.
final class InvalidTokenBreaker: Sendable {
    let configuration: InvalidTokenBreakerConfiguration
    /// Even: closed; odd: open. Changes only through `open` and `close`.
    let generation = Atomic<UInt64>(0)
    private let trip = Mutex<InvalidTokenBreakerTrip?>(nil)
    private let logger: Logger
    private let openGauge: Gauge
    private let trips: Counter
    private let resumes: Counter

    /// What the trip report names (the engine's configuration).
    private let host: String
    private let topic: String
    private let environment: APNsEnvironment
    private let wallClock: @Sendable () -> Int64

    init(
        configuration: InvalidTokenBreakerConfiguration, logger: Logger, metrics: (any MetricsFactory)? = nil,
        host: String = "", topic: String = "", environment: APNsEnvironment = .production,
        wallClock: @escaping @Sendable () -> Int64 = { 0 }
    ) {
        self.configuration = configuration
        self.logger = logger
        self.host = host
        self.topic = topic
        self.environment = environment
        self.wallClock = wallClock
        let factory = metrics ?? MetricsSystem.factory
        openGauge = Gauge(label: "fanfare_invalid_token_breaker_open", factory: factory)
        trips = Counter(label: "fanfare_invalid_token_breaker_trips_total", factory: factory)
        resumes = Counter(label: "fanfare_invalid_token_breaker_resets_total", factory: factory)
        openGauge.record(0)
    }

    var isOpen: Bool { generation.load(ordering: .acquiring) & 1 == 1 }

    var state: InvalidTokenBreakerState {
        trip.withLock { $0.map { .open($0) } ?? .closed }
    }

    /// A shard's window tripped (its thread; rare). Returns false if the breaker was open already.
    @discardableResult
    func open(shard: Int, results: Int, badDeviceToken: Int, deviceTokenNotForTopic: Int) -> Bool {
        let details = InvalidTokenBreakerTrip(
            shard: shard, results: results, badDeviceToken: badDeviceToken,
            deviceTokenNotForTopic: deviceTokenNotForTopic,
            at: wallClock(), host: host, topic: topic, environment: environment)
        let opened = trip.withLock { current -> Bool in
            guard current == nil else { return false }
            current = details
            generation.add(1, ordering: .releasing)
            return true
        }
        guard opened else { return false }
        openGauge.record(1)
        trips.increment()
        logger.error(
            "invalid-token breaker open: \(details)",
            metadata: [
                "shard": "\(details.shard)", "results": "\(details.results)",
                "badDeviceToken": "\(details.badDeviceToken)",
                "deviceTokenNotForTopic": "\(details.deviceTokenNotForTopic)",
            ])
        return true
    }

    /// Closes the breaker (operator). Returns false if it was closed.
    func close(pruneHeldTokens: Bool) -> Bool {
        let closed = trip.withLock { current -> Bool in
            guard current != nil else { return false }
            current = nil
            generation.add(1, ordering: .releasing)
            return true
        }
        guard closed else { return false }
        openGauge.record(0)
        resumes.increment()
        logger.warning(
            "invalid-token breaker reset by the operator: held tokens are \(pruneHeldTokens ? "pruned" : "kept"); waves resume"
        )
        return true
    }
}

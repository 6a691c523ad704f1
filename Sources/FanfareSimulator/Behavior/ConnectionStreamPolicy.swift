/// Per-connection HTTP/2 behaviour that follows from decisions: the advertised
/// `SETTINGS_MAX_CONCURRENT_STREAMS` (apns-spec.md §1.3) and the GOAWAY-after-N-streams test knob.
/// One per connection, owned by its worker; the server sends SETTINGS / GOAWAY when told to.
public struct ConnectionStreamPolicy: Sendable {
    public let initialMaxConcurrentStreams: Int
    public let maxConcurrentStreams: Int
    public let dropToOneAfterRejection: Bool
    public let goAwayAfterStreams: Int?

    /// The limit currently advertised to the client.
    public private(set) var advertisedMaxConcurrentStreams: Int
    /// Requests decided on this connection.
    public private(set) var streamsDecided = 0
    /// Whether any push was accepted (the connection's first valid push raises the limit).
    public private(set) var hasAcceptedPush = false

    public init(configuration: SimulatorConfiguration) {
        initialMaxConcurrentStreams = configuration.initialMaxConcurrentStreams
        maxConcurrentStreams = configuration.maxConcurrentStreams
        dropToOneAfterRejection = configuration.dropStreamsToOneAfterRejection
        goAwayAfterStreams = configuration.goAwayAfterStreams
        advertisedMaxConcurrentStreams = configuration.initialMaxConcurrentStreams
    }

    /// Records a decision; returns a new `SETTINGS_MAX_CONCURRENT_STREAMS` to send, if it changed.
    ///
    /// A 200 raises the limit to `maxConcurrentStreams`. With `dropToOneAfterRejection`, a rejection drops
    /// it to 1 — except 410s, which Apple says do not count as errors.
    public mutating func record(_ decision: SimulatorDecision) -> Int? {
        streamsDecided += 1
        let wanted: Int
        switch decision {
        case .accept:
            hasAcceptedPush = true
            wanted = maxConcurrentStreams
        case .reject(let reason, _):
            guard dropToOneAfterRejection, reason.status != 410 else { return nil }
            wanted = 1
        }
        guard wanted != advertisedMaxConcurrentStreams else { return nil }
        advertisedMaxConcurrentStreams = wanted
        return wanted
    }

    /// The server should send GOAWAY (NO_ERROR) now: `goAwayAfterStreams` requests have been decided.
    public var shouldGoAway: Bool {
        guard let goAwayAfterStreams else { return false }
        return streamsDecided >= goAwayAfterStreams
    }
}

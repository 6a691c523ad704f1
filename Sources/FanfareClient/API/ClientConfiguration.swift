import FanfareCore
import FanfareIO
import FanfareTLS
import Logging

/// Where and how the client connects, and the limits it keeps. Defaults follow apns-spec.md §1.
public struct ClientConfiguration: Sendable {
    /// Host name used for DNS, SNI and certificate checks (`api.push.apple.com` in production).
    public var host: String
    public var port: UInt16
    /// TLS settings shared by every connection (trust store, optional client certificate).
    public var tls: TLSContext
    /// Provider-token (JWT) authentication; nil for certificate authentication.
    public var providerTokens: ProviderTokenSource?
    /// `apns-topic` for every request (Live Activities: `<bundle>.push-type.liveactivity`).
    public var topic: String
    /// `apns-push-type` for every request to a token (broadcasts always send `liveactivity`).
    public var pushType: String = "liveactivity"
    /// The app's bundle id, for broadcasts (`:path /4/broadcasts/apps/<bundle id>`, no push-type suffix).
    /// Nil takes it from `topic` without its `.push-type.liveactivity` suffix.
    public var bundleID: String? = nil
    /// The header a broadcast's request id goes in. Apple's samples disagree (apns-spec.md §8.3: the token-auth
    /// sample sends `apns-id`, the certificate sample `apns-request-id`); the answer's id is read from either.
    public var broadcastRequestIDHeader: BroadcastRequestIDHeader = .apnsRequestID

    /// Worker threads, each with its own io_uring ring and connections (thread-per-core).
    public var workerCount: Int = 1
    /// Connections per worker (a fixed count; see `autoscaling`).
    public var connectionsPerWorker: Int = 1 {
        didSet { connectionCountChosen = true }
    }
    /// When set, each worker chooses its connection count within these bounds (Little's law: enough
    /// connections that stream credits stop being the limit) and `connectionsPerWorker` is not used.
    /// A client made directly has a fixed count unless this is set; the fan-out engine autoscales unless a
    /// count or this was set (`FanoutConfiguration`).
    public var autoscaling: ConnectionAutoscaling? = nil {
        didSet { connectionCountChosen = true }
    }
    /// Whether `connectionsPerWorker` or `autoscaling` was assigned (the engine's default depends on it).
    public private(set) var connectionCountChosen = false
    /// Where the client logs what an operator should see (the autoscaler's decisions, at info); nil: nowhere.
    public var logger: Logger? = nil
    /// Which address families to connect over and in which order (the host's addresses are tried in that
    /// order, the next one at once when a connect fails). Lookups run on a resolver thread, never on a
    /// worker's loop.
    public var addressFamilies: AddressFamilyPreference = .system
    /// Connect to these addresses (tried in order, filtered by `addressFamilies`) instead of looking `host`
    /// up; `host` still names the server for TLS and `:authority`. For pinned endpoints (not with `proxy`).
    public var connectAddresses: [SocketAddress]? = nil
    /// Reach `host` through this HTTP proxy (CONNECT): each connection connects to the proxy (its host looked up
    /// like `host`), opens a tunnel within `connectTimeout`, then runs TLS with `host` through it. Nil: directly.
    /// Never taken from `$HTTPS_PROXY`: a proxy is used only when it is set here.
    public var proxy: HTTPProxy? = nil
    /// Our own cap on concurrent streams per connection; the server's SETTINGS may lower it further.
    public var maxConcurrentStreamsPerConnection: Int = 1000
    /// Send exactly one request on a fresh token-auth connection and wait for its 200 before fanning out
    /// (APNs starts such connections at one stream).
    public var firstRequestAlone: Bool = true
    /// Pushes waiting for a stream per worker; beyond this, `submit` reports back-pressure.
    public var pendingCapacityPerWorker: Int = 1 << 16
    /// Cross-thread inbox size per worker.
    public var inboxCapacityPerWorker: Int = 1 << 14

    /// Time allowed for one push from submission to its answer, unless the push sets its own.
    public var requestTimeout: Duration = .seconds(30)
    /// TCP connect + TLS handshake limit.
    public var connectTimeout: Duration = .seconds(10)
    /// Send an HTTP/2 PING after this much silence on a connection ...
    public var pingInterval: Duration = .seconds(60)
    /// ... and drop the connection if nothing arrives within this time after the PING.
    public var pingTimeout: Duration = .seconds(10)
    /// Reconnect back-off: doubles from the minimum to the maximum, with jitter. It applies to failed
    /// connects and to the successors of connections that ended before they proved usable (no answer
    /// other than a 403) or within the minimum of their start; a healthy connection's successor opens at once.
    public var reconnectBackoffMinimum: Duration = .milliseconds(100)
    public var reconnectBackoffMaximum: Duration = .seconds(30)
    /// Drain a connection and open a fresh one after this many streams (HTTP/2 stream ids run out at 2^31).
    public var rotateAfterStreams: Int = 1_000_000_000
    /// How many times one push may be re-sent after its connection failed or refused it unprocessed
    /// (GOAWAY, REFUSED_STREAM, connection loss, ExpiredProviderToken).
    public var maxResends: Int = 5
    /// Re-send pushes whose connection ended after they were sent but before APNs answered (they may have
    /// been processed, so a resend may deliver twice; such results carry `possibleDuplicate`). Off by
    /// default: they end as `.failed(.unconfirmed)` for the caller to decide.
    public var resendUnconfirmed: Bool = false
    /// Pin worker `i` to CPU `cpuAffinity[i % count]` when set.
    public var cpuAffinity: [Int]? = nil
    /// Connection buffers.
    public var buffers: TransportBufferSizes = TransportBufferSizes()

    public init(host: String, port: UInt16 = 443, tls: TLSContext, providerTokens: ProviderTokenSource?, topic: String)
    {
        self.host = host
        self.port = port
        self.tls = tls
        self.providerTokens = providerTokens
        self.topic = topic
    }

    /// What a connection looks up and dials: the proxy when there is one, else the APNs host.
    var dialHost: String { proxy?.host ?? host }
    var dialPort: UInt16 { proxy?.port ?? port }

    /// Connection slots per worker: the autoscaler's maximum, else the fixed count.
    public var connectionSlotsPerWorker: Int { autoscaling?.maximumConnections ?? connectionsPerWorker }

    /// The bundle id broadcasts are published under: `bundleID`, else `topic` without a
    /// `.push-type.liveactivity` suffix (a topic without one is taken as the bundle id).
    public var broadcastBundleID: String {
        if let bundleID { return bundleID }
        return Topic.bundleID(fromLiveActivityTopic: topic).map(String.init) ?? topic
    }
}

/// The header name of a broadcast's request id (apns-spec.md §8.3, marked uncertain).
public enum BroadcastRequestIDHeader: String, Sendable, CaseIterable {
    /// `apns-request-id`, as Apple's certificate sample and its channel-management API name it.
    case apnsRequestID = "apns-request-id"
    /// `apns-id`, as Apple's token-auth broadcast sample sends it.
    case apnsID = "apns-id"
}

import FanfareHTTP2

extension ClientConfiguration {
    /// Upper bounds that keep a configuration inside what the client can allocate and schedule.
    public enum Limits {
        public static let workers = 1024
        public static let connectionsPerWorker = 1024
        /// Stream slots per connection (APNs allows 1000-1500).
        public static let streamsPerConnection = 1 << 16
        /// Stream slots of one worker's connections together (each slot holds a job and a body buffer).
        public static let streamsPerWorker = 1 << 20
        /// Pending and inbox capacity per worker.
        public static let queueCapacity = 1 << 24
        /// The smallest connection buffer: a request's whole header block (2 KiB) must fit the plaintext one.
        public static let minimumBuffer = 4096
        public static let maximumBuffer = 64 << 20
        /// Timeouts, intervals and back-off.
        public static let longestDuration = Duration.seconds(7 * 24 * 3600)
    }

    /// Throws the first setting the client cannot work with (it would trap or allocate without bound).
    /// `APNsClient.init` calls it.
    public func validate() throws(ClientConfigurationError) {
        try validateEndpoint()
        try validateCapacities()
        try validateTimeouts()
        try validateConnecting()
        try validateBuffers()
    }

    /// Where the pushes go: host, port, topic and the bundle id.
    private func validateEndpoint() throws(ClientConfigurationError) {
        try Self.require(!host.isEmpty && !host.utf8.contains(0), "host", "must be a non-empty host name")
        try Self.require(port != 0, "port", "must be 1...65535")
        try Self.require(!topic.isEmpty, "topic", "must not be empty")
        if let bundleID {
            try Self.require(
                !bundleID.isEmpty && bundleID.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") },
                "bundleID",
                "'\(PrintableText.escaping(bundleID))' must be a bundle id (printable ASCII, no spaces or '/')")
        }
    }

    /// Workers, connections, streams and queues: each is allocated up front, so each has a ceiling.
    private func validateCapacities() throws(ClientConfigurationError) {
        try Self.require(
            (1...Limits.workers).contains(workerCount), "workerCount", "\(workerCount) must be 1...\(Limits.workers)")
        try Self.require(
            (1...Limits.connectionsPerWorker).contains(connectionsPerWorker), "connectionsPerWorker",
            "\(connectionsPerWorker) must be 1...\(Limits.connectionsPerWorker)")
        try Self.require(
            (1...Limits.streamsPerConnection).contains(maxConcurrentStreamsPerConnection),
            "maxConcurrentStreamsPerConnection",
            "\(maxConcurrentStreamsPerConnection) must be 1...\(Limits.streamsPerConnection)")
        if let autoscaling { try autoscaling.validate() }
        try Self.require(
            connectionSlotsPerWorker * maxConcurrentStreamsPerConnection <= Limits.streamsPerWorker,
            "maxConcurrentStreamsPerConnection",
            "\(connectionSlotsPerWorker) connections × \(maxConcurrentStreamsPerConnection) streams exceed \(Limits.streamsPerWorker) streams per worker"
        )
        try Self.require(
            (1...Limits.queueCapacity).contains(pendingCapacityPerWorker), "pendingCapacityPerWorker",
            "\(pendingCapacityPerWorker) must be 1...\(Limits.queueCapacity)")
        try Self.require(
            (1...Limits.queueCapacity).contains(inboxCapacityPerWorker), "inboxCapacityPerWorker",
            "\(inboxCapacityPerWorker) must be 1...\(Limits.queueCapacity)")
    }

    private func validateTimeouts() throws(ClientConfigurationError) {
        try Self.requireDuration(requestTimeout, "requestTimeout")
        try Self.requireDuration(connectTimeout, "connectTimeout")
        try Self.requireDuration(pingInterval, "pingInterval")
        try Self.requireDuration(pingTimeout, "pingTimeout")
        try Self.requireDuration(reconnectBackoffMinimum, "reconnectBackoffMinimum")
        try Self.requireDuration(reconnectBackoffMaximum, "reconnectBackoffMaximum")
        try Self.require(
            reconnectBackoffMaximum >= reconnectBackoffMinimum, "reconnectBackoffMaximum",
            "must be at least reconnectBackoffMinimum")
    }

    /// How connections are opened, rotated and retried, and which CPUs the workers run on.
    private func validateConnecting() throws(ClientConfigurationError) {
        if let connectAddresses {
            try Self.require(
                !addressFamilies.apply(to: connectAddresses).isEmpty, "connectAddresses",
                "none of the \(connectAddresses.count) addresses is of the families asked for (\(addressFamilies))")
        }
        if let proxy {
            try Self.require(connectAddresses == nil, "connectAddresses", "give connectAddresses or a proxy, not both")
            try proxy.validate(target: host)
        }
        try Self.require(rotateAfterStreams >= 1, "rotateAfterStreams", "\(rotateAfterStreams) must be at least 1")
        try Self.require(maxResends >= 0, "maxResends", "\(maxResends) must not be negative")
        if let cpuAffinity {
            try Self.require(!cpuAffinity.isEmpty, "cpuAffinity", "must list at least one CPU (or be nil)")
            try Self.require(
                cpuAffinity.allSatisfy { $0 >= 0 && $0 < 1024 }, "cpuAffinity", "CPU numbers must be 0...1023")
        }
    }

    private func validateBuffers() throws(ClientConfigurationError) {
        for (name, size) in [
            ("receive", buffers.receive), ("plaintextIn", buffers.plaintextIn), ("plaintextOut", buffers.plaintextOut),
            ("ciphertextOut", buffers.ciphertextOut),
        ] {
            try Self.require(
                (Limits.minimumBuffer...Limits.maximumBuffer).contains(size), "buffers.\(name)",
                "\(size) bytes must be \(Limits.minimumBuffer)...\(Limits.maximumBuffer)")
        }
    }

    private static func require(
        _ condition: Bool, _ field: String, _ problem: String
    ) throws(ClientConfigurationError) {
        if !condition { throw .invalid(field: field, problem: problem) }
    }

    private static func requireDuration(
        _ value: Duration, _ field: String, allowZero: Bool = false
    ) throws(ClientConfigurationError) {
        let lowOK = allowZero ? value >= .zero : value > .zero
        try require(
            lowOK && value <= Limits.longestDuration, field,
            "\(value) must be \(allowZero ? "at least 0" : "positive") and at most \(Limits.longestDuration)")
    }
}

extension Duration {
    /// Whole nanoseconds, saturating (control plane only).
    var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        if seconds < 0 { return 0 }
        let whole = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if whole.overflow { return .max }
        return whole.partialValue &+ UInt64(attoseconds / 1_000_000_000)
    }
}

/// A client configuration that cannot work, found when the client is created.
public enum ClientConfigurationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The fixed header fields (host, topic, push type, provider token) leave no room in one request's
    /// header block.
    case headersTooLarge(bytes: Int, limit: Int)
    /// A setting out of the range the client can work with.
    case invalid(field: String, problem: String)
    /// `APNsClient(producers:)` needs exactly one producer per worker.
    case producerCount(given: Int, workers: Int)

    public var description: String {
        switch self {
        case .invalid(let field, let problem):
            return "client configuration: \(field): \(problem)"
        case .producerCount(let given, let workers):
            return "client configuration: \(given) producers for \(workers) workers; give one per worker"
        case .headersTooLarge(let bytes, let limit):
            return
                "request headers could take \(bytes) bytes, more than the \(limit) one request may use: shorten the topic or host"
        }
    }
}

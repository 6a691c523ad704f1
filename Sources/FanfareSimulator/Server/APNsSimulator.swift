import FanfareCore
import FanfareIO
import FanfareTLS
import Synchronization
import Glibc

/// A faithful APNs stand-in: the same io_uring + OpenSSL + HTTP/2 frame layer and HPACK as the
/// client, server side (`HTTP2ServerSession`).
///
/// `threads` workers each own a ring, a SO_REUSEPORT listener on the same port, their connections and a
/// pool of request heads, so the simulator scales with cores and is not the bottleneck of a benchmark. With a
/// sandbox listener (`Options.sandboxListen`) another `threads` workers play sandbox on their own port, so one
/// simulator stands in for both of APNs' environments.
public final class APNsSimulator: @unchecked Sendable {
    public struct Options: Sendable {
        public var listen: SocketAddress
        public var tls: TLSContext
        /// Verifies provider tokens (JWT ES256) against the team's public key; nil accepts only
        /// certificate-authenticated connections (every token push then gets MissingProviderToken or
        /// InvalidProviderToken). The apps' keys with a public key of their own (`SimulatedProviderKey`) are
        /// verified with it; this one verifies the others.
        public var verifier: (any ProviderTokenVerifying)?
        public var threads: Int = 1
        public var cpuAffinity: [Int]? = nil
        /// JSON-lines log of accepted pushes (one file; every push is in it before its 200 leaves, see
        /// `AcceptedPushLog` for what survives a killed simulator).
        public var acceptedLogPath: String? = nil
        /// Request heads (about 7 KB each) each worker allocates when it starts; nil = one connection at the
        /// full stream limit (`maxConcurrentStreams`). More are allocated, a chunk of 256 at a time, when
        /// a worker's connections hold more streams at once (never in the steady state).
        public var preallocatedStreamsPerWorker: Int? = nil
        /// Most requests one worker holds at once over all its connections; streams beyond it are refused
        /// with REFUSED_STREAM. nil = no limit but each connection's advertised
        /// SETTINGS_MAX_CONCURRENT_STREAMS, so no stream within it is ever refused. Set it to bound memory.
        public var maxStreamsPerWorker: Int? = nil
        /// Where the channel-management API listens (`/1/apps/<bundle>/channels`, `…/all-channels`,
        /// apns-spec.md §8.2; APNs serves it on its own host and port 2195/2196); nil = no management listener.
        /// Port 0 picks a free port (`managementAddress`). One thread serves it: channel management is rare.
        public var managementListen: SocketAddress? = nil
        /// File the broadcast channels are kept in across restarts (`ChannelStateFile`; `fanfare simulate`
        /// uses `channels` in its state directory); nil = memory only.
        public var channelStateFile: String? = nil
        /// Where the sandbox listens besides `listen`, which then plays production (`configuration.environment`
        /// must be production): `threads` more workers with the configuration's copy for sandbox. Port 0 picks a
        /// free port (`sandboxAddress`); nil = one listener, playing `configuration.environment`.
        public var sandboxListen: SocketAddress? = nil
        /// The sandbox's channel-management listener (with `sandboxListen`): its channels are the sandbox's, kept in
        /// the same table and file as production's (`sandboxChannels`). Port 0 picks a free port.
        public var sandboxManagementListen: SocketAddress? = nil

        public init(listen: SocketAddress, tls: TLSContext, verifier: (any ProviderTokenVerifying)?) {
            self.listen = listen
            self.tls = tls
            self.verifier = verifier
        }
    }

    public let configuration: SimulatorConfiguration
    public let options: Options
    /// Where the simulator listens (the real port when `listen` asked for port 0): production when there is a
    /// sandbox listener too.
    public let boundAddress: SocketAddress
    /// Where the sandbox listens (the real port when `sandboxListen` asked for port 0); nil without one.
    public let sandboxAddress: SocketAddress?
    /// Where the management API listens (the real port when `managementListen` asked for port 0); nil when
    /// there is no management listener.
    public let managementAddress: SocketAddress?
    /// Where the sandbox's management API listens; nil without one.
    public let sandboxManagementAddress: SocketAddress?
    /// The broadcast channels: created, read, listed and deleted on the management port; checked by
    /// broadcasts on the push port.
    public let channels: BroadcastChannels
    /// The sandbox's channels (the same table as `channels`, seen from sandbox); nil without a sandbox listener.
    public let sandboxChannels: BroadcastChannels?
    /// The push workers of every listener.
    private let workers: [SimulatorWorker]
    /// Serve the management ports, apart from the push workers (their stats are `managementStatistics()`).
    private let managementWorkers: [SimulatorWorker]
    private let threads: [IOThread]
    private let stopped = Atomic<Bool>(false)

    public init(configuration: SimulatorConfiguration, options: Options) throws {
        try configuration.validate()
        try Self.validate(options, environment: configuration.environment)
        var options = options
        options.verifier = try Self.verifier(configuration, fallback: options.verifier)
        self.configuration = configuration
        self.options = options
        let channels = try BroadcastChannels(
            environment: configuration.environment, maxChannelsPerApp: configuration.maxChannelsPerApp,
            file: options.channelStateFile.map { ChannelStateFile(path: $0) })
        self.channels = channels
        sandboxChannels = options.sandboxListen == nil ? nil : channels.sharing(environment: .sandbox)
        // The logs first: a log that cannot be opened then leaves no socket open.
        let logs = try Self.makeLogs(configuration, options)
        let listeners = try SimulatorListeners(options, environment: configuration.environment)
        boundAddress = listeners.push[0].address
        sandboxAddress = options.sandboxListen == nil ? nil : listeners.pushAddress(.sandbox)
        managementAddress = listeners.managementAddress(configuration.environment)
        sandboxManagementAddress = options.sandboxListen == nil ? nil : listeners.managementAddress(.sandbox)
        let (workers, managementWorkers) = Self.makeWorkers(
            listeners, logs: logs, configuration: configuration, options: options, channels: channels,
            sandboxChannels: sandboxChannels)
        self.workers = workers
        self.managementWorkers = managementWorkers
        var threads: [IOThread] = []
        for worker in workers + managementWorkers {
            let cpu = options.cpuAffinity.map { $0[worker.index % $0.count] }
            let prefix = worker.configuration.environment == .sandbox ? "fanfare-sbx" : "fanfare-sim"
            let name = worker.role == .management ? prefix + "-mgmt" : "\(prefix)\(worker.index)"
            threads.append(
                try IOThread(name: name, cpu: cpu) { loop in
                    worker.attach(to: loop)
                })
        }
        self.threads = threads
    }

    /// One accepted-push log object per push worker, all on the same file: O_APPEND whole-line writes never
    /// interleave. Empty without a log.
    private static func makeLogs(
        _ configuration: SimulatorConfiguration, _ options: Options
    ) throws -> [AcceptedPushLog] {
        guard let path = options.acceptedLogPath else { return [] }
        // Room for two of the largest records this configuration's heads can hold.
        let record = AcceptedPushLog.worstCaseRecordBytes(
            arenaCapacity: configuration.requestHeadArenaBytes, bodyCapacity: configuration.requestBodyCapacity)
        let workers = options.threads * (options.sandboxListen == nil ? 1 : 2)
        return try (0..<workers).map { _ in
            try AcceptedPushLog(path: path, bufferCapacity: max(AcceptedPushLog.defaultBufferCapacity, 2 * record))
        }
    }

    /// A worker per push socket (each with its own accepted-push log object, when logging) and per management
    /// socket, each with the configuration for its listener's environment.
    private static func makeWorkers(
        _ listeners: SimulatorListeners, logs: [AcceptedPushLog], configuration: SimulatorConfiguration,
        options: Options, channels: BroadcastChannels, sandboxChannels: BroadcastChannels?
    ) -> (push: [SimulatorWorker], management: [SimulatorWorker]) {
        func playing(_ environment: SimulatorConfiguration.Environment) -> SimulatorConfiguration {
            var copy = configuration
            copy.environment = environment
            return copy
        }
        func channelsOf(_ environment: SimulatorConfiguration.Environment) -> BroadcastChannels {
            environment == configuration.environment ? channels : (sandboxChannels ?? channels)
        }
        var push: [SimulatorWorker] = []
        for port in listeners.push {
            for descriptor in port.descriptors {
                let log = logs.isEmpty ? nil : logs[push.count]
                push.append(
                    SimulatorWorker(
                        index: push.count, configuration: playing(port.environment), options: options,
                        listenerFD: descriptor, log: log, channels: channelsOf(port.environment)))
            }
        }
        let management = listeners.management.enumerated().map { offset, port in
            SimulatorWorker(
                index: push.count + offset, role: .management, configuration: playing(port.environment),
                options: options, listenerFD: port.descriptors[0], log: nil, channels: channelsOf(port.environment))
        }
        return (push, management)
    }

    /// The apps' keys that bring their public key are verified with it, the others by `fallback`.
    private static func verifier(
        _ configuration: SimulatorConfiguration, fallback: (any ProviderTokenVerifying)?
    ) throws -> (any ProviderTokenVerifying)? {
        var publicKeys: [String: String] = [:]
        for key in configuration.distinctAppKeys {
            if let pem = key.publicKeyPEM { publicKeys[key.keyID] = pem }
        }
        guard !publicKeys.isEmpty else { return fallback }
        return try KeyedProviderTokenVerifier(publicKeys: publicKeys, fallback: fallback)
    }

    deinit { shutdown() }

    private static func validate(
        _ options: Options, environment: SimulatorConfiguration.Environment
    ) throws(SimulatorConfigurationError) {
        guard options.threads >= 1 && options.threads <= 1024 else {
            throw .invalid(field: "threads", problem: "must be in 1...1024")
        }
        if options.sandboxListen != nil && environment != .production {
            throw .invalid(
                field: "sandboxListen", problem: "needs the main listener to play production (environment is sandbox)")
        }
        if options.sandboxManagementListen != nil && options.sandboxListen == nil {
            throw .invalid(field: "sandboxManagementListen", problem: "needs a sandbox listener (sandboxListen)")
        }
        if let preallocated = options.preallocatedStreamsPerWorker, preallocated < 1 || preallocated > 1 << 24 {
            throw .invalid(field: "preallocatedStreamsPerWorker", problem: "must be in 1...\(1 << 24) (or unset)")
        }
        if let maximum = options.maxStreamsPerWorker, maximum < 1 || maximum > Int(Int32.max) {
            throw .invalid(field: "maxStreamsPerWorker", problem: "must be at least 1 (or unset)")
        }
        if let cpus = options.cpuAffinity, cpus.isEmpty {
            throw .invalid(field: "cpuAffinity", problem: "must list at least one CPU (or be unset)")
        }
    }

    /// Counts by status and reason, merged over workers (a snapshot each worker publishes every tick); only
    /// `environment`'s listener's when given.
    public func statistics(environment: SimulatorConfiguration.Environment? = nil) -> SimulatorStats {
        var total = SimulatorStats()
        for worker in workers where environment == nil || worker.configuration.environment == environment {
            total.merge(worker.publishedStats())
        }
        return total
    }

    /// Counts by status and reason of the management ports (a 201/200/204 counts as accepted); empty without one.
    public func managementStatistics() -> SimulatorStats {
        var total = SimulatorStats()
        for worker in managementWorkers { total.merge(worker.publishedStats()) }
        return total
    }

    /// The most streams any one connection had open at once, and before its first 200 (merged over workers).
    public func streamConcurrency() -> SimulatorStreamConcurrency {
        var total = SimulatorStreamConcurrency()
        for worker in workers {
            let seen = worker.publishedStreamConcurrency()
            total.maxOpenStreams = max(total.maxOpenStreams, seen.maxOpenStreams)
            total.maxOpenStreamsBeforeFirstAccept = max(
                total.maxOpenStreamsBeforeFirstAccept, seen.maxOpenStreamsBeforeFirstAccept)
        }
        return total
    }

    /// Sends GOAWAY on every open connection (clients must resend unanswered streams elsewhere).
    public func goAwayAllConnections(reason: APNsReason? = nil) {
        for worker in workers { worker.requestGoAway(reason: reason) }
    }

    /// Closes listeners and connections and joins the threads.
    public func shutdown() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let all = workers + managementWorkers
        for worker in all { worker.requestStop() }
        let deadline = IOLoop.monotonicNanoseconds() &+ 5_000_000_000
        while !all.allSatisfy(\.isStopped) && IOLoop.monotonicNanoseconds() < deadline { usleep(1000) }
        for thread in threads {
            thread.stop()
            thread.join()
        }
        for worker in workers { worker.flushLog() }
    }

    /// `shutdown()` from an async caller: the threads are joined on a thread of its own, so the caller's
    /// cooperative thread is free meanwhile.
    public func shutdown() async {
        await BlockingHandOff.run(name: "simulator-stop") { self.shutdown() }
    }
}

/// How many request streams a client kept open at once on one connection (maxima over all connections).
/// A client that follows APNs' rules opens one stream on a fresh connection and fans out only after its
/// first 200: `maxOpenStreamsBeforeFirstAccept` then stays 1.
public struct SimulatorStreamConcurrency: Sendable, Equatable {
    /// Most streams open at once on any connection.
    public var maxOpenStreams = 0
    /// Most streams open at once on any connection before the simulator sent that connection's first 200.
    public var maxOpenStreamsBeforeFirstAccept = 0

    public init(maxOpenStreams: Int = 0, maxOpenStreamsBeforeFirstAccept: Int = 0) {
        self.maxOpenStreams = maxOpenStreams
        self.maxOpenStreamsBeforeFirstAccept = maxOpenStreamsBeforeFirstAccept
    }
}

import FanfareCore
import FanfareIO
import FanfareTLS
import Synchronization
import Glibc

/// A faithful APNs stand-in: the same io_uring + OpenSSL + HTTP/2 frame layer and HPACK as the
/// client, server side (`HTTP2ServerSession`).
///
/// `threads` workers each own a ring, a SO_REUSEPORT listener on the same port, their connections and a
/// pool of request heads, so the simulator scales with cores and is not the bottleneck of a benchmark.
public final class APNsSimulator: @unchecked Sendable {
    public struct Options: Sendable {
        public var listen: SocketAddress
        public var tls: TLSContext
        /// Verifies provider tokens (JWT ES256) against the team's public key; nil accepts only
        /// certificate-authenticated connections (every token push then gets MissingProviderToken or
        /// InvalidProviderToken).
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

        public init(listen: SocketAddress, tls: TLSContext, verifier: (any ProviderTokenVerifying)?) {
            self.listen = listen
            self.tls = tls
            self.verifier = verifier
        }
    }

    public let configuration: SimulatorConfiguration
    public let options: Options
    /// Where the simulator listens (the real port when `listen` asked for port 0).
    public let boundAddress: SocketAddress
    /// Where the management API listens (the real port when `managementListen` asked for port 0); nil when
    /// there is no management listener.
    public let managementAddress: SocketAddress?
    /// The broadcast channels: created, read, listed and deleted on the management port; checked by
    /// broadcasts on the push port.
    public let channels: BroadcastChannels
    private let workers: [SimulatorWorker]
    /// Serves the management port, apart from the push workers (its stats are `managementStatistics()`).
    private let managementWorker: SimulatorWorker?
    private let threads: [IOThread]
    private let stopped = Atomic<Bool>(false)

    public init(configuration: SimulatorConfiguration, options: Options) throws {
        try configuration.validate()
        try Self.validate(options)
        self.configuration = configuration
        self.options = options
        let channels = try BroadcastChannels(
            environment: configuration.environment, maxChannelsPerApp: configuration.maxChannelsPerApp,
            file: options.channelStateFile.map { ChannelStateFile(path: $0) })
        self.channels = channels
        // The first listener picks the port (possibly 0 → a free one); the others join it with SO_REUSEPORT.
        let first = try Sockets.listen(on: options.listen, backlog: 4096, reusePort: true)
        boundAddress = first.boundAddress
        var listeners = [first.fd]
        do {
            for _ in 1..<options.threads {
                listeners.append(try Sockets.listen(on: first.boundAddress, backlog: 4096, reusePort: true).fd)
            }
        } catch {
            for fd in listeners { Sockets.close(fd) }
            throw error
        }
        var management: (fd: Int32, boundAddress: SocketAddress)?
        if let managementListen = options.managementListen {
            do {
                management = try Sockets.listen(on: managementListen, backlog: 256, reusePort: false)
            } catch {
                for fd in listeners { Sockets.close(fd) }
                throw error
            }
        }
        managementAddress = management?.boundAddress
        var workers: [SimulatorWorker] = []
        for index in 0..<options.threads {
            // One log object per worker on the same file: O_APPEND whole-line writes never interleave.
            var log: AcceptedPushLog?
            if let path = options.acceptedLogPath {
                // Room for two of the largest records this configuration's heads can hold.
                let record = AcceptedPushLog.worstCaseRecordBytes(
                    arenaCapacity: configuration.requestHeadArenaBytes, bodyCapacity: configuration.requestBodyCapacity)
                log = try AcceptedPushLog(
                    path: path, bufferCapacity: max(AcceptedPushLog.defaultBufferCapacity, 2 * record))
            }
            workers.append(
                SimulatorWorker(
                    index: index, configuration: configuration, options: options, listenerFD: listeners[index],
                    log: log,
                    channels: channels))
        }
        self.workers = workers
        if let management {
            managementWorker = SimulatorWorker(
                index: options.threads, role: .management, configuration: configuration, options: options,
                listenerFD: management.fd, log: nil, channels: channels)
        } else {
            managementWorker = nil
        }
        var threads: [IOThread] = []
        for worker in workers + (managementWorker.map { [$0] } ?? []) {
            let cpu = options.cpuAffinity.map { $0[worker.index % $0.count] }
            let name = worker.role == .management ? "fanfare-sim-mgmt" : "fanfare-sim\(worker.index)"
            threads.append(
                try IOThread(name: name, cpu: cpu) { loop in
                    worker.attach(to: loop)
                })
        }
        self.threads = threads
    }

    deinit { shutdown() }

    private static func validate(_ options: Options) throws(SimulatorConfigurationError) {
        guard options.threads >= 1 && options.threads <= 1024 else {
            throw .invalid(field: "threads", problem: "must be in 1...1024")
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

    /// Counts by status and reason, merged over workers (a snapshot each worker publishes every tick).
    public func statistics() -> SimulatorStats {
        var total = SimulatorStats()
        for worker in workers { total.merge(worker.publishedStats()) }
        return total
    }

    /// Counts by status and reason of the management port (a 201/200/204 counts as accepted); empty without one.
    public func managementStatistics() -> SimulatorStats {
        managementWorker?.publishedStats() ?? SimulatorStats()
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
        let all = workers + (managementWorker.map { [$0] } ?? [])
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

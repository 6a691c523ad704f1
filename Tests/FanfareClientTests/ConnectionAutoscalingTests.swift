// The connection autoscaler against the real simulator (TLS + HTTP/2 over loopback): at 50 ms latency and a
// 100-stream limit, 4 connections carry at most 400 pushes per 50 ms (8,000/s); the autoscaler opens more and
// fills them, and its rate goes well past the 4-connection bound. Connects that fail do not make it churn.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Glibc
import Logging
import Synchronization
import Testing

@Suite(.ownThread) struct ConnectionAutoscalingTests {
    private static let latency: UInt64 = 50_000_000
    private static let streamLimit = 100

    private func latencyBoundSimulator() -> SimulatorConfiguration {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: Int64(Self.latency))
        simulator.maxConcurrentStreams = Self.streamLimit
        return simulator
    }

    @Test func fixedFourConnectionsStayAtTheLatencyBound() async throws {
        let harness = try TestHarness(latencyBoundSimulator())
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 4
        let load = ClosedLoop()
        let client = try APNsClient(configuration: configuration, resultHandler: load, producers: [load])
        defer { client.shutdown() }
        let start = ContinuousClock.now
        #expect(await eventually { load.completed >= 8_000 }, "\(load.completed) answers")
        load.stop()
        #expect(await eventually { client.producersFinished && load.completed == load.produced })
        let seconds = (ContinuousClock.now - start) / .seconds(1)
        let stats = client.statistics
        // 4 × 100 streams, each answer at least 50 ms after its request: never more in flight, never faster.
        #expect(stats.inFlightPeak <= 4 * Self.streamLimit, "\(stats.inFlightPeak)")
        #expect(
            Double(load.completed) <= Double(4 * Self.streamLimit) * (seconds / 0.05 + 1),
            "\(load.completed) in \(seconds) s")
        #expect(stats.connectionsOpened == 4)
        #expect(stats.scaleUps == 0)
        #expect(client.autoscalingReasons == [nil])
    }

    @Test func autoscaledLoadOpensMoreThanFourConnectionsAndFillsThem() async throws {
        // Two simulator threads: the client's one worker is then never starved by the server's work.
        let harness = try TestHarness(latencyBoundSimulator(), threads: 2)
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.autoscaling = ConnectionAutoscaling(
            minimumConnections: 2, maximumConnections: 16, decisionInterval: .milliseconds(100),
            idleTimeout: .seconds(60))
        configuration.pendingCapacityPerWorker = 1 << 14
        let load = ClosedLoop()
        let client = try APNsClient(configuration: configuration, resultHandler: load, producers: [load])
        defer { client.shutdown() }
        // Counts, not rates: more than 4 connections up, and more than the 400 pushes 4 can hold in flight.
        let grew = await eventually(timeout: .seconds(60)) {
            let stats = client.statistics
            return stats.connectionsOpen > 4 && stats.inFlightPeak > 4 * Self.streamLimit
        }
        load.stop()
        #expect(await eventually { client.producersFinished && load.completed == load.produced })
        let stats = client.statistics
        #expect(
            grew,
            "\(stats.connectionsOpen) connections, \(stats.inFlightPeak) in flight at most: \(client.autoscalingReasons)"
        )
        #expect(stats.scaleUps >= 1 && stats.scaleUpFailures == 0)
        #expect(stats.connectionsTarget <= 16 && stats.connectionsOpened <= 16)
        #expect(load.failed == 0, "every push answered 200")
    }

    @Test func autoscaledRateGoesPastTheFourConnectionBound() async throws {
        // The rate, measured in windows of completed pushes (timed on the worker's thread as they complete), so
        // a loaded 2-core machine that starves the test's own task cannot fake or hide it. At 200 ms and 25
        // streams, 4 connections hold at most 100 pushes in flight, each answered 200 ms or more after it left:
        // any 1,000 completions take them at least 200 ms × (1,000 / 100 − 1) = 1.8 s. 16 connections carry
        // 2,000/s (0.5 s per window) at a CPU cost far below what even a starved debug build has.
        var simulator = latencyBoundSimulator()
        simulator.latency = .fixed(nanoseconds: 200_000_000)
        simulator.maxConcurrentStreams = 25
        let harness = try TestHarness(simulator, threads: 2)
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.autoscaling = ConnectionAutoscaling(
            minimumConnections: 2, maximumConnections: 16, decisionInterval: .milliseconds(250),
            idleTimeout: .seconds(60))
        configuration.pendingCapacityPerWorker = 1 << 14
        let load = ClosedLoop(windowSize: 1_000)
        let client = try APNsClient(configuration: configuration, resultHandler: load, producers: [load])
        defer { client.shutdown() }
        let fourConnectionWindow = 0.2 * Double(1_000 / (4 * 25) - 1)  // seconds, the least 4 connections need
        let beaten = await eventually(timeout: .seconds(240)) { load.fastestWindow < fourConnectionWindow / 1.5 }
        load.stop()
        #expect(await eventually { client.producersFinished && load.completed == load.produced })
        #expect(
            beaten,
            "fastest 1,000 completions took \(load.fastestWindow) s, 4 connections need \(fourConnectionWindow) s; reasons: \(client.autoscalingReasons)"
        )
        #expect(client.statistics.connectionsOpened > 4)
        #expect(load.failed == 0, "every push answered 200")
    }

    @Test func idleConnectionsDrainDownToTheMinimumLosingNothing() async throws {
        let harness = try TestHarness(latencyBoundSimulator(), threads: 2)
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.autoscaling = ConnectionAutoscaling(
            minimumConnections: 1, maximumConnections: 8, decisionInterval: .milliseconds(50),
            idleTimeout: .milliseconds(300))
        let load = ClosedLoop()
        let client = try APNsClient(configuration: configuration, resultHandler: load, producers: [load])
        defer { client.shutdown() }
        #expect(
            await eventually(timeout: .seconds(60)) { client.statistics.connectionsOpen > 2 },
            "\(client.autoscalingReasons)")
        load.stop()  // the pushes in flight finish on the connections that are about to go
        #expect(await eventually { client.producersFinished && load.completed == load.produced })
        #expect(
            await eventually(timeout: .seconds(60)) {
                let stats = client.statistics
                return stats.connectionsTarget == 1 && stats.connectionsOpen == 1 && stats.connectionsDraining == 0
            }, "\(client.statistics): \(client.autoscalingReasons)")
        let stats = client.statistics
        #expect(stats.scaleDowns == stats.connectionsOpened - 1, "each surplus connection drained once, none replaced")
        #expect(load.failed == 0 && stats.unconfirmed == 0 && stats.resends == 0, "draining lost nothing")
        #expect(
            client.autoscalingReasons.first??.contains("little used") == true
                || client.autoscalingReasons.first??.contains("not the limit") == true)
    }

    @Test func failingConnectsDoNotMakeItChurn() async throws {
        let harness = try TestHarness(latencyBoundSimulator())
        defer { harness.shutdown() }
        // The client's port reaches the simulator for its first connection only; then nothing listens there.
        let forwarder = try OneConnectionForwarder(to: harness.port)
        defer { forwarder.stop() }
        var configuration = try harness.clientConfiguration(port: forwarder.port)
        configuration.autoscaling = ConnectionAutoscaling(
            minimumConnections: 1, maximumConnections: 8, decisionInterval: .milliseconds(20),
            idleTimeout: .seconds(60),
            maximumNewConnections: 2)
        configuration.reconnectBackoffMinimum = .milliseconds(200)
        configuration.reconnectBackoffMaximum = .seconds(10)
        let decisions = AutoscalerLog()
        configuration.logger = decisions.logger
        let load = ClosedLoop()
        // The window opens before the client exists and closes after its last decision: every attempt falls in
        // it, however long a loaded machine keeps this task from running (a full run once kept it away for 15
        // minutes after the client started, while the back-off let its 2 connects per 10 s through).
        let start = ContinuousClock.now
        let client = try APNsClient(configuration: configuration, resultHandler: load, producers: [load])
        defer { client.shutdown() }
        // Credit-bound on one connection for 3 s: 150 decisions, each of which would open 2 without back-off.
        #expect(await eventually { client.statistics.scaleUpFailures >= 2 })
        try await Task.sleep(for: .seconds(3))
        load.stop()
        #expect(await eventually { client.producersFinished && load.completed == load.produced })
        await client.shutdown()
        let window = ContinuousClock.now - start
        let stats = client.statistics
        // By counts: the n-th failure makes scale-ups wait min(200 ms × 2^(n-1), 10 s); none reset it (nothing
        // got through), and every failure reported it.
        let waits = decisions.failureWaits
        let rule = (1...max(1, waits.count)).map { min(200 * (1 << min($0 - 1, 20)), 10_000) }
        #expect(waits.count == stats.scaleUpFailures && waits == Array(rule.prefix(waits.count)), "\(waits)")
        // By the rule over the window: the fastest it allows is a pair of connects (2 per decision at most)
        // each time the wait set by the previous pair's last failure ends.
        var allowed = 0
        var elapsed = Duration.zero
        while elapsed <= window {
            allowed += 2
            elapsed += .milliseconds(min(200 * (1 << min(allowed - 1, 20)), 10_000))
        }
        #expect(stats.scaleUpFailures <= allowed, "\(stats.scaleUpFailures) failed scale-ups in \(window): \(waits)")
        #expect(stats.connectionsOpened == 1 + stats.scaleUpFailures, "only the first connection ever got through")
        #expect(stats.scaleUps >= 1 && stats.scaleUpFailures <= 2 * stats.scaleUps, "at most 2 connects per scale-up")
        #expect(load.failed == 0 && load.completed > 0, "the one connection kept working")
        #expect(client.autoscalingReasons.allSatisfy { $0 != nil })
    }
}

/// The autoscaler's log lines (`ClientConfiguration.logger`): the wait each failed scale-up set, in order.
private final class AutoscalerLog: Sendable {
    private let waits = Mutex<[Int]>([])

    /// Milliseconds, from "a new connection failed: scale-ups wait 400.0 ms".
    var failureWaits: [Int] { waits.withLock { $0 } }

    var logger: Logger {
        Logger(label: "test.autoscaler") { _ in Handler(log: self) }
    }

    private struct Handler: LogHandler {
        let log: AutoscalerLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            guard event.message.description == "connection scale-up failed", let reason = event.metadata?["reason"]
            else { return }
            let text = "\(reason)"
            guard let range = text.range(of: "scale-ups wait "),
                let end = text.range(of: " ms", range: range.upperBound..<text.endIndex),
                let milliseconds = Double(text[range.upperBound..<end.lowerBound])
            else {
                log.waits.withLock { $0.append(-1) }
                return
            }
            log.waits.withLock { $0.append(Int(milliseconds)) }
        }
    }
}

/// Pushes as fast as streams free up, until `stop()`; counts what it produced and what came back, and (given a
/// window size) times each window of that many completions on the worker's thread.
private final class ClosedLoop: PushProducer, PushResultHandler, @unchecked Sendable {
    private let payload = try! updatePayload()
    private let windowSize: Int
    private var windowStart: ContinuousClock.Instant?
    private let fastest = Mutex<Double>(.infinity)

    init(windowSize: Int = 0) {
        self.windowSize = windowSize
    }
    private let stopped = Atomic<Bool>(false)
    private let producedCount = Atomic<Int>(0)
    private let completedCount = Atomic<Int>(0)
    private let failedCount = Atomic<Int>(0)
    private var next = 0

    func poll(now: UInt64) -> ProducerPoll {
        if stopped.load(ordering: .acquiring) { return .finished }
        next += 1
        producedCount.add(1, ordering: .relaxed)
        return .push(PushJob(token: makeToken(next % 4096), payload: payload, cookie: UInt64(next)))
    }

    func pushCompleted(_ result: PushResult) {
        if !result.isDelivered { failedCount.add(1, ordering: .relaxed) }
        let completed = completedCount.add(1, ordering: .relaxed).newValue
        if windowSize > 0 && completed % windowSize == 0 {
            let now = ContinuousClock.now
            if let start = windowStart {
                let seconds = (now - start) / .seconds(1)
                fastest.withLock { $0 = min($0, seconds) }
            }
            windowStart = now
        }
    }

    /// Seconds the fastest window of `windowSize` completions took (infinity before two windows ended).
    var fastestWindow: Double { fastest.withLock { $0 } }

    func stop() { stopped.store(true, ordering: .releasing) }
    var produced: Int { producedCount.load(ordering: .relaxed) }
    var completed: Int { completedCount.load(ordering: .relaxed) }
    var failed: Int { failedCount.load(ordering: .relaxed) }
}

/// Accepts one TCP connection on a loopback port and forwards it to `target`; then stops listening, so
/// every later connect to the port is refused (nothing listens there). A second socket keeps the port bound
/// (SO_REUSEPORT, never listening), so no other test's server can take it over while the tests run in parallel.
private final class OneConnectionForwarder: @unchecked Sendable {
    let port: UInt16
    private let listener: Int32
    private let reserve: Int32
    private let stopped = Atomic<Bool>(false)

    init(to target: UInt16) throws {
        let listening = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        listener = listening
        var one: Int32 = 1
        _ = setsockopt(listening, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listening, $0, length) }
        }
        guard bound == 0, listen(listening, 1) == 0 else { throw POSIXError(.EADDRINUSE) }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listening, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        let reserving = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        reserve = reserving
        _ = setsockopt(reserving, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size))
        let reserved = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(reserving, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard reserved == 0 else { throw POSIXError(.EADDRINUSE) }
        Thread { [self] in
            let client = accept(listening, nil, nil)
            close(listening)
            guard client >= 0 else { return }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var to = sockaddr_in()
            to.sin_family = sa_family_t(AF_INET)
            to.sin_addr.s_addr = inet_addr("127.0.0.1")
            to.sin_port = target.bigEndian
            let connected = withUnsafeMutablePointer(to: &to) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            if connected == 0 { pump(client, server) }
            close(client)
            close(server)
        }.start()
    }

    /// Copies bytes both ways until either side closes or `stop()`.
    private func pump(_ a: Int32, _ b: Int32) {
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var fds = [pollfd(fd: a, events: Int16(POLLIN), revents: 0), pollfd(fd: b, events: Int16(POLLIN), revents: 0)]
        while !stopped.load(ordering: .relaxed) {
            guard poll(&fds, 2, 100) >= 0 else { return }
            for (from, to) in [(0, 1), (1, 0)] where fds[from].revents != 0 {
                let count = buffer.withUnsafeMutableBytes { read(fds[from].fd, $0.baseAddress, $0.count) }
                guard count > 0 else { return }
                var written = 0
                while written < count {
                    let result = buffer.withUnsafeBytes {
                        write(fds[to].fd, $0.baseAddress! + written, count - written)
                    }
                    guard result > 0 else { return }
                    written += result
                }
            }
        }
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        close(reserve)
    }
}

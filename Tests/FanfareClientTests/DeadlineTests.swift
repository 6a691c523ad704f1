// Pushes that get no answer in time end as `.failed(.deadlineExceeded)`: whether the server is slow or
// no connection can be made at all.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Glibc
import Synchronization
import Testing

/// A port on 127.0.0.1 that refuses connections for as long as this value lives: the socket is bound (so
/// no other test can take the port) but never listens.
struct RefusingPortError: Error {}

final class RefusingPort {
    let fd: Int32
    let port: UInt16

    init() throws {
        let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(socketFD >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socketFD, $0, length) == 0 && getsockname(socketFD, $0, &length) == 0
            }
        }
        guard bound else {
            close(socketFD)
            throw RefusingPortError()
        }
        fd = socketFD
        port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(fd) }
}

@Suite(.ownThread) struct DeadlineTests {
    @Test func slowServerAnswerEndsAsDeadlineExceeded() async throws {
        var simulator = SimulatorConfiguration()
        // Far beyond the deadlines: even a worker starved for seconds finds no answer when it judges them.
        simulator.latency = .fixed(nanoseconds: 30_000_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.requestTimeout = .milliseconds(300)
        configuration.firstRequestAlone = false
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        // Five use the client's timeout, one its own (shorter) one.
        var jobs = (0..<5).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) }
        jobs.append(PushJob(token: makeToken(9), payload: payload, cookie: 99, timeout: .milliseconds(100)))
        try await submitAll(client, jobs)
        #expect(await collector.waitFor(count: jobs.count))
        let results = collector.byCookie()
        #expect(results.count == jobs.count)
        for result in results.values {
            #expect(result.disposition == .failed(.deadlineExceeded), "\(result.cookie): \(result.disposition)")
            #expect(result.disposition.action == .retryLater)
            #expect(result.latencyNanoseconds < 30_000_000_000, "given up before the server answered")
        }
        // The client reset those streams; the connection stays usable.
        #expect(await eventually { client.statistics.inFlight == 0 })
        #expect(client.statistics.failed == jobs.count)
    }

    @Test func pushesWaitingForAnUnreachableServerEndAsDeadlineExceeded() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let refusing = try RefusingPort()
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration(port: refusing.port)
        configuration.requestTimeout = .milliseconds(300)
        configuration.connectionsPerWorker = 2
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let jobs = (0..<20).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) }
        try await submitAll(client, jobs)
        #expect(await collector.waitFor(count: jobs.count))
        let results = collector.byCookie()
        #expect(results.count == jobs.count)
        #expect(results.values.allSatisfy { $0.disposition == .failed(.deadlineExceeded) })
        let error = try #require(client.lastConnectionError, "the client says why nothing was sent")
        #expect(error.contains("\(refusing.port)"), "\(error)")
        #expect(error.lowercased().contains("refused"), "\(error)")
        #expect(client.statistics.connectionsOpened >= 2, "the client kept retrying with back-off")
        withExtendedLifetime(refusing) {}
    }
}

/// Stalls the worker thread that reports `stallOn`'s result for `stall`, as a thread starved of CPU in the middle of
/// a tick would be, after noting whether `ready()` held at that moment.
private final class StallingCollector: PushResultHandler, @unchecked Sendable {
    let collector = ResultCollector()
    private let stallOn: UInt64
    private let stall: Duration
    private let ready: @Sendable () -> Bool
    let readyAtStall = Atomic<Int>(-1)  // -1: not stalled yet; 0 or 1: whether `ready()` held

    init(stallOn: UInt64, stall: Duration, ready: @escaping @Sendable () -> Bool) {
        self.stallOn = stallOn
        self.stall = stall
        self.ready = ready
    }

    func pushCompleted(_ result: PushResult) {
        if result.cookie == stallOn {
            readyAtStall.store(ready() ? 1 : 0, ordering: .relaxed)
            let (seconds, attoseconds) = stall.components
            usleep(UInt32(seconds) * 1_000_000 + UInt32(attoseconds / 1_000_000_000_000))
        }
        collector.pushCompleted(result)
    }
}

extension DeadlineTests {
    /// A worker thread stalled in the middle of a tick (here: inside a result handler) while the answers to its
    /// other pushes arrive and their deadlines pass: when it runs again, it reads those answers before it judges
    /// the deadlines (the sweep judges a deadline only up to `SecureTransport.readThrough`; the tick's clock, read
    /// once before the stall, also keeps that tick's timers from firing on time that passed inside it).
    @Test func aWorkerStalledPastItsPushesDeadlinesReadsTheirAnswersFirst() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 300_000_000)
        simulator.initialMaxConcurrentStreams = 100
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let payload = try updatePayload()
        var judged = 0
        // A round whose set-up a loaded machine spoiled (the later pushes not sent before the stall) is run again.
        for round in 0..<5 where judged == 0 {
            let clientBox = Mutex<APNsClient?>(nil)
            let handler = StallingCollector(stallOn: 1, stall: .milliseconds(2_000)) {
                (clientBox.withLock { $0 }?.statistics.inFlight ?? 0) >= 11
            }
            var configuration = try harness.clientConfiguration()
            configuration.firstRequestAlone = false
            configuration.requestTimeout = .seconds(60)
            let client = try APNsClient(configuration: configuration, resultHandler: handler)
            clientBox.withLock { $0 = client }
            let base = UInt64(round) * 100
            // The connection up and fanned out.
            try await submitAll(client, [PushJob(token: makeToken(0), payload: payload, cookie: 0)])
            #expect(await handler.collector.waitFor(count: 1))
            // One push whose answer stalls the worker, then ten with a deadline that passes during the stall; their
            // answers arrive 300 ms after they were sent, well within it.
            try await submitAll(client, [PushJob(token: makeToken(1), payload: payload, cookie: 1)])
            try await Task.sleep(for: .milliseconds(100))
            try await submitAll(
                client,
                (0..<10).map {
                    PushJob(
                        token: makeToken(2 + $0), payload: payload, cookie: base + 10 + UInt64($0),
                        timeout: .milliseconds(800))
                })
            #expect(await handler.collector.waitFor(count: 12))
            await client.shutdown()
            guard handler.readyAtStall.load(ordering: .relaxed) == 1 else { continue }
            judged += 1
            let late = handler.collector.all.filter { $0.cookie >= base + 10 && !$0.isDelivered }.map {
                "\($0.disposition)"
            }
            #expect(late.isEmpty, "answered pushes judged before their answers were read: \(late)")
        }
        #expect(judged == 1, "no round had its pushes in flight when the worker stalled")
    }
}

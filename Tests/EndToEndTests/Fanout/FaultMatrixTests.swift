// The fault matrix (issue 10 §8): one wave of 100,000 tokens from the fan-out engine (real SQLite registry)
// to `fanfare simulate` in a child process, while the simulator injects, in turn and together: REFUSED_STREAM,
// GOAWAY mid-burst, stream-limit drops to 1, 429/500/503 bursts, connection resets with requests in flight,
// responses held past the client's deadline, and a SIGKILL followed by a restart on the same state directory
// and port (with other faults). Checked afterwards:
// - the wave report is balanced, and every token has exactly one final outcome, agreeing with the report;
// - every token delivered is in the simulator's accepted log (under the apns-id of its delivered attempt);
// - a token is in the log more than once only if its outcome says it may be a duplicate: an attempt ended
//   without a provable "not processed" (`.failed(.unconfirmed)`, `.failed(.deadlineExceeded)`) and the
//   engine sent it again, or a result is marked `possibleDuplicate`.
import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareSQLite
import FanfareStorage
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

/// What the engine saw for each token: every attempt's result, in order.
private final class AttemptLog: Sendable {
    struct Attempt: Sendable {
        var disposition: PushDisposition
        var apnsID: PushIdentifier
        var resends: Int
        var possibleDuplicate: Bool

        /// The request may have reached APNs without the client learning the answer.
        var isAmbiguous: Bool {
            possibleDuplicate || disposition == .failed(.deadlineExceeded)
                || { if case .failed(.unconfirmed) = disposition { return true } else { return false } }()
        }
    }

    private let attempts = Mutex<[DeviceToken: [Attempt]]>([:])
    private let total = Atomic<Int>(0)

    /// On a worker thread, per result: kept cheap (no text) so the engine is not slowed down.
    func record(_ result: PushResult) {
        let attempt = Attempt(
            disposition: result.disposition, apnsID: result.apnsID, resends: result.resends,
            possibleDuplicate: result.possibleDuplicate)
        attempts.withLock { $0[result.token, default: []].append(attempt) }
        total.add(1, ordering: .relaxed)
    }

    var count: Int { total.load(ordering: .relaxed) }
    var byToken: [DeviceToken: [Attempt]] { attempts.withLock { $0 } }
}

@Suite(.ownThread) struct FaultMatrixTests {
    static let audience = 100_000
    /// How long the client waits for an answer. Ten seconds, not the three this test had: on a loaded machine
    /// the simulator process is starved for seconds at a time with thousands of streams open, and every push out
    /// across such a stall ran into a 3 s deadline, six attempts in a row for 3% of the tokens (CI, and locally
    /// with the simulator stopped 2.5 s of every 2.9 s). What is tested is the deadline path, not the machine.
    static let requestTimeout = TestTime.scaled(.seconds(10))
    /// Held responses outlast the client's deadline, so that path is taken.
    static let holdResponses = "0.0003:\(Int((requestTimeout + .seconds(2)).components.seconds))s"

    /// 80-byte update tokens following "final", made with word stores (a debug build is slow at byte loops).
    static func registrations() -> [TokenRegistration] {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var bytes = [UInt8](repeating: 0, count: 80)
        return (0..<audience).map { index in
            var state = UInt64(index) &* 0x9E37_79B9_7F4A_7C15 ^ 0xFA17_3A72
            bytes.withUnsafeMutableBytes { raw in
                for word in 0..<10 {
                    state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                    raw.storeBytes(of: state ^ UInt64(index), toByteOffset: word * 8, as: UInt64.self)
                }
            }
            return TokenRegistration(
                token: try! DeviceToken(bytes: bytes), kind: .update, activityID: "activity-\(index)", deviceID: nil,
                attributesType: nil, bundleID: SimulatorProcess.bundleID, environment: .production,
                frequentUpdates: false,
                channels: ["final"], createdAt: now)
        }
    }

    @Test func oneWaveOf100kTokensThroughEveryFaultAndAKill9() async throws {
        let clock = ContinuousClock()
        let testStart = clock.now
        let directory = try ScratchDirectory("fault-matrix")
        let state = directory.path + "/state"
        let logPath = directory.path + "/accepted.jsonl"
        let common = ["--state-dir", state, "--log", logPath, "--drop-streams-after-rejection"]
        // Before the kill: bursts of 429, 500 and 503 on different periods (alone, and overlapping), GOAWAY
        // every 7000 requests, 1% of streams refused, a quarter of the connections reset after 4000
        // requests, and a few responses held past the client's deadline.
        let before =
            common + [
                "--listen", "127.0.0.1:0", "--latency", "uniform:0ms-1ms", "--seed", "1",
                "--refuse-streams", "0.01", "--goaway-after", "7000",
                "--fault-burst", "TooManyRequests:1:200/5000", "--fault-burst", "InternalServerError:1:150/7000",
                "--fault-burst", "ServiceUnavailable:1:150/9000",
                "--reset-connections", "0.25:4000", "--hold-responses", Self.holdResponses,
            ]
        let first = try await SimulatorProcess(before, outputIn: directory.path, name: "before-kill")
        let port = first.port
        // After the restart (same state directory and port): other rates, a 503 burst by requests and a
        // 429 burst in time, more resets and refusals.
        let after =
            common + [
                "--listen", "127.0.0.1:\(port)", "--latency", "uniform:0ms-2ms", "--seed", "2",
                "--refuse-streams", "0.03", "--goaway-after", "4000",
                "--fault-burst", "ServiceUnavailable:1:100/3000", "--fault-burst", "TooManyRequests:0.5:50ms/400ms",
                "--reset-connections", "0.5:2500", "--hold-responses", Self.holdResponses,
            ]

        let store = try SQLiteTokenStore(path: directory.path + "/registry.db")
        let registrations = Self.registrations()
        try store.register(registrations)
        let attempts = AttemptLog()
        var client = try SimulatorProcess.clientConfiguration(stateDirectory: state, port: port)
        client.workerCount = 2
        client.connectionsPerWorker = 2
        client.requestTimeout = Self.requestTimeout
        client.maxResends = 20
        var configuration = FanoutConfiguration(
            client: client, bundleID: SimulatorProcess.bundleID, environment: .production)
        configuration.minimumInterval = nil
        configuration.retryDelays = [
            .milliseconds(50), .milliseconds(200), .milliseconds(500), .seconds(1), .seconds(2),
        ]
        configuration.onPushResult = { attempts.record($0) }
        // Pushes whose connection died unanswered are sent again (and counted as possible duplicates), so
        // nearly every token is delivered and the duplicate marking is exercised; by default they would end
        // as failed: Unconfirmed.
        configuration.retryUnconfirmed = true
        let engine = try FanoutEngine(configuration: configuration, store: store)
        defer { engine.shutdown() }

        let started = clock.now
        let wave = try engine.publish(
            try scoreUpdate(channel: "final", timestamp: 1_800_000_000, home: 2, away: 1, alert: true))
        // Kill the simulator in the middle of the wave and bring it back on the same port and state.
        let killedAt = try await perform(when: { attempts.count >= Self.audience * 2 / 5 }, timeout: .seconds(120)) {
            () -> Duration in
            first.kill()
            return clock.now - started
        }
        #expect(killedAt != nil, "the wave did not reach 40% before the hang guard")
        let second = try await SimulatorProcess(after, outputIn: directory.path, name: "after-kill")
        #expect(second.port == port)
        #expect(second.output.contains("reusing the localhost certificate"), "\(second.output)")
        #expect(await wave.completionWithin(.seconds(180)), "the wave did not complete: \(wave.report)")
        let elapsed = clock.now - started
        await engine.shutdown()
        #expect(await second.stop() == 0, "\(second.errors)")

        // The wave is balanced and every token has one final outcome that agrees with it.
        let report = wave.report
        print(
            "fault matrix: set-up \(started - testStart), wave of \(Self.audience) in \(elapsed) (SIGKILL at \(killedAt ?? .zero)); \(report)"
        )
        print("fault matrix: simulator before the kill:\n\(first.output)\nafter the restart:\n\(second.output)")
        #expect(report.isComplete)
        #expect(report.targeted == Self.audience)
        #expect(report.accounted == Self.audience, "\(report)")
        #expect(report.superseded == 0 && report.expired == 0)
        let byToken = attempts.byToken
        #expect(byToken.count == Self.audience, "tokens with at least one attempt")
        let finals = byToken.mapValues { $0.last!.disposition }
        let delivered = finals.filter { $0.value == .delivered }
        #expect(delivered.count == report.delivered)
        #expect(finals.count - delivered.count == report.failed + report.invalidated)
        #expect(report.delivered >= Self.audience * 99 / 100, "\(report)")
        #expect(report.possibleDuplicates > 0, "the resets and the SIGKILL leave pushes unanswered: \(report)")

        // Delivered ⇒ in the accepted log, under that attempt's apns-id.
        let accepted = try AcceptedLogFile(path: logPath)
        #expect(
            accepted.unparsable.count <= 1, "only a line cut by the SIGKILL may fail to parse: \(accepted.unparsable)")
        #expect(accepted.tokens.count <= Self.audience, "the log holds only this wave's tokens")
        var missing: [String] = []
        for (token, list) in byToken where list.last!.disposition == .delivered {
            if accepted.lines[list.last!.apnsID.description, default: 0] == 0 { missing.append(token.hexString) }
        }
        #expect(missing.count == 0, "\(missing.count) delivered tokens are not in the log, e.g. \(missing.prefix(3))")

        // In the log more than once ⇒ the outcome says it may be a duplicate.
        var unexplained: [String] = []
        var silentlyResent: [String] = []
        for (token, count) in accepted.tokens where count > 1 {
            let list = (try? DeviceToken(hex: token)).flatMap { byToken[$0] } ?? []
            if list.contains(where: \.isAmbiguous) { continue }
            if list.contains(where: { $0.resends > 0 }) {
                silentlyResent.append(token)
            } else {
                unexplained.append(token)
            }
        }
        let duplicated = accepted.tokens.values.filter { $0 > 1 }.count
        print(
            "fault matrix: \(accepted.recordCount) accepted lines, \(duplicated) tokens accepted more than once, "
                + "\(silentlyResent.count) of them re-sent by the client without saying so; "
                + "\(clock.now - testStart) in all")
        #expect(
            unexplained.count == 0,
            "\(unexplained.count) tokens accepted twice with no attempt that may have been processed unanswered, e.g. \(unexplained.prefix(3))"
        )
        // The client re-sends only what provably never reached APNs; an attempt whose connection died before the
        // answer ends `.failed(.unconfirmed)` (or comes back `possibleDuplicate`), so no re-send goes unmarked.
        #expect(
            silentlyResent.count == 0,
            "\(silentlyResent.count) tokens accepted twice after an unmarked client re-send, e.g. \(silentlyResent.prefix(3))"
        )
    }
}

// `fanfare simulate` as a process: its flags fail clearly, its state directory survives restarts, and its
// accepted-push log holds every push a client saw delivered even when the simulator is killed with SIGKILL.
import FanfareClient
import FanfareCore
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct SimulatorProcessTests {
    @Test(arguments: [
        (
            ["--fault-burst", "ServiceUnavailable:1:200"],
            "--fault-burst: fault burst 'ServiceUnavailable:1:200' is not Reason:probability:LENGTH/PERIOD"
        ),
        (["--fault-burst", "Unavailable:1:1/2"], "--fault-burst: fault reason 'Unavailable' is not an APNs reason"),
        (["--fault-burst", "ServiceUnavailable:1:3/2"], "needs 1 <= length <= period"),
        (["--reset-connections", "0.5"], "--reset-connections: connection reset '0.5' is not probability:requests"),
        (["--hold-responses", "0.1:soon"], "--hold-responses: held responses '0.1:soon' is not probability:duration"),
        (["--refuse-streams", "1.5"], "--refuse-streams must be in 0...1"),
        (["--refuse-streams", "often"], "--refuse-streams"),
        (["--goaway-after", "0"], "--goaway-after must be at least 1"),
        (["--max-streams", "0"], "maxConcurrentStreams"),
        (["--max-streams-per-thread", "0"], "--max-streams-per-thread must be at least 1"),
    ])
    func badFlagsAreClearUsageErrors(_ flags: [String], _ message: String) async throws {
        let directory = try ScratchDirectory("process")
        let run = try await SimulatorProcess.run(
            ["--listen", "127.0.0.1:0", "--state-dir", directory.path + "/state", "--duration", "0"] + flags,
            outputIn: directory.path)
        #expect(run.status == 64, "exit \(run.status)\n\(run.output)\n\(run.errors)")
        #expect(run.errors.contains(message), "\(run.errors)")
    }

    /// A damaged state directory stops the simulator with the file and the way out; --regenerate-state
    /// writes new files, and the run after that reuses them.
    @Test func aDamagedStateDirectoryIsNamedAndRegenerateFixesIt() async throws {
        let directory = try ScratchDirectory("process")
        let state = directory.path + "/state"
        let common = ["--listen", "127.0.0.1:0", "--state-dir", state, "--duration", "0"]
        let first = try await SimulatorProcess.run(common, outputIn: directory.path)
        #expect(first.status == 0, "\(first.errors)")
        #expect(first.output.contains("generated a localhost certificate"))
        let ca = try Data(contentsOf: URL(fileURLWithPath: state + "/ca.pem"))

        let second = try await SimulatorProcess.run(common, outputIn: directory.path)
        #expect(second.status == 0 && second.output.contains("reusing the localhost certificate"), "\(second.output)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: state + "/ca.pem")) == ca)

        try "not a certificate".write(toFile: state + "/server.pem", atomically: false, encoding: .utf8)
        let damaged = try await SimulatorProcess.run(common, outputIn: directory.path)
        #expect(damaged.status == 64, "\(damaged.output)\n\(damaged.errors)")
        #expect(
            damaged.errors.contains("server.pem") && damaged.errors.contains("--regenerate-state"), "\(damaged.errors)")

        let regenerated = try await SimulatorProcess.run(common + ["--regenerate-state"], outputIn: directory.path)
        #expect(
            regenerated.status == 0 && regenerated.output.contains("generated a localhost certificate"),
            "\(regenerated.errors)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: state + "/ca.pem")) != ca)
    }

    /// The simulator is killed with SIGKILL in the middle of a burst and restarted on the same state directory
    /// and port. The client, which loaded the CA once, reconnects without a TLS failure and every push ends
    /// once: delivered, or (requests in flight at the kill, with a client that re-sends only what provably
    /// never reached APNs) `.failed(.unconfirmed)`. Every push it saw delivered is in the accepted log (written
    /// before each 200), and a push is in the log twice only if it was sent twice.
    @Test func killedWithSIGKILLAndRestartedOnTheSameStateAndPort() async throws {
        let directory = try ScratchDirectory("process")
        let state = directory.path + "/state"
        let log = directory.path + "/accepted.jsonl"
        let flags = ["--state-dir", state, "--log", log, "--latency", "uniform:0ms-2ms"]
        let first = try await SimulatorProcess(
            ["--listen", "127.0.0.1:0"] + flags, outputIn: directory.path, name: "first")
        let port = first.port

        let collector = ResultCollector()
        var configuration = try SimulatorProcess.clientConfiguration(stateDirectory: state, port: port)
        // Generous: on a loaded machine the second (debug) simulator process may take many seconds to start.
        configuration.requestTimeout = .seconds(120)
        configuration.maxResends = 50
        let client = try APNsClient(configuration: configuration, resultHandler: collector)
        defer { client.shutdown() }
        let payload = try updatePayload()
        let count = 6000
        let submitting = Task {
            try await submitAll(
                client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        }

        let killedAt = try await perform(when: { collector.count >= 1500 }, timeout: .seconds(120)) { () -> Int in
            first.kill()
            return collector.count
        }
        #expect(killedAt != nil, "the first simulator answered 1500 pushes")
        let second = try await SimulatorProcess(
            ["--listen", "127.0.0.1:\(port)"] + flags, outputIn: directory.path, name: "second")
        #expect(second.port == port)
        #expect(second.output.contains("reusing the localhost certificate"), "\(second.output)")
        try await submitting.value
        #expect(await collector.waitFor(count: count, timeout: .seconds(180)))
        #expect(await second.stop() == 0, "\(second.errors)")

        let results = collector.byCookie()
        #expect(results.count == count)
        let undelivered = results.values.filter { result in
            if case .failed(.unconfirmed) = result.disposition { return false }
            return !result.isDelivered
        }
        #expect(undelivered.isEmpty, "\(undelivered.prefix(3).map(\.disposition))")
        #expect(results.values.filter(\.isDelivered).count > count / 2)
        let accepted = try AcceptedLogFile(path: log)
        #expect(accepted.unparsable.count <= 1, "only a line cut by the kill may fail to parse: \(accepted.unparsable)")
        for result in results.values where result.isDelivered {
            #expect(
                accepted.lines[result.apnsID.description, default: 0] >= 1,
                "delivered \(result.apnsID) is not in the log")
        }
        for result in results.values where accepted.lines[result.apnsID.description, default: 0] > 1 {
            #expect(
                result.resends > 0 || result.possibleDuplicate, "\(result.apnsID) is in the log twice but was sent once"
            )
        }
        #expect(first.output.contains("reusing") == false && first.output.contains("generated a localhost certificate"))
    }
}

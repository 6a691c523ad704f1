// `fanfare simulate` with broadcast channels, as a child process: the management port and the channel file
// it prints, channels kept across a kill -9 and a restart on the same --state-dir, the 2025 key flags, and a
// damaged channel file or bad flags refused at start-up.
import FanfareCore
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct SimulateChannelsCommandTests {
    /// The port in the line starting with `prefix` (`… https://127.0.0.1:<port>`), once it is printed.
    private func port(after prefix: String, in simulator: SimulatorProcess) async throws -> UInt16 {
        var found: UInt16?
        _ = await eventually {
            guard let line = simulator.output.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }),
                let colon = line.lastIndex(of: ":")
            else { return false }
            found = UInt16(line[line.index(after: colon)...])
            return found != nil
        }
        return try #require(found, "no '\(prefix)' line in:\n\(simulator.output)")
    }

    private func bearer(_ state: String, keyID: String = SimulatorProcess.keyID) throws -> (String, String) {
        let signer = try ProviderTokenSigner(
            privateKeyPEMFile: state + "/AuthKey_\(SimulatorProcess.keyID).p8", keyID: keyID,
            teamID: SimulatorProcess.teamID)
        return ("authorization", "bearer \(try signer.mint(issuedAt: Int64(Date().timeIntervalSince1970)).jwt)")
    }

    @Test func channelsSurviveAKilledSimulator() async throws {
        let scratch = try ScratchDirectory("simulate-channels")
        let state = scratch.path + "/state"
        let flags = [
            "--listen", "127.0.0.1:0", "--management-port", "0", "--state-dir", state, "--key-environment",
            "SANDBOXKEY=sandbox",
        ]
        let first = try await SimulatorProcess(flags, outputIn: scratch.path, name: "first")
        let management = try await port(after: "channel management on https://", in: first)
        #expect(first.output.contains("broadcast channels: kept in \(state)/channels (0 found)"), "\(first.output)")
        let path = "/1/apps/\(SimulatorProcess.bundleID)/channels"
        let created = try await nghttp(
            port: management, path: path, headers: [try bearer(state)],
            body: #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
        let id = try #require(try created.response.header("apns-channel-id"), "\(created.body)")
        let refused = try await nghttp(
            port: management, path: path, headers: [try bearer(state, keyID: "SANDBOXKEY")],
            body: #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
        #expect(refused.reason == APNsReason.badEnvironmentKeyIdInToken.rawValue)
        first.kill()

        let second = try await SimulatorProcess(flags, outputIn: scratch.path, name: "second")
        let managementAgain = try await port(after: "channel management on https://", in: second)
        #expect(second.output.contains("(1 found)"), "\(second.output)")
        let list = try await nghttp(
            port: managementAgain, path: "/1/apps/\(SimulatorProcess.bundleID)/all-channels",
            headers: [try bearer(state)])
        #expect(list.json?["channels"] as? [String] == [id])
        #expect(await second.stop() == 0)
    }

    @Test func memoryChannelsSayWhereTheyLive() async throws {
        let scratch = try ScratchDirectory("simulate-memory-channels")
        let simulator = try await SimulatorProcess(
            ["--listen", "127.0.0.1:0", "--state-dir", scratch.path + "/state", "--memory-channels"],
            outputIn: scratch.path, name: "sim")
        #expect(
            await eventually { simulator.output.contains("broadcast channels: in memory only") }, "\(simulator.output)")
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/state/channels"))
        _ = await simulator.stop()
    }

    @Test func aDamagedChannelFileStopsTheStartNamingTheFile() throws {
        let scratch = try ScratchDirectory("simulate-damaged-channels")
        let state = scratch.path + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        try "fanfare-simulator-channels 1\nchannel production 7 AAAAAAAAAAAAAAAAAAAAAA== com.example.fanfare\n"
            .write(toFile: state + "/channels", atomically: true, encoding: .utf8)
        let run = try FanfareExecutable.run([
            "simulate", "--listen", "127.0.0.1:0", "--state-dir", state, "--duration", "30",
        ])
        #expect(run.status == 64, "\(run.stderr)")
        #expect(run.stderr.contains("\(state)/channels") && run.stderr.contains("line 2"), "\(run.stderr)")
    }

    @Test(arguments: [
        ["--key-environment", "KEY=staging"], ["--key-environment", "KEY"], ["--key-topics", "KEY="],
        ["--key-topics", "=com.a"],
        ["--broadcast-start-reason", "Unregistered"], ["--environment-key-reason", "Forbidden"],
        ["--management-port", "70000"],
        ["--max-channels=-1"],
    ])
    func badChannelAndKeyFlagsAreRefused(_ flags: [String]) throws {
        let scratch = try ScratchDirectory("simulate-bad-flags")
        let run = try FanfareExecutable.run(
            ["simulate", "--listen", "127.0.0.1:0", "--state-dir", scratch.path, "--duration", "30"] + flags)
        #expect(run.status == 64, "\(flags): exit \(run.status): \(run.stderr)")
        let lines = run.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].hasPrefix("fanfare: "), "\(flags): \(run.stderr)")
    }
}

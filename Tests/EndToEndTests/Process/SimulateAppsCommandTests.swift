// `fanfare simulate --apps FILE` as a child process: it listens on the ports the apps file names, production and
// sandbox, and prints them; a token's environment decides where it is accepted; a bad apps file, or the single
// app's flags beside it, stop it at once with exit 64 and one line.
import FanfareCore
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct SimulateAppsCommandTests {
    @Test func listensOnTheFilesPortsAndPrintsThem() async throws {
        let production = UInt16(try PostgresServer.freePort())
        let sandbox = UInt16(try PostgresServer.freePort())
        // The CA the apps file names is the one the simulator writes into its fresh state directory.
        let estate = try AppsEstate(
            "simulate-apps", endpoints: ["production": production, "sandbox": sandbox], caFile: "state/ca.pem")
        let log = estate.scratch.path + "/accepted.jsonl"
        let simulator = try await SimulatorProcess(
            [
                "--apps", estate.file, "--state-dir", estate.scratch.path + "/state", "--log", log,
                "--sandbox-token-prefix", AppsEstate.sandboxPrefix, "--memory-channels",
            ], outputIn: estate.scratch.path, name: "sim")
        #expect(simulator.port == production)
        #expect(
            await eventually { simulator.output.contains("simulating APNs sandbox on https://127.0.0.1:\(sandbox)\n") },
            "\(simulator.output)")
        #expect(simulator.output.contains("app \(AppsEstate.league) (team TEAM999999): keys TOPIC00001"))

        for (index, port, environment) in [
            (1, production, "production"), (2, sandbox, "sandbox"), (3, production, "sandbox"),
        ] {
            let token = AppsEstate.token(index, environment == "sandbox" ? .sandbox : .production)
            let run = try await nghttp(
                port: port, path: "/3/device/\(token)",
                headers: AppsEstate.pushHeaders(AppsEstate.scores, authorization: try estate.bearer("SANDBOX001")),
                body: AppsEstate.liveActivityBody)
            let expected = index == 2 ? nil : APNsReason.badEnvironmentKeyIdInToken
            #expect(run.reason == expected?.rawValue, "\(environment) token on port \(port)")
        }
        let token = AppsEstate.token(4, .sandbox)
        let wrongPlace = try await nghttp(
            port: production, path: "/3/device/\(token)",
            headers: AppsEstate.pushHeaders(AppsEstate.scores, authorization: try estate.bearer("PROD000001")),
            body: AppsEstate.liveActivityBody)
        #expect(wrongPlace.reason == APNsReason.badDeviceToken.rawValue, "a sandbox token sent to production")

        #expect(await simulator.stop() == 0)
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 1)
        #expect(
            lines.first?.contains(
                #""environment":"sandbox","bundle-id":"com.example.scores","key-id":"SANDBOX001","team-id":"TEAM123456""#
            )
                == true, "\(lines)")
    }

    @Test(
        arguments: [
            (#"{"apps": []}"#, [String](), "lists no app"),
            ("not json", [], "is not valid JSON"),
            (nil, ["--bundle-id", "com.example.x"], "drop --bundle-id"),
            (nil, ["--sandbox"], "drop --sandbox"),
            (nil, ["--sandbox-token-prefix", "xyz"], "sandboxTokenPrefix"),
        ] as [(String?, [String], String)])
    func aBadAppsFileOrFlagStopsTheStart(json: String?, flags: [String], problem: String) throws {
        let estate = try AppsEstate("simulate-bad-apps")
        if let json { try json.write(toFile: estate.file, atomically: true, encoding: .utf8) }
        let run = try FanfareExecutable.run(
            [
                "simulate", "--apps", estate.file, "--listen", "127.0.0.1:0", "--sandbox-listen", "127.0.0.1:0",
                "--state-dir", estate.scratch.path + "/state", "--duration", "30",
            ] + flags)
        #expect(run.status == 64, "exit \(run.status): \(run.stderr)")
        let lines = run.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].hasPrefix("fanfare: ") && lines[0].contains(problem), "\(run.stderr)")
    }
}

// The `fanfare` executable itself: configuration errors are reported at once and clearly, flags that would
// overflow or trap are refused with exit 64 and one line.
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Glibc
import Testing

/// Runs the `fanfare` built next to this test bundle.
enum FanfareExecutable {
    static var path: String? { path(named: "fanfare") }

    /// One of the package's executables (`fanfare`, `fanfare-demo`) built next to this test bundle.
    static func path(named name: String) -> String? {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for candidate in [directory, directory.deletingLastPathComponent()] {
            let path = candidate.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }

    /// Exit status, standard error and how long it took; the process is killed after `limit`.
    static func run(
        _ arguments: [String], environment: [String: String]? = nil, limit: Duration = .seconds(60)
    ) throws -> (status: Int32, stderr: String, elapsed: Duration) {
        let executable = try #require(
            path, "the fanfare executable is built with the tests (swift build --build-tests)")
        let start = ContinuousClock.now
        let run = try ChildProcess.run(executable, arguments, environment: environment, timeout: limit)
        return (run.timedOut ? -1 : run.status, run.stderr, ContinuousClock.now - start)
    }
}

@Suite(.ownThread) struct CommandLineTests {
    private func connectionFlags(_ harness: TestHarness) -> [String] {
        [
            "--endpoint", "https://127.0.0.1:\(harness.port)", "--auth-key", harness.keys.privateKeyFile, "--key-id",
            Fixture.keyID,
            "--team-id", Fixture.teamID, "--bundle-id", Fixture.bundleID,
        ]
    }

    @Test func pushReportsARejectedCertificateAtOnce() throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        // No --ca-file: the system's trust store does not know the simulator's CA.
        let token = String(repeating: "ab", count: 32)
        let run = try FanfareExecutable.run(
            ["push"] + connectionFlags(harness) + ["--token", token, "--timeout", "60"])
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains("certificate verify failed"), "\(run.stderr)")
        #expect(run.elapsed < .seconds(30), "reported after \(run.elapsed), not after the 60 s deadline")

        // With the CA the same push is delivered.
        let good = try FanfareExecutable.run(
            ["push"] + connectionFlags(harness) + ["--ca-file", harness.keys.caFile, "--token", token])
        #expect(good.status == 0, "\(good.stderr)")
    }

    static let badLoadFlags: [[String]] = [
        ["--duration", "inf"], ["--duration", "nan"], ["--duration", "1e300"], ["--streams", "2000000"],
        ["--streams", "0"],
        ["--connections", "100000"], ["--threads", "0"], ["--threads", "100000"], ["--rate", "inf"],
        ["--rate", "1e-300"],
        ["--tokens", "100000000000"], ["--token-bytes", "100000"], ["--pushes=-1"],
        ["--connections", "1000", "--streams", "60000"],
        ["--timeout", "inf"], ["--timeout=-1"], ["--address-family", "ipv5"],
        ["--proxy", "https://127.0.0.1:3128"], ["--proxy", "http://127.0.0.1"], ["--proxy", "127.0.0.1:3128"],
    ]

    @Test(arguments: badLoadFlags)
    func loadRefusesFlagsThatWouldTrap(_ flags: [String]) throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let run = try FanfareExecutable.run(
            ["load"] + connectionFlags(harness) + ["--ca-file", harness.keys.caFile] + flags)
        #expect(run.status == 64, "\(flags): exit \(run.status): \(run.stderr)")
        let lines = run.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].hasPrefix("fanfare: "), "\(flags): \(run.stderr)")
    }

    /// `--proxy` with the credentials in $FANFARE_PROXY_AUTH (out of sight of ps): the push goes through the
    /// proxy's tunnel, and the proxy saw the CONNECT with them.
    @Test func pushGoesThroughTheProxyFlag() throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let proxy = try ConnectProxy(.tunnel(authorization: "Basic YWxpY2U6czNjcmV0"))
        defer { proxy.stop() }
        var environment = ProcessInfo.processInfo.environment
        environment["FANFARE_PROXY_AUTH"] = "alice:s3cret"
        let token = String(repeating: "cd", count: 32)
        let run = try FanfareExecutable.run(
            ["push"] + connectionFlags(harness)
                + ["--ca-file", harness.keys.caFile, "--token", token, "--proxy", "http://127.0.0.1:\(proxy.port)"],
            environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(proxy.requestHeads.first?.hasPrefix("CONNECT 127.0.0.1:\(harness.port) HTTP/1.1\r\n") == true)

        // Without the credentials the proxy answers 407, and the push says so when its deadline passes.
        let refused = try FanfareExecutable.run(
            ["push"] + connectionFlags(harness)
                + [
                    "--ca-file", harness.keys.caFile, "--token", token, "--proxy", "http://127.0.0.1:\(proxy.port)",
                    "--timeout", "1",
                ])
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.contains("refused CONNECT 127.0.0.1:\(harness.port): 407"), "\(refused.stderr)")
    }

    static let badProxies: [(command: String, url: String, expected: String)] = [
        ("push", "https://proxy:3128", "https:// proxies (TLS to the proxy) are not supported"),
        ("push", "proxy:3128", "must be http://host:port"),
        ("push", "http://alice:secret@proxy", "has no port"),
        ("serve", "socks5://proxy:1080", "only http:// proxies (HTTP CONNECT) are supported"),
    ]

    @Test(arguments: badProxies)
    func aBadProxyURLIsAUsageError(_ bad: (command: String, url: String, expected: String)) throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let directory = NSTemporaryDirectory() + "fanfare-proxy-flag-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let arguments =
            bad.command == "push"
            ? ["push"] + connectionFlags(harness) + ["--token", String(repeating: "ab", count: 32)]
            : ["serve", "--simulator", "--database", directory + "/fanfare.db", "--listen", "127.0.0.1:0"]
        let run = try FanfareExecutable.run(arguments + ["--proxy", bad.url])
        #expect(run.status == 64, "\(bad.url): exit \(run.status): \(run.stderr)")
        #expect(run.stderr.contains("--proxy") && run.stderr.contains(bad.expected), "\(run.stderr)")
        #expect(!run.stderr.contains("secret"), "the credentials are not repeated: \(run.stderr)")
    }
}

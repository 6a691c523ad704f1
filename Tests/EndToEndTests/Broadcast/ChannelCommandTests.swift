// `fanfare channel create|read|list|delete` and `fanfare push --channel-id`, the real executable against the
// simulator's push and management listeners over TLS: what goes to stdout (ids only), exit codes, and the
// reason, action and request id of a rejection.
import FanfareCore
import FanfareIO
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite(.ownThread) struct ChannelCommandTests {
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs `fanfare` with `arguments`, capturing both outputs (killed after a minute: a hang guard).
    static func run(_ arguments: [String]) throws -> Run {
        let executable = try #require(FanfareExecutable.path, "the fanfare executable is built with the tests")
        let run = try ChildProcess.run(executable, arguments, timeout: .seconds(60))
        return Run(status: run.timedOut ? -1 : run.status, stdout: run.stdout, stderr: run.stderr)
    }

    static func flags(_ harness: TestHarness, port: UInt16) -> [String] {
        [
            "--endpoint", "127.0.0.1:\(port)", "--ca-file", harness.keys.caFile, "--auth-key",
            harness.keys.privateKeyFile,
            "--key-id", Fixture.keyID, "--team-id", Fixture.teamID, "--bundle-id", Fixture.bundleID, "--timeout", "30",
        ]
    }

    @Test func createReadListPublishDelete() throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let management = Self.flags(harness, port: harness.managementPort)

        let created = try Self.run(["channel", "create", "--storage-policy", "0"] + management)
        #expect(created.status == 0, "\(created.stderr)")
        let id = String(created.stdout.dropLast())
        #expect(created.stdout == id + "\n", "only the id on stdout: \(created.stdout)")
        let channel = try BroadcastChannelID(id)
        let second = try Self.run(["channel", "create", "--storage-policy", "1"] + management)
        let secondID = String(second.stdout.dropLast())

        let read = try Self.run(["channel", "read", "--channel-id", id] + management)
        #expect(read.status == 0, "\(read.stderr)")
        #expect(read.stdout == "message-storage-policy: 0\npush-type: LiveActivity\n")
        // The path-safe (percent-encoded) form names the same channel.
        let readSafe = try Self.run(
            ["channel", "read", "--channel-id", try BroadcastChannelID(secondID).pathSafe] + management)
        #expect(readSafe.stdout == "message-storage-policy: 1\npush-type: LiveActivity\n", "\(readSafe.stderr)")

        let list = try Self.run(["channel", "list"] + management)
        #expect(list.status == 0, "\(list.stderr)")
        #expect(list.stdout == "\(id)\n\(secondID)\n")

        // A broadcast on the push port.
        let push = Self.flags(harness, port: harness.port)
        let published = try Self.run(
            [
                "push", "--channel-id", id, "--event", "update", "--content-state", #"{"home":3,"away":1}"#,
                "--priority", "5",
            ] + push)
        #expect(published.status == 0, "\(published.stderr)")
        #expect(published.stdout.hasPrefix("200 delivered apns-request-id: "), "\(published.stdout)")

        let deleted = try Self.run(["channel", "delete", "--channel-id", id] + management)
        #expect(deleted.status == 0, "\(deleted.stderr)")
        #expect(deleted.stdout.isEmpty)

        // APNs' rejection: the reason, the action and the request id given; exit 1.
        let requestID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
        let again = try Self.run(["channel", "read", "--channel-id", id, "--request-id", requestID] + management)
        #expect(again.status == 1)
        #expect(again.stdout.isEmpty)
        #expect(again.stderr.contains("400 ChannelNotRegistered"), "\(again.stderr)")
        #expect(again.stderr.contains("action: fix-configuration"), "\(again.stderr)")
        #expect(again.stderr.contains(requestID), "\(again.stderr)")
        let gone = try Self.run(["push", "--channel-id", id, "--event", "end", "--dismissal-date", "0"] + push)
        #expect(gone.status == 1)
        #expect(gone.stderr.contains("ChannelNotRegistered"), "\(gone.stderr)")

        harness.shutdown()
        let log = try harness.acceptedLog()
        #expect(log.count == 1)
        #expect(log.first?.string("channel-id") == channel.description)
        #expect(log.first?.int("priority") == 5)
        #expect(log.first?.int("expiration") == 0)
    }

    static let badFlags: [(command: [String], message: String)] = [
        (["channel", "create", "--storage-policy", "2"], "--storage-policy 2 must be 0 or 1"),
        (["channel", "create"], "--storage-policy"),
        (["channel", "read"], "--channel-id"),
        (["channel", "read", "--channel-id", "not base64!"], "not base64"),
        (["channel", "delete", "--channel-id", "abc%2"], "--channel-id"),
        (["channel", "list", "--request-id", "nope"], "--request-id 'nope' is not a UUID"),
        (
            ["push", "--channel-id", "dHN0LTEyMzQ1Njc4OTAxMg==", "--event", "start"],
            "a broadcast cannot start a Live Activity"
        ),
        (["push", "--channel-id", "dHN0LTEyMzQ1Njc4OTAxMg==", "--priority", "1"], "must be 5 or 10"),
        (
            ["push", "--channel-id", "dHN0LTEyMzQ1Njc4OTAxMg==", "--token", String(repeating: "ab", count: 32)],
            "not both"
        ),
        (["push", "--channel-id", "dHN0LTEyMzQ1Njc4OTAxMg==", "--collapse-id", "x"], "--collapse-id"),
        (["push"], "give --token"),
        (["push", "--channel-id", "dHN0LTEyMzQ1Njc4OTAxMg==", "--request-id-header", "x-id"], "--request-id-header"),
    ]

    @Test(arguments: 0..<badFlags.count)
    func badFlagsExit64WithAClearMessage(_ index: Int) throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let (command, message) = Self.badFlags[index]
        let run = try Self.run(command + Self.flags(harness, port: harness.managementPort))
        #expect(run.status == 64, "\(command): \(run.stderr)")
        #expect(run.stderr.contains(message), "\(command): \(run.stderr)")
        harness.shutdown()
        #expect(harness.simulator.managementStatistics().accepted == 0)
        #expect(try harness.acceptedLog().isEmpty)
    }

    @Test func noManagementListenerIsANonZeroExitWithTheCause() throws {
        let (socket, bound) = try Sockets.listen(on: try SocketAddress(ip: "127.0.0.1", port: 0))
        Sockets.close(socket)
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let run = try Self.run(["channel", "list"] + Self.flags(harness, port: bound.port))
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains("no answer from APNs"), "\(run.stderr)")
        #expect(run.stderr.contains("action: retry-later"), "\(run.stderr)")
    }
}

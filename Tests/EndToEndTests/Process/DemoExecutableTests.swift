// `fanfare-demo`, the binary scripts/demo builds: the FanfareCommands subcommands without the service and
// PostgreSQL, the demo as its default. Run as the README's main job runs it, on a small audience.
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct DemoExecutableTests {
    private func executable() throws -> String {
        try #require(
            FanfareExecutable.path(named: "fanfare-demo"),
            "fanfare-demo is built with the tests (swift build --build-tests)")
    }

    @Test func playsAMatchWithoutASubcommandAndEndsWithEachPhasesTime() throws {
        let directory = NSTemporaryDirectory() + "fanfare-demo-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The registry file lands in the working directory.
        let run = try ChildProcess.run(
            try executable(), ["--tokens", "2000", "--matches", "2"], directory: directory, timeout: .seconds(180))
        #expect(!run.timedOut && run.status == 0, "exit \(run.status): \(run.stderr)\n\(run.stdout)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines.contains { $0.hasSuffix("every targeted token accounted for in every wave: yes") }, "\(run.stdout)")

        // The phases that take seconds at a million tokens say so before they start, not only once done.
        let loading = lines.firstIndex { $0.hasPrefix("engine      loading ") }
        let loaded = lines.firstIndex { $0.hasPrefix("engine      loaded ") }
        #expect(loading != nil && loaded != nil && loading! < loaded!, "\(run.stdout)")
        let windingDown = lines.firstIndex { $0.hasPrefix("wrap-up     the ended matches' 2 s dismissal window") }
        let wound = lines.firstIndex { $0.hasPrefix("wrap-up     done in ") }
        #expect(windingDown != nil && wound != nil && windingDown! < wound!, "\(run.stdout)")

        let phases = try #require(lines.last, "no output")
        #expect(phases.hasPrefix("phases (wall / CPU): "), "\(phases)")
        for phase in ["simulator", "registration", "engine load", "broadcast channels", "play", "wrap-up"] {
            #expect(phases.contains(", \(phase) ") || phases.contains(": \(phase) "), "\(phase) missing: \(phases)")
        }
    }

    @Test func leavesOutTheCommandsThatNeedTheServiceOrPostgreSQL() throws {
        let help = try ChildProcess.run(try executable(), ["--help"], timeout: .seconds(60))
        #expect(help.status == 0, "\(help.stderr)")
        for command in ["demo (default)", "push", "channel", "simulate", "load", "keygen", "token"] {
            #expect(help.stdout.contains("  \(command) "), "\(command) missing: \(help.stdout)")
        }
        for command in ["serve", "import", "waves"] {
            #expect(!help.stdout.contains("  \(command) "), "\(command) listed: \(help.stdout)")
            // Taken as an argument of the default subcommand, which has none: a usage error.
            let run = try ChildProcess.run(try executable(), [command], timeout: .seconds(60))
            #expect(run.status == 64, "\(command): exit \(run.status): \(run.stderr)")
        }
    }
}

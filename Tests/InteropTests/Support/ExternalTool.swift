// Running the nghttp2 command-line tools (h2load, nghttp, nghttpd) from tests: finding them, and running
// them to completion with a hang guard. Control plane only: Foundation is fine here.
import FanfareTestSupport
import Foundation
import Glibc

/// A program from Debian's nghttp2-client / nghttp2-server packages.
enum ExternalTool: String, CaseIterable {
    case h2load
    case nghttp
    case nghttpd

    /// Where Debian installs it (`nghttpd` is a server, so it lives in sbin).
    private var standardPath: String {
        switch self {
        case .h2load, .nghttp: "/usr/bin/" + rawValue
        case .nghttpd: "/usr/sbin/" + rawValue
        }
    }

    /// The Debian package that ships it.
    var package: String {
        switch self {
        case .h2load, .nghttp: "nghttp2-client"
        case .nghttpd: "nghttp2-server"
        }
    }

    /// The executable's path: the standard location, else the first match on `PATH`.
    func locate() -> String? {
        let fileManager = FileManager.default
        if fileManager.isExecutableFile(atPath: standardPath) { return standardPath }
        let searchPath = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in searchPath.split(separator: ":") {
            let candidate = directory + "/" + rawValue
            if fileManager.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    /// The executable's path; throws (failing the test) with how to install it when it is missing.
    func require() throws(InteropTestError) -> String {
        guard let path = locate() else {
            throw .toolMissing(
                "\(rawValue) is not installed (Debian package \(package)); run scripts/ensure-system-packages")
        }
        return path
    }
}

enum InteropTestError: Error, CustomStringConvertible {
    case toolMissing(String)
    case toolTimedOut(String)
    case toolDidNotStart(String)

    var description: String {
        switch self {
        case .toolMissing(let message), .toolTimedOut(let message), .toolDidNotStart(let message): message
        }
    }
}

/// What a finished tool run printed and how it ended.
struct ToolRun: CustomStringConvertible {
    let commandLine: String
    let status: Int32
    let standardOutput: String
    let standardError: String

    var description: String {
        "$ \(commandLine)\nexit status \(status)\n--- stdout ---\n\(standardOutput)\n--- stderr ---\n\(standardError)"
    }
}

/// Runs `executable arguments` with stdout and stderr captured in files under `directory` (files, not
/// pipes, so a chatty tool can never block on a full pipe). A run past `timeout` is killed and
/// reported: that guards against hangs and is not an assertion about speed.
func runTool(
    _ executable: String, _ arguments: [String], in directory: TemporaryDirectory, timeout: Duration = .seconds(60)
) async throws -> ToolRun {
    let name = URL(fileURLWithPath: executable).lastPathComponent + "-" + UUID().uuidString.prefix(8)
    let outputPath = directory.file(name + ".out")
    let errorPath = directory.file(name + ".err")
    let process = try startProcess(executable, arguments, standardOutput: outputPath, standardError: errorPath)
    let commandLine = ([executable] + arguments).joined(separator: " ")
    let clock = ContinuousClock()
    let deadline = clock.now + TestTime.scaled(timeout)
    while process.isRunning {
        if clock.now >= deadline {
            stopProcess(process)
            throw InteropTestError.toolTimedOut(
                "\(commandLine) still running after \(timeout); killed it. stdout so far:\n"
                    + ((try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""))
        }
        try await Task.sleep(for: .milliseconds(5))
    }
    process.waitUntilExit()
    return ToolRun(
        commandLine: commandLine,
        status: process.terminationStatus,
        standardOutput: (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "",
        standardError: (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "")
}

/// Launches a process with stdout and stderr going to the given files (created or truncated).
func startProcess(
    _ executable: String, _ arguments: [String], standardOutput: String, standardError: String
) throws -> ChildProcess {
    do {
        return try ChildProcess(
            executable: executable, arguments: arguments, standardOutput: standardOutput, standardError: standardError)
    } catch {
        throw InteropTestError.toolDidNotStart("\(error)")
    }
}

/// Ends a process this test started: none of these tools has anything to flush.
func stopProcess(_ process: ChildProcess) {
    guard process.isRunning else { return }
    kill(process.pid, SIGKILL)
    process.waitUntilExit()
}

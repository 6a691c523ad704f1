// `fanfare serve` (and `fanfare simulate`) as child processes: the binary `swift build` puts next to this test
// bundle. Output goes to files, so a chatty child never blocks on a pipe.
import FanfareTestSupport
import Foundation
import Glibc

final class ServeProcess: @unchecked Sendable {
    let process: ChildProcess
    let port: Int
    let outputPath: String
    let errorPath: String

    /// `fanfare` next to the running test bundle (`.build/<configuration>/`), or `$FANFARE_EXECUTABLE`.
    static func executable() throws -> String {
        if let path = ProcessInfo.processInfo.environment["FANFARE_EXECUTABLE"] { return path }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { throw HTTPTestError(description: "cannot read /proc/self/exe") }
        let bundle = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let path = (bundle as NSString).deletingLastPathComponent + "/fanfare"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw HTTPTestError(
                description: "\(path) is missing: build it first (scripts/test and `swift build --build-tests` do)")
        }
        return path
    }

    static func launch(
        _ arguments: [String], directory: String, name: String, environment: [String: String], command: String = "serve"
    ) throws -> (ChildProcess, String, String) {
        let outputPath = directory + "/\(name).out"
        let errorPath = directory + "/\(name).err"
        var inherited = ProcessInfo.processInfo.environment
        inherited.removeValue(forKey: "FANFARE_API_KEYS")
        inherited.removeValue(forKey: "FANFARE_AUTH_KEY")
        let process = try ChildProcess(
            executable: try executable(), arguments: [command] + arguments,
            environment: inherited.merging(environment) { _, new in new }, directory: directory,
            standardOutput: outputPath,
            standardError: errorPath)
        return (process, outputPath, errorPath)
    }

    /// Starts `fanfare serve <arguments>` and waits for the line that says where it listens.
    init(
        _ arguments: [String], directory: String, name: String = "serve", environment: [String: String] = [:],
        timeout: Duration = Liveness.process
    ) async throws {
        (process, outputPath, errorPath) = try Self.launch(
            arguments, directory: directory, name: name, environment: environment)
        let marker = "listening on http"
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        var found: Int?
        while found == nil {
            let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            if let range = text.range(of: marker), let line = text[range.upperBound...].split(separator: "\n").first,
                let colon = line.lastIndex(of: ":"), let port = Int(line[line.index(after: colon)...])
            {
                found = port
                break
            }
            if !process.isRunning || ContinuousClock.now >= deadline {
                if process.isRunning { kill(process.pid, SIGKILL) }
                process.waitUntilExit()
                throw HTTPTestError(
                    description: "fanfare serve \(arguments.joined(separator: " ")) did not start:\n\(text)\n"
                        + ((try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""))
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        port = found!
    }

    deinit {
        if process.isRunning {
            kill(process.pid, SIGKILL)
            process.waitUntilExit()
        }
    }

    var client: HTTPTestClient { HTTPTestClient(port: port) }
    var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }
    var errors: String { (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "" }

    func signal(_ number: Int32) { if process.isRunning { kill(process.pid, number) } }

    /// Waits for the process to end (SIGKILL after `timeout`); its exit status.
    func waitForExit(timeout: Duration = Liveness.process) async -> Int32 {
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        while process.isRunning && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        if process.isRunning {
            kill(process.pid, SIGKILL)
            process.waitUntilExit()
            return -1
        }
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// Runs `fanfare <command> <arguments>` to its end (for refusals that happen at once, or a command that
    /// prints and exits); a hang guard kills it.
    static func run(
        _ arguments: [String], directory: String, environment: [String: String] = [:],
        timeout: Duration = Liveness.command,
        command: String = "serve"
    ) async throws -> (status: Int32, output: String, errors: String) {
        let name = "run-" + UUID().uuidString.prefix(8)
        let (process, outputPath, errorPath) = try launch(
            arguments, directory: directory, name: name, environment: environment, command: command)
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        while process.isRunning {
            if ContinuousClock.now >= deadline {
                kill(process.pid, SIGKILL)
                process.waitUntilExit()
                throw HTTPTestError(description: "fanfare \(command) \(arguments.joined(separator: " ")) hung")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.waitUntilExit()
        return (
            process.terminationStatus, (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "",
            (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
        )
    }
}

/// `fanfare simulate` as a child process of its own, so it outlives a `fanfare serve` killed with SIGKILL; its
/// state directory holds the CA and the provider key the service is given.
final class SimulateProcess: @unchecked Sendable {
    let process: ChildProcess
    let port: Int
    let stateDirectory: String
    let outputPath: String
    /// The channel-management API's port, when started with `--management-port`.
    let managementPort: Int?

    /// Starts `fanfare simulate --listen 127.0.0.1:0 --state-dir <directory>/simulator <arguments>` and waits for
    /// the line that says where it listens.
    init(_ arguments: [String], directory: String, timeout: Duration = Liveness.process) async throws {
        stateDirectory = directory + "/simulator"
        let errorPath: String
        (process, outputPath, errorPath) = try ServeProcess.launch(
            ["--listen", "127.0.0.1:0", "--state-dir", stateDirectory] + arguments, directory: directory,
            name: "simulate",
            environment: [:], command: "simulate")
        let wantsManagement = arguments.contains("--management-port")
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        var found: (port: Int, management: Int?)?
        while found == nil {
            let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            if let port = Self.port(after: "simulating APNs on https://", in: text) {
                let management = Self.port(after: "channel management on https://", in: text)
                if management != nil || !wantsManagement {
                    found = (port, management)
                    break
                }
            }
            if !process.isRunning || ContinuousClock.now >= deadline {
                if process.isRunning { kill(process.pid, SIGKILL) }
                process.waitUntilExit()
                throw HTTPTestError(
                    description: "fanfare simulate did not start:\n\(text)\n"
                        + ((try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""))
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        (port, managementPort) = found!
    }

    /// The port at the end of the line that starts with `marker` (`...host:port`).
    private static func port(after marker: String, in text: String) -> Int? {
        guard let range = text.range(of: marker), let line = text[range.upperBound...].split(separator: "\n").first,
            let colon = line.lastIndex(of: ":")
        else { return nil }
        return Int(line[line.index(after: colon)...])
    }

    /// The flags that point `fanfare serve` at this simulator (its CA, provider key and identity).
    var serveArguments: [String] {
        [
            "--endpoint", "https://127.0.0.1:\(port)", "--ca-file", stateDirectory + "/ca.pem",
            "--auth-key", stateDirectory + "/AuthKey_FANFARE001.p8", "--key-id", "FANFARE001", "--team-id",
            "TEAMID0001",
            "--bundle-id", "com.example.fanfare",
        ]
    }

    /// SIGINT: the simulator flushes its accepted-push log and exits.
    func stop(timeout: Duration = Liveness.process) async {
        if process.isRunning { kill(process.pid, SIGINT) }
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        while process.isRunning && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        if process.isRunning { kill(process.pid, SIGKILL) }
        process.waitUntilExit()
    }

    deinit {
        if process.isRunning {
            kill(process.pid, SIGKILL)
            process.waitUntilExit()
        }
    }
}

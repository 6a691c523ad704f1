// Child processes for the tests (the fanfare binary, simulators, h2load, nghttp, nghttpd, openssl), started with
// posix_spawn instead of Foundation's `Process`: Swift 6.3.1's `Process.run()` walks /proc/self/fd with a
// dirent read past its buffer and can fault (swift-corelibs-foundation #5472). Output goes to files, never
// to pipes, so a chatty child can never block on a pipe nobody reads.
import CChildProcess
import Foundation

#if canImport(Glibc)
import Glibc
#endif

public struct ChildProcessError: Error, CustomStringConvertible {
    public let description: String
}

/// One child process. `isRunning`, `signal` and the waits may be called from any thread.
public final class ChildProcess: @unchecked Sendable {
    public let pid: pid_t
    public let commandLine: String
    private let lock = NSLock()
    private var status: Int32?

    /// Starts `executable` (a path) with `arguments`. `environment` nil inherits ours; `directory` nil is ours;
    /// standard output and error go to the given files (created or truncated), or /dev/null when nil.
    public init(
        executable: String, arguments: [String], environment: [String: String]? = nil, directory: String? = nil,
        standardOutput: String? = nil, standardError: String? = nil
    ) throws {
        commandLine = ([executable] + arguments).joined(separator: " ")
        func open(_ path: String?) throws -> Int32 {
            guard let path else { return -1 }
            let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw ChildProcessError(description: "cannot open \(path): errno \(errno)") }
            return fd
        }
        let output = try open(standardOutput)
        defer { if output >= 0 { close(output) } }
        // The same file for both: one descriptor, so the two streams interleave instead of overwriting.
        let error: Int32
        if standardError != nil && standardError == standardOutput {
            error = output
        } else {
            error = try open(standardError)
        }
        defer { if error >= 0 && error != output { close(error) } }

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let variables =
            (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in variables { free(pointer) } }
        var child: pid_t = 0
        let result = fanfare_spawn(executable, argv, variables, directory, output, error, &child)
        guard result == 0 else {
            throw ChildProcessError(description: "cannot start \(commandLine): \(String(cString: strerror(result)))")
        }
        pid = child
    }

    deinit {
        // A test that forgot its child (or threw past it) must not leave it running or a zombie behind.
        if isRunning {
            Glibc.kill(pid, SIGKILL)
            _ = waitUntilExit()
        }
    }

    /// Reaps the child if it has ended (never blocks).
    public var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        if status != nil { return false }
        var raw: Int32 = 0
        let reaped = waitpid(pid, &raw, WNOHANG)
        if reaped == pid {
            status = Self.decode(raw)
            return false
        }
        if reaped < 0 && errno != EINTR {
            status = -1  // ECHILD: nothing left to wait for
            return false
        }
        return true
    }

    public func signal(_ number: Int32) {
        if isRunning { Glibc.kill(pid, number) }
    }

    /// Blocks until the child ends; its status (see `terminationStatus`).
    @discardableResult
    public func waitUntilExit() -> Int32 {
        while isRunning { usleep(2_000) }
        return terminationStatus
    }

    /// Waits up to `timeout` (scaled: TestTime) without blocking a thread; SIGKILL after it. The status, or nil if
    /// it had to be killed.
    public func waitForExit(timeout: Duration = Liveness.process) async -> Int32? {
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        while isRunning && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
        if isRunning {
            Glibc.kill(pid, SIGKILL)
            waitUntilExit()
            return nil
        }
        return terminationStatus
    }

    /// The exit code, or the number of the signal that ended it (as Foundation's `Process` reports it);
    /// -1 while it runs.
    public var terminationStatus: Int32 {
        lock.lock()
        defer { lock.unlock() }
        return status ?? -1
    }

    private static func decode(_ raw: Int32) -> Int32 {
        let signal = raw & 0x7f
        return signal == 0 ? (raw >> 8) & 0xff : signal
    }

    /// Runs a command to its end with both outputs captured through files in a fresh temporary directory;
    /// killed after `timeout` (scaled: TestTime; a hang guard: then `timedOut` is true).
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, directory: String? = nil,
        mergeOutputs: Bool = false, timeout: Duration = Liveness.command
    ) throws -> (status: Int32, stdout: String, stderr: String, timedOut: Bool) {
        let scratch = NSTemporaryDirectory() + "fanfare-child-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let outputPath = scratch + "/stdout"
        let errorPath = mergeOutputs ? outputPath : scratch + "/stderr"
        let child = try ChildProcess(
            executable: executable, arguments: arguments, environment: environment, directory: directory,
            standardOutput: outputPath, standardError: errorPath)
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        var timedOut = false
        while child.isRunning {
            if ContinuousClock.now >= deadline {
                child.signal(SIGKILL)
                timedOut = true
                break
            }
            usleep(5_000)
        }
        let status = child.waitUntilExit()
        let read = { (path: String) in (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        return (status, read(outputPath), mergeOutputs ? "" : read(errorPath), timedOut)
    }
}

// `fanfare simulate` as a child process: the binary `swift build` puts next to this test bundle, for what an
// in-process simulator cannot go through (SIGKILL, a restart on the same state directory and port) and for
// the command's own flag handling. Output goes to files, so a chatty child never blocks on a pipe.
import FanfareClient
import FanfareCore
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Glibc

/// A fresh directory under the temp directory, removed when released.
final class ScratchDirectory: @unchecked Sendable {
    let path: String
    init(_ prefix: String) throws {
        path = NSTemporaryDirectory() + "fanfare-\(prefix)-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

struct SimulatorProcessError: Error, CustomStringConvertible {
    let description: String
}

final class SimulatorProcess: @unchecked Sendable {
    /// The identity `fanfare simulate` uses by default (its --team-id, --key-id and --bundle-id defaults).
    static let teamID = "TEAMID0001"
    static let keyID = "FANFARE001"
    static let bundleID = "com.example.fanfare"

    let process: ChildProcess
    let port: UInt16
    let outputPath: String
    let errorPath: String

    /// `fanfare` next to the running test bundle (`.build/<configuration>/`), or `$FANFARE_EXECUTABLE`.
    static func executable() throws -> String {
        if let path = ProcessInfo.processInfo.environment["FANFARE_EXECUTABLE"] { return path }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { throw SimulatorProcessError(description: "cannot read /proc/self/exe") }
        let bundle = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let path = (bundle as NSString).deletingLastPathComponent + "/fanfare"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw SimulatorProcessError(
                description: "\(path) is missing: build it first (scripts/test and `swift build --build-tests` do)")
        }
        return path
    }

    /// Starts `fanfare simulate <arguments>` and waits for the line that says where it listens.
    init(_ arguments: [String], outputIn directory: String, name: String, timeout: Duration = .seconds(60)) async throws
    {
        outputPath = directory + "/\(name).out"
        errorPath = directory + "/\(name).err"
        process = try ChildProcess(
            executable: try Self.executable(), arguments: ["simulate"] + arguments, standardOutput: outputPath,
            standardError: errorPath)

        let marker = "simulating APNs on https://"
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: TestTime.scaled(timeout))
        var found: UInt16?
        while found == nil {
            let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            if let range = text.range(of: marker), let line = text[range.upperBound...].split(separator: "\n").first,
                let colon = line.lastIndex(of: ":"), let port = UInt16(line[line.index(after: colon)...])
            {
                found = port
                break
            }
            if !process.isRunning || clock.now >= deadline {
                if process.isRunning { Glibc.kill(process.pid, SIGKILL) }
                process.waitUntilExit()
                throw SimulatorProcessError(
                    description: "fanfare simulate \(arguments.joined(separator: " ")) did not start:\n\(text)\n"
                        + ((try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""))
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        port = found!
    }

    deinit {
        if process.isRunning {
            Glibc.kill(process.pid, SIGKILL)
            process.waitUntilExit()
        }
    }

    var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }
    var errors: String { (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "" }

    /// SIGKILL: no shutdown, no flush, no GOAWAY; the kernel closes the sockets.
    func kill() {
        guard process.isRunning else { return }
        Glibc.kill(process.pid, SIGKILL)
        process.waitUntilExit()
    }

    /// SIGINT: a clean stop (GOAWAY, log flushed, summary printed); returns the exit status.
    func stop(timeout: Duration = .seconds(30)) async -> Int32 {
        if process.isRunning { Glibc.kill(process.pid, SIGINT) }
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: TestTime.scaled(timeout))
        while process.isRunning && clock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
        if process.isRunning { kill() }
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// Runs `fanfare simulate <arguments>` to its end (for commands that fail at once); a hang guard kills it.
    static func run(
        _ arguments: [String], outputIn directory: String, timeout: Duration = .seconds(60)
    ) async throws
        -> (status: Int32, output: String, errors: String)
    {
        let name = "run-" + UUID().uuidString.prefix(8)
        let outputPath = directory + "/\(name).out"
        let errorPath = directory + "/\(name).err"
        let process = try ChildProcess(
            executable: try executable(), arguments: ["simulate"] + arguments, standardOutput: outputPath,
            standardError: errorPath)
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: TestTime.scaled(timeout))
        while process.isRunning {
            if clock.now >= deadline {
                Glibc.kill(process.pid, SIGKILL)
                process.waitUntilExit()
                throw SimulatorProcessError(description: "fanfare simulate \(arguments.joined(separator: " ")) hung")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        process.waitUntilExit()
        return (
            process.terminationStatus, (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "",
            (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
        )
    }

    /// A client configuration for a simulator started with `--state-dir stateDirectory` and default identity.
    static func clientConfiguration(stateDirectory: String, port: UInt16) throws -> ClientConfiguration {
        let signer = try ProviderTokenSigner(
            privateKeyPEMFile: stateDirectory + "/AuthKey_\(keyID).p8", keyID: keyID, teamID: teamID)
        var configuration = ClientConfiguration(
            host: "127.0.0.1", port: port, tls: try TLSContext.client(caFile: stateDirectory + "/ca.pem"),
            providerTokens: ProviderTokenSource(signer: signer), topic: Topic.liveActivity(bundleID: bundleID))
        configuration.connectTimeout = .seconds(5)
        configuration.reconnectBackoffMinimum = .milliseconds(5)
        configuration.reconnectBackoffMaximum = .milliseconds(100)
        configuration.buffers = .small
        return configuration
    }
}

/// The accepted-push log a simulator process wrote: lines per apns-id and per token, and lines that are
/// not whole records (a kill in the middle of a write may cut the last line of one run short). Read with a
/// byte scan of the log's fixed field order (`{"time":…,"token":"…",…,"apns-id":"…",…}`): a fault-matrix log
/// has 100,000 lines, too many for JSONSerialization in a debug build.
struct AcceptedLogFile {
    var lines: [String: Int] = [:]
    var tokens: [String: Int] = [:]
    var unparsable: [String] = []
    var recordCount = 0

    private init() {}

    init(path: String) throws {
        guard FileManager.default.fileExists(atPath: path) else { return }
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        var file = AcceptedLogFile()
        data.withUnsafeBytes { file.scan($0) }
        self = file
    }

    private mutating func scan(_ file: UnsafeRawBufferPointer) {
        guard let base = file.baseAddress else { return }
        var start = 0
        while start < file.count {
            var end = file.count
            if let newline = memchr(base + start, 0x0A, file.count - start) {
                end = UnsafeRawPointer(newline) - base
            }
            let line = UnsafeRawBufferPointer(start: base + start, count: end - start)
            start = end + 1
            if line.isEmpty { continue }
            guard Self.isWholeRecord(line), let token = Self.stringField(#","token":""#, in: line),
                let id = Self.stringField(#","apns-id":""#, in: line)
            else {
                unparsable.append(String(decoding: line, as: UTF8.self))
                continue
            }
            lines[id, default: 0] += 1
            tokens[token, default: 0] += 1
            recordCount += 1
        }
    }

    private static func isWholeRecord(_ line: UnsafeRawBufferPointer) -> Bool {
        let prefix = #"{"time":"#
        return line.count > prefix.utf8.count && line.last == UInt8(ascii: "}")
            && memcmp(line.baseAddress!, prefix, prefix.utf8.count) == 0
    }

    /// The string after the first `key` (which ends with the opening quote), up to the closing quote.
    private static func stringField(_ key: String, in line: UnsafeRawBufferPointer) -> String? {
        let length = key.utf8.count
        var offset = 0
        while true {
            // Jump from comma to comma (the key starts with one) rather than comparing at every byte.
            guard offset + length <= line.count,
                let comma = memchr(line.baseAddress! + offset, Int32(UInt8(ascii: ",")), line.count - offset)
            else { return nil }
            offset = UnsafeRawPointer(comma) - line.baseAddress!
            guard offset + length <= line.count else { return nil }
            if memcmp(comma, key, length) == 0 { break }
            offset += 1
        }
        let valueStart = offset + length
        guard let quote = memchr(line.baseAddress! + valueStart, Int32(UInt8(ascii: "\"")), line.count - valueStart)
        else { return nil }
        let valueEnd = UnsafeRawPointer(quote) - line.baseAddress!
        return String(decoding: UnsafeRawBufferPointer(rebasing: line[valueStart..<valueEnd]), as: UTF8.self)
    }
}

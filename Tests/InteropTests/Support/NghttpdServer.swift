// nghttpd (nghttp2's reference HTTP/2 server) as a peer for our client: started on a free loopback port
// with our generated certificate, stopped by the test (always, via defer).
import FanfareTestSupport
import Foundation
import Glibc

/// A running `nghttpd` this test started.
final class NghttpdServer: @unchecked Sendable {
    let process: ChildProcess
    let port: UInt16
    let logFile: String
    private(set) var commandLine: String

    private init(process: ChildProcess, port: UInt16, logFile: String, commandLine: String) {
        self.process = process
        self.port = port
        self.logFile = logFile
        self.commandLine = commandLine
    }

    deinit { stop() }

    /// Starts nghttpd on 127.0.0.1 with `certificateFile`/`privateKeyFile`, serving `documentRoot`.
    /// `echoUpload` answers every POST with 200 and the request body; without it a POST to a path with no
    /// file is a 404. Picks a free port and, if another process takes it first (nghttpd then exits),
    /// tries another one.
    static func start(
        executable: String, certificateFile: String, privateKeyFile: String, documentRoot: String,
        echoUpload: Bool, in directory: TemporaryDirectory
    ) async throws -> NghttpdServer {
        var failures: [String] = []
        for attempt in 1...5 {
            let port = try freeLoopbackPort()
            var arguments = ["--address=127.0.0.1", "--htdocs=\(documentRoot)"]
            if echoUpload { arguments.append("--echo-upload") }
            arguments += [String(port), privateKeyFile, certificateFile]
            let logFile = directory.file("nghttpd-\(port)-\(attempt).log")
            let process = try startProcess(
                executable, arguments, standardOutput: logFile, standardError: logFile + ".err")
            let server = NghttpdServer(
                process: process, port: port, logFile: logFile,
                commandLine: ([executable] + arguments).joined(separator: " "))
            if try await server.waitUntilAccepting() { return server }
            server.stop()
            let errors = (try? String(contentsOfFile: logFile + ".err", encoding: .utf8)) ?? ""
            failures.append("port \(port): \(errors.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        throw InteropTestError.toolDidNotStart("nghttpd did not start:\n" + failures.joined(separator: "\n"))
    }

    /// True once a TCP connect to the port succeeds while nghttpd runs; false if nghttpd exited (e.g. the
    /// port was taken) or never accepted within ten seconds.
    private func waitUntilAccepting() async throws -> Bool {
        let deadline = ContinuousClock.now + TestTime.scaled(Liveness.process)
        while ContinuousClock.now < deadline {
            guard process.isRunning else { return false }
            if canConnect(port: port) { return process.isRunning }
            try await Task.sleep(for: .milliseconds(10))
        }
        return false
    }

    /// Kills nghttpd (see `stopProcess`) and waits for it. Safe to call twice.
    func stop() {
        stopProcess(process)
    }
}

/// A port that was free a moment ago: bind 127.0.0.1:0, read the port, close. Another process may take it
/// before the caller binds it, so callers retry on a clash.
func freeLoopbackPort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw InteropTestError.toolDidNotStart("socket() failed: errno \(errno)") }
    defer { close(fd) }
    var address = loopback(port: 0)
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { throw InteropTestError.toolDidNotStart("bind(127.0.0.1:0) failed: errno \(errno)") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let named = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    guard named == 0 else { throw InteropTestError.toolDidNotStart("getsockname failed: errno \(errno)") }
    return UInt16(bigEndian: address.sin_port)
}

/// Whether a blocking TCP connect to 127.0.0.1:`port` succeeds.
func canConnect(port: UInt16) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = loopback(port: port)
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    return result == 0
}

private func loopback(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return address
}

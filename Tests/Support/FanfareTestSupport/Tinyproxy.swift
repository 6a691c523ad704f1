// tinyproxy (the Debian package, which scripts/ensure-system-packages installs) as a real HTTP CONNECT proxy on
// 127.0.0.1, in the foreground, with a configuration this test writes: a port of its own (tinyproxy cannot take
// port 0, so a free one is found by binding and closing), loopback only, CONNECT only to the ports given.
import Foundation
import Glibc

public final class Tinyproxy: @unchecked Sendable {
    public let port: Int
    public let directory: String
    /// tinyproxy's own log (`LogLevel Info`: every CONNECT it served or refused).
    public let logPath: String
    private let child: ChildProcess

    /// Starts tinyproxy allowing CONNECT to `connectPorts` on any host it may reach, and waits until it listens.
    /// `basicAuth` makes it ask for those credentials (a 407 without them).
    public init(connectPorts: [Int], basicAuth: (user: String, password: String)? = nil) throws {
        let candidates = ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"]
        guard let executable = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw ChildProcessError(
                description:
                    "tinyproxy is not installed: run scripts/ensure-system-packages (it installs the Debian package tinyproxy)"
            )
        }
        directory = NSTemporaryDirectory() + "fanfare-tinyproxy-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        logPath = directory + "/tinyproxy.log"
        port = try Self.freePort()
        var lines = [
            "Port \(port)", "Listen 127.0.0.1", "Allow 127.0.0.1", "Timeout 600", "MaxClients 200", "LogLevel Info",
            "LogFile \"\(logPath)\"", "DisableViaHeader Yes",
        ]
        lines += connectPorts.map { "ConnectPort \($0)" }
        if let basicAuth { lines.append("BasicAuth \(basicAuth.user) \(basicAuth.password)") }
        let configuration = directory + "/tinyproxy.conf"
        try (lines.joined(separator: "\n") + "\n").write(toFile: configuration, atomically: true, encoding: .utf8)
        child = try ChildProcess(
            executable: executable, arguments: ["-d", "-c", configuration],
            standardOutput: directory + "/output.txt", standardError: directory + "/output.txt")
        try waitUntilListening()
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Stops tinyproxy (SIGTERM, then SIGKILL if it lingers).
    public func stop() {
        child.signal(SIGTERM)
        let deadline = ContinuousClock.now + TestTime.scaled(Liveness.process)
        while child.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
        child.signal(SIGKILL)
        child.waitUntilExit()
    }

    /// What tinyproxy logged so far.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    private func waitUntilListening() throws {
        let deadline = ContinuousClock.now + TestTime.scaled(Liveness.process)
        while ContinuousClock.now < deadline {
            guard child.isRunning else { break }
            if Self.accepts(port: port) { return }
            usleep(20_000)
        }
        let output = (try? String(contentsOfFile: directory + "/output.txt", encoding: .utf8)) ?? ""
        throw ChildProcessError(description: "tinyproxy did not listen on 127.0.0.1:\(port): \(output)\n\(log)")
    }

    /// A port nothing listens on now: bound by us, then let go.
    static func freePort() throws -> Int {
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(probe) }
        var address = ConnectProxy.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(probe, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else { throw ChildProcessError(description: "cannot bind a free port: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(probe, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static func accepts(port: Int) -> Bool {
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(probe) }
        var address = ConnectProxy.loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(probe, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}

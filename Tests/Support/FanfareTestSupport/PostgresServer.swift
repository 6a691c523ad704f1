// A real PostgreSQL server for one test or suite: `initdb` into a fresh temporary directory, `pg_ctl start` on
// 127.0.0.1 at a free port (Unix socket in the same directory, so nothing touches the system's cluster), and
// `pg_ctl stop` at the end. PostgreSQL refuses to run as root, so as root every server program runs as the
// `postgres` user (Debian's package creates it) through runuser; otherwise as the current user.
import Foundation

#if canImport(Glibc)
import Glibc
#endif

public final class PostgresServer: @unchecked Sendable {
    /// The database role and database the server is set up with (trust authentication on loopback).
    public static let user = "fanfare"
    public static let database = "fanfare"

    /// The TCP port on 127.0.0.1.
    public let port: Int
    /// Holds the cluster (`data/`), the server's log (`log`) and its Unix socket.
    public let directory: String
    /// Where initdb, pg_ctl and psql were found.
    public let binaries: String
    /// Set for `init(tls: true)`: the server takes TCP clients only over TLS, with a password.
    public let tls: PostgresServerTLS?
    private let lock = NSLock()
    private var stopped = false

    /// `postgres://fanfare@127.0.0.1:PORT/fanfare`.
    public var url: String { "postgres://\(Self.user)@127.0.0.1:\(port)/\(Self.database)" }
    public var host: String { "127.0.0.1" }
    public var dataDirectory: String { directory + "/data" }
    public var logPath: String { directory + "/log" }

    /// Creates a cluster and starts it; returns once it accepts connections and the `fanfare` database exists.
    /// A port taken between choosing it and binding it (another test's server) is retried with a new one.
    /// `tls`: TCP clients only over TLS with a password (PostgresServer+TLS.swift); psql uses the Unix socket.
    public init(tls withTLS: Bool = false) throws {
        _ = Self.abandonedServersStopped
        let bin = try Self.findBinaries()
        binaries = bin
        var template = Array((NSTemporaryDirectory() + "fanfare-pg-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw ChildProcessError(description: "PostgresServer: mkdtemp failed: errno \(errno)")
        }
        let dir = String(cString: made)
        directory = dir
        // The owner: a later test process stops this server if we die without stopping it (pg_ctl daemonises
        // the postmaster, so it outlives us).
        try? String(getpid()).write(toFile: dir + "/" + Self.ownerFile, atomically: true, encoding: .utf8)
        let asRoot = getuid() == 0
        if asRoot {
            guard let account = getpwnam("postgres") else {
                try? FileManager.default.removeItem(atPath: dir)
                throw ChildProcessError(
                    description:
                        "PostgresServer: running as root needs the 'postgres' user (apt-get install postgresql)")
            }
            chown(dir, account.pointee.pw_uid, account.pointee.pw_gid)
        }
        let runAs = asRoot ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []
        func run(
            _ program: String, _ arguments: [String], timeout: Duration = Liveness.command
        ) throws -> (Int32, String) {
            let command = runAs + [bin + "/" + program] + arguments
            let result = try ChildProcess.run(
                command[0], Array(command.dropFirst()), directory: dir, mergeOutputs: true, timeout: timeout)
            return (result.timedOut ? -1 : result.status, result.stdout)
        }
        do {
            let (status, output) = try run(
                "initdb",
                [
                    "-D", dir + "/data", "-A", "trust", "-U", Self.user, "--no-sync", "-E", "UTF8",
                    "--locale=C",
                ])
            guard status == 0 else {
                throw ChildProcessError(description: "PostgresServer: initdb failed (\(status)): \(output)")
            }
            tls = withTLS ? try PostgresServerTLS.prepare(serverDirectory: dir, dataDirectory: dir + "/data") : nil
        } catch {
            try? FileManager.default.removeItem(atPath: dir)
            throw error
        }
        var attempt = 0
        var chosen = 0
        while true {
            attempt += 1
            chosen = try Self.freePort()
            let options = Self.options(port: chosen, directory: dir) + (tls?.serverOptions ?? "")
            let (status, output) = try run(
                "pg_ctl", ["-D", dir + "/data", "-o", options, "-l", dir + "/log", "-w", "-t", "60", "start"])
            if status == 0 { break }
            let log = (try? String(contentsOfFile: dir + "/log", encoding: .utf8)) ?? ""
            if attempt < 5 && log.contains("Address already in use") { continue }
            try? FileManager.default.removeItem(atPath: dir)
            throw ChildProcessError(description: "PostgresServer: pg_ctl start failed (\(status)): \(output)\n\(log)")
        }
        port = chosen
        let created = try ChildProcess.run(
            bin + "/psql",
            [
                "-h", tls == nil ? "127.0.0.1" : dir, "-p", String(port), "-U", Self.user, "-d", "postgres", "-v",
                "ON_ERROR_STOP=1", "-qAt",
                "-c", "CREATE DATABASE \(Self.database)",
            ],
            mergeOutputs: true)
        guard created.status == 0 else {
            stop()
            throw ChildProcessError(description: "PostgresServer: creating the database failed: \(created.stdout)")
        }
        if tls != nil {
            do { _ = try psql("ALTER ROLE \(Self.user) PASSWORD '\(PostgresServerTLS.password)'") } catch {
                stop()
                throw error
            }
        }
    }

    deinit { stop() }

    /// Runs SQL through psql on `database` (the test database by default); its unaligned, tuples-only output.
    public func psql(_ sql: String, database: String = PostgresServer.database) throws -> String {
        let result = try ChildProcess.run(
            binaries + "/psql",
            [
                "-h", tls == nil ? "127.0.0.1" : directory, "-p", String(port), "-U", Self.user, "-d", database, "-v",
                "ON_ERROR_STOP=1", "-qAt", "-c", sql,
            ],
            mergeOutputs: true)
        guard result.status == 0 else {
            throw ChildProcessError(description: "psql failed (\(result.status)): \(result.stdout)")
        }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    // MARK: - One server per test process

    nonisolated(unsafe) private static var sharedServer: PostgresServer?
    nonisolated(unsafe) private static var databasesCreated = 0
    private static let sharedLock = NSLock()

    /// The test process's own server, started at the first call and stopped when the process exits (a process
    /// that dies instead leaves it to the next run's `stopAbandonedServers`). Tests that stop, restart or
    /// otherwise disturb a server start their own with `init()`.
    public static func shared() throws -> PostgresServer {
        sharedLock.lock()
        defer { sharedLock.unlock() }
        if let sharedServer { return sharedServer }
        let server = try PostgresServer()
        sharedServer = server
        atexit { PostgresServer.stopShared() }
        return server
    }

    private static func stopShared() {
        sharedLock.lock()
        let server = sharedServer
        sharedServer = nil
        sharedLock.unlock()
        server?.stop()
    }

    /// A new, empty database on this server (a copy of `template1`), for one test; its name.
    public func createDatabase() throws -> String {
        Self.sharedLock.lock()
        Self.databasesCreated += 1
        let name = "test_\(Self.databasesCreated)"
        Self.sharedLock.unlock()
        _ = try psql("CREATE DATABASE \(name) TEMPLATE template1", database: "postgres")
        return name
    }

    /// Drops a database `createDatabase` made, cutting its open sessions.
    public func dropDatabase(_ name: String) throws {
        _ = try psql("DROP DATABASE IF EXISTS \(name) WITH (FORCE)", database: "postgres")
    }

    /// `postgres://fanfare@127.0.0.1:PORT/<database>`.
    public func url(database: String) -> String { "postgres://\(Self.user)@127.0.0.1:\(port)/\(database)" }

    // MARK: - Servers left behind

    /// Holds the owning test process's pid, in the server's directory.
    static let ownerFile = "owner.pid"

    /// Runs `stopAbandonedServers` once per process, before its first server starts.
    private static let abandonedServersStopped: Void = { stopAbandonedServers() }()

    /// Stops the servers of earlier test processes that died without stopping them: `fanfare-pg-*` directories
    /// in the temporary directory whose owner process is gone. Returns how many it stopped.
    @discardableResult
    public static func stopAbandonedServers() -> Int {
        let temporary = NSTemporaryDirectory()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []
        var stopped = 0
        for name in names where name.hasPrefix("fanfare-pg-") {
            let directory = (temporary.hasSuffix("/") ? temporary : temporary + "/") + name
            guard let text = try? String(contentsOfFile: directory + "/" + ownerFile, encoding: .utf8),
                let owner = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)), owner > 0
            else { continue }
            // Alive (or a pid we may not signal): leave it.
            if kill(owner, 0) == 0 || errno != ESRCH { continue }
            let pidText = try? String(contentsOfFile: directory + "/data/postmaster.pid", encoding: .utf8)
            if let first = pidText?.split(separator: "\n").first, let postmaster = pid_t(first), postmaster > 0,
                kill(postmaster, 0) == 0
            {
                // Its sessions exit when they see the postmaster gone.
                kill(postmaster, SIGKILL)
                let deadline = ContinuousClock.now + TestTime.scaled(Liveness.process)
                while kill(postmaster, 0) == 0 && ContinuousClock.now < deadline { usleep(10_000) }
                stopped += 1
            }
            try? FileManager.default.removeItem(atPath: directory)
        }
        return stopped
    }

    /// Stops the server and keeps its data directory; `start()` starts it again on the same directory and port.
    /// Fast: open sessions are cut, a checkpoint is written. Immediate: what a crash leaves (no checkpoint; the
    /// next start recovers from the write-ahead log).
    public func stopKeepingData(immediate: Bool = false) throws {
        let result = try ChildProcess.run(
            serverCommand[0],
            Array(serverCommand.dropFirst())
                + [
                    binaries + "/pg_ctl", "-D", dataDirectory, "-m", immediate ? "immediate" : "fast", "-w", "-t", "60",
                    "stop",
                ],
            directory: directory, mergeOutputs: true, timeout: .seconds(90))
        guard result.status == 0 else { throw ChildProcessError(description: "pg_ctl stop failed: \(result.stdout)") }
    }

    /// Starts the server again after `stopKeepingData()` (pg_ctl start with the options of the first start).
    public func start() throws {
        let result = try ChildProcess.run(
            serverCommand[0],
            Array(serverCommand.dropFirst())
                + [binaries + "/pg_ctl", "-D", dataDirectory, "-o", options, "-l", logPath, "-w", "-t", "60", "start"],
            directory: directory, mergeOutputs: true, timeout: .seconds(90))
        guard result.status == 0 else { throw ChildProcessError(description: "pg_ctl start failed: \(result.stdout)") }
    }

    /// `stopKeepingData()` then `start()`: every session is cut, the data stays.
    public func restart() throws {
        try stopKeepingData()
        try start()
    }

    /// How server programs are run: through runuser as `postgres` when we are root (env works as a no-op
    /// prefix otherwise).
    private var serverCommand: [String] {
        getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : ["/usr/bin/env"]
    }

    /// The postmaster's process id, from `postmaster.pid` (nil once it has stopped).
    public var postmasterPID: pid_t? {
        guard let text = try? String(contentsOfFile: dataDirectory + "/postmaster.pid", encoding: .utf8),
            let first = text.split(separator: "\n").first, let pid = pid_t(first)
        else { return nil }
        return pid
    }

    /// The postmaster and every process it started (sessions, background workers), from /proc: what a
    /// SIGSTOP must reach to freeze the server as a stalled machine would.
    public var serverProcessIDs: [pid_t] {
        guard let postmaster = postmasterPID else { return [] }
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        let children = entries.compactMap { entry -> pid_t? in
            guard let pid = pid_t(entry),
                let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            // "pid (name) state ppid ...": the name may hold spaces and parentheses, so read after the last ")".
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && pid_t(fields[1]) == postmaster ? pid : nil
        }
        return [postmaster] + children
    }

    /// Stops the server (fast shutdown; SIGKILL if it does not go) and removes its directory. Idempotent.
    public func stop() {
        lock.lock()
        defer { lock.unlock() }
        guard !stopped else { return }
        stopped = true
        let pid = postmasterPID
        let command =
            (getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : [])
            + [binaries + "/pg_ctl", "-D", dataDirectory, "-m", "fast", "-w", "-t", "30", "stop"]
        let result = try? ChildProcess.run(
            command[0], Array(command.dropFirst()), directory: directory, mergeOutputs: true, timeout: .seconds(60))
        if let pid, result?.status != 0 || kill(pid, 0) == 0 {
            // Not a child of ours (pg_ctl daemonises it), so it cannot be reaped here: kill it and wait for it to go.
            kill(pid, SIGKILL)
            let deadline = ContinuousClock.now + TestTime.scaled(Liveness.process)
            while kill(pid, 0) == 0 && ContinuousClock.now < deadline { usleep(10_000) }
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Whether the server still runs (its postmaster exists).
    public var isRunning: Bool {
        guard let pid = postmasterPID else { return false }
        return kill(pid, 0) == 0
    }

    /// The server's options: loopback at `port`, its Unix socket in `directory`. fsync off: a test cluster is
    /// thrown away, and syncing only costs the shared machine time.
    static func options(port: Int, directory: String) -> String {
        "-h 127.0.0.1 -p \(port) -k \(directory) -c fsync=off -c max_connections=50"
    }

    private var options: String { Self.options(port: port, directory: directory) + (tls?.serverOptions ?? "") }

    /// `FANFARE_POSTGRES_BIN`, else the newest /usr/lib/postgresql/N/bin (Debian), else the directory of `initdb`
    /// on PATH.
    static func findBinaries() throws -> String {
        let manager = FileManager.default
        if let configured = ProcessInfo.processInfo.environment["FANFARE_POSTGRES_BIN"], !configured.isEmpty {
            return configured
        }
        let versions = ((try? manager.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .compactMap(Int.init).sorted()
        for version in versions.reversed() {
            let bin = "/usr/lib/postgresql/\(version)/bin"
            if manager.isExecutableFile(atPath: bin + "/initdb") && manager.isExecutableFile(atPath: bin + "/psql") {
                return bin
            }
        }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            if manager.isExecutableFile(atPath: "\(directory)/initdb") { return String(directory) }
        }
        throw ChildProcessError(
            description: "PostgresServer: no initdb found (install Debian's postgresql: scripts/ensure-system-packages)"
        )
    }

    /// A port the kernel just handed out on 127.0.0.1 (released again, so the server can bind it).
    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ChildProcessError(description: "PostgresServer: socket failed: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else { throw ChildProcessError(description: "PostgresServer: bind failed: errno \(errno)") }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else {
            throw ChildProcessError(description: "PostgresServer: getsockname failed: errno \(errno)")
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

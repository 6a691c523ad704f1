// The fault campaign's cluster (issue 24): a real PostgreSQL (initdb), `fanfare simulate` with its
// channel-management API, and `fanfare serve` nodes, each reaching PostgreSQL through a TCPProxy of its own (so one
// node can be cut from the database while the others keep it). A supervisor task plays systemd: a node that exits
// is started again under the same name (a new run), and every exit status is recorded.
import FanfareTestSupport
import Foundation
import Glibc

/// How big a campaign is: `FANFARE_CHAOS=full` (perf/chaos.sh), else short (the test command).
struct ChaosSize: Sendable {
    var name: String
    var tokens: Int
    var subscribers: Int
    /// Streams per APNs connection (one connection per shard): with the simulator's latency, the wave's pace.
    var streams: Int
    var frozenSeconds: Int

    static let short = ChaosSize(name: "short", tokens: 8_000, subscribers: 200, streams: 10, frozenSeconds: 8)
    static let full = ChaosSize(name: "full", tokens: 100_000, subscribers: 10_000, streams: 50, frozenSeconds: 20)
    static var current: ChaosSize { ProcessInfo.processInfo.environment["FANFARE_CHAOS"] == "full" ? .full : .short }
}

final class ChaosCluster: @unchecked Sendable {
    static let shards = 8
    static let window = 500
    static let lease = "5s"
    static let channel = "match"
    /// Shorter than the full campaign's freeze, so that calls meeting it end with 503 while it lasts.
    static let databaseTimeoutSeconds = 15

    let size: ChaosSize
    let postgres: PostgresServer
    let directory: String
    let logPath: String
    let simulator: SimulateProcess
    private let lock = NSLock()
    private var processes: [String: ServeProcess] = [:]
    private var proxies: [String: TCPProxy] = [:]
    /// Nodes the scenario stops or starts itself: the supervisor leaves them alone.
    private var managed: Set<String> = []
    private var runs: [String: Int] = [:]
    /// Every exit: node, status (signal number when a signal ended it), and whether the scenario caused it.
    private(set) var exits: [(node: String, status: Int32, expected: Bool)] = []
    private var expectedExits: [String: Int32] = [:]
    private var supervisor: Task<Void, Never>?

    init(size: ChaosSize) async throws {
        self.size = size
        postgres = try await Self.onOwnThread { try PostgresServer() }
        directory = NSTemporaryDirectory() + "fanfare-chaos-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        logPath = directory + "/accepted.jsonl"
        simulator = try await SimulateProcess(
            ["--log", logPath, "--latency", "100ms", "--management-port", "0"], directory: directory)
    }

    static func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    // MARK: - Nodes

    /// The nodes running now, by name.
    var running: [(name: String, process: ServeProcess)] {
        lock.withLock { processes.sorted { $0.key < $1.key }.map { ($0.key, $0.value) } }
            .filter { $0.process.process.isRunning }
    }

    func node(_ name: String) -> ServeProcess? { lock.withLock { processes[name] } }

    func proxy(_ name: String) -> TCPProxy? { lock.withLock { proxies[name] } }

    private func arguments(_ name: String, databasePort: Int) -> [String] {
        let url = "postgres://\(PostgresServer.user)@127.0.0.1:\(databasePort)/\(PostgresServer.database)"
        return simulator.serveArguments + [
            "--listen", "127.0.0.1:0", "--database", url, "--node-id", name, "--shards", "\(Self.shards)",
            "--lease", Self.lease, "--join", Self.lease, "--streams", "\(size.streams)", "--connections", "1",
            "--checkpoint-window", "\(Self.window)", "--checkpoint-pushes", "200", "--checkpoint-interval", "50",
            "--shutdown-timeout", "30s", "--database-timeout", "\(Self.databaseTimeoutSeconds)s",
            "--channel-management", "127.0.0.1:\(simulator.managementPort ?? 0)",
            "--log-format", "json",
        ]
    }

    /// Starts (or starts again) node `name`, through its proxy to PostgreSQL.
    @discardableResult
    func start(_ name: String) async throws -> ServeProcess {
        let proxy = try lock.withLock {
            if let proxy = proxies[name] { return proxy }
            let proxy = try TCPProxy(targetPort: postgres.port)
            proxies[name] = proxy
            return proxy
        }
        let run = lock.withLock {
            runs[name, default: 0] += 1
            return runs[name]!
        }
        let process = try await ServeProcess(
            arguments(name, databasePort: proxy.port), directory: directory, name: "\(name)-\(run)")
        lock.withLock { processes[name] = process }
        return process
    }

    /// The scenario stops or starts `name` itself from now on (true), or hands it back to the supervisor.
    func manage(_ name: String, _ managing: Bool) {
        lock.withLock {
            if managing { managed.insert(name) } else { managed.remove(name) }
        }
    }

    /// The next exit of `name` is the scenario's doing (a signal it sent): recorded as expected.
    func expectExit(_ name: String, status: Int32) { lock.withLock { expectedExits[name] = status } }

    /// Restarts every node that exited, unless the scenario manages it; records each exit.
    func startSupervisor() {
        supervisor = Task { [self] in
            while !Task.isCancelled {
                for (name, process) in lock.withLock({ processes.map { ($0.key, $0.value) } })
                where !process.process.isRunning {
                    let restart = lock.withLock { () -> Bool in
                        guard processes[name] === process else { return false }
                        let status = process.process.terminationStatus
                        let expected = expectedExits.removeValue(forKey: name) == status
                        exits.append((name, status, expected))
                        processes[name] = nil
                        return !managed.contains(name)
                    }
                    if restart { _ = try? await start(name) }
                }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// Records the exit of a node the scenario stopped and waited for (the supervisor may not have seen it).
    func recordExit(_ name: String, _ process: ServeProcess, expected: Bool) {
        lock.withLock {
            guard processes[name] === process else { return }
            expectedExits[name] = nil
            exits.append((name, process.process.terminationStatus, expected))
            processes[name] = nil
        }
    }

    // MARK: - Reading the cluster

    static func cluster(_ node: ServeProcess) async -> [String: Any]? {
        var client = node.client
        client.timeout = TestTime.scaled(.seconds(10))
        guard let response = try? await client.get("/readyz"), response.status == 200 else { return nil }
        return response.json?["cluster"] as? [String: Any]
    }

    /// Shards each running node serves (`/readyz`).
    func held() async -> [String: [Int]] {
        var held: [String: [Int]] = [:]
        for (name, node) in running { held[name] = (await Self.cluster(node)?["held_shards"] as? [Int]) ?? [] }
        return held
    }

    /// Every shard served by exactly one of the running nodes, and each of `nodes` serving at least one.
    func sharesSettled(among nodes: [String]) async -> Bool {
        let held = await held()
        let all = held.values.flatMap { $0 }
        return all.count == Self.shards && Set(all).count == Self.shards
            && nodes.allSatisfy { !(held[$0] ?? []).isEmpty }
    }

    /// The nodes holding an unexpired lease in the database (read directly, not through any node).
    func leaseHolders() throws -> [String: Int] {
        let text = try postgres.psql(
            "SELECT node || ':' || count(*) FROM shard_leases WHERE expires_at > now() GROUP BY node")
        var holders: [String: Int] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":")
            if parts.count == 2, let count = Int(parts[1]) { holders[String(parts[0])] = count }
        }
        return holders
    }

    /// The wave's report from the first running node that answers.
    func report(_ wave: Int) async -> [String: Any]? {
        for (_, node) in running {
            var client = node.client
            client.timeout = TestTime.scaled(.seconds(10))
            if let response = try? await client.get("/v1/waves/\(wave)"), response.status == 200 {
                return response.json
            }
        }
        return nil
    }

    func delivered(_ wave: Int) async -> Int { (await report(wave))?["delivered"] as? Int ?? 0 }

    // MARK: - The end

    /// Stops the supervisor, then every node with SIGTERM (each exit recorded), then the simulator.
    func stopAll() async {
        supervisor?.cancel()
        await supervisor?.value
        for (name, node) in running {
            node.signal(SIGTERM)
            _ = await node.waitForExit()
            recordExit(name, node, expected: false)
        }
        await simulator.stop()
    }

    /// The nodes' logs, newest run last (for a failure's message).
    func logs(suffix: Int = 1500) -> String {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return files.filter { $0.hasSuffix(".err") && $0 != "simulate.err" }.sorted().map { file in
            let text = (try? String(contentsOfFile: directory + "/" + file, encoding: .utf8)) ?? ""
            return "--- \(file)\n" + text.suffix(suffix)
        }.joined(separator: "\n")
    }

    func removeFiles() {
        for proxy in lock.withLock({ Array(proxies.values) }) { proxy.stop() }
        postgres.stop()
        if ProcessInfo.processInfo.environment["FANFARE_KEEP_TEST_DIR"] == nil {
            try? FileManager.default.removeItem(atPath: directory)
        }
    }
}

// Issue 14: three `fanfare serve` processes on one real PostgreSQL (initdb into a temporary directory) and one
// `fanfare simulate` process. Tokens registered through node A, a wave published through B and followed from C;
// a node killed with SIGKILL mid-wave: its leases move, the wave completes, every token is accounted for exactly
// once in the report, and the duplicates in the simulator's accepted log stay within one checkpoint window and
// carry their first apns-id. Then a node stopped with SIGSTOP past its lease: the others finish its shards, and
// once resumed it sends nothing (it sees the leases gone and exits 75). C ends B's database sessions once B's
// heartbeat is older than the lease, so what B locked when it stopped stops blocking C (issue 22).
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite("several fanfare serve nodes on PostgreSQL (child processes)", .serialized, .ownThread)
struct MultiNodeProcessTests {
    static let total = 100_000
    static let shards = 6
    static let window = 1_000
    static let streams = 100

    static func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    /// `cluster` of a node's /readyz (nil while not ready).
    static func cluster(_ node: ServeProcess) async -> [String: Any]? {
        guard let response = try? await node.client.get("/readyz"), response.status == 200 else { return nil }
        return response.json?["cluster"] as? [String: Any]
    }

    static func held(_ node: ServeProcess) async -> [Int] { (await cluster(node)?["held_shards"] as? [Int]) ?? [] }

    static func report(_ node: ServeProcess, _ wave: Int) async -> [String: Any]? {
        try? await node.client.get("/v1/waves/\(wave)").json
    }

    static var nowMilliseconds: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    @Test("three nodes: register on A, publish on B, follow on C; kill -9 mid-wave; SIGSTOP past the lease")
    func threeNodesFailOverMidWave() async throws {
        let postgres = try await Self.onOwnThread { try PostgresServer() }
        defer { postgres.stop() }
        let directory = NSTemporaryDirectory() + "fanfare-multinode-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // Kept for a look when FANFARE_KEEP_TEST_DIR is set (the nodes' logs: a.err, b.err, c.err).
        defer {
            if ProcessInfo.processInfo.environment["FANFARE_KEEP_TEST_DIR"] == nil {
                try? FileManager.default.removeItem(atPath: directory)
            }
        }
        let logPath = directory + "/accepted.jsonl"
        let simulator = try await SimulateProcess(["--log", logPath, "--latency", "100ms"], directory: directory)
        let arguments =
            simulator.serveArguments + [
                "--listen", "127.0.0.1:0", "--database", postgres.url, "--shards", "\(Self.shards)", "--lease", "4s",
                "--join", "8s",
                "--streams", "\(Self.streams)", "--connections", "1", "--checkpoint-window", "\(Self.window)",
                "--checkpoint-pushes", "500", "--checkpoint-interval", "50", "--shutdown-timeout", "30s",
            ]
        // Started together: each waits out the join window, then takes its share (a node that starts after it
        // gets its share by a hand-over once it settled; the window is long enough for a loaded machine).
        async let startA = ServeProcess(arguments + ["--node-id", "a"], directory: directory, name: "a")
        async let startB = ServeProcess(arguments + ["--node-id", "b"], directory: directory, name: "b")
        async let startC = ServeProcess(arguments + ["--node-id", "c"], directory: directory, name: "c")
        let (a, b, c) = try await (startA, startB, startC)
        let shared = await eventually(timeout: .seconds(60)) {
            let counts = [await Self.held(a).count, await Self.held(b).count, await Self.held(c).count]
            return counts.allSatisfy { $0 >= 1 } && counts.reduce(0, +) == Self.shards
        }
        let leases = "\(await Self.cluster(a) ?? [:]) \(await Self.cluster(b) ?? [:]) \(await Self.cluster(c) ?? [:])"
        #expect(shared, "every node holds a share of the shards: \(leases)")

        // Register through A; each node's shards fill from the change feed.
        let registering = ContinuousClock.now
        for start in stride(from: 0, to: Self.total, by: 10_000) {
            let response = try await a.client.post(
                "/v1/tokens", json: registrationBody(start..<start + 10_000, channel: "match"))
            #expect(response.status == 200 && response.json?["registered"] as? Int == 10_000, "\(response)")
        }
        let registration = ContinuousClock.now - registering
        let filled = await eventually(timeout: .seconds(60)) {
            var sum = 0
            for node in [a, b, c] { sum += (await Self.cluster(node)?["shard_tokens"] as? Int) ?? 0 }
            return sum == Self.total
        }
        #expect(filled, "the held shards of the three nodes hold every token")

        // A single push goes out from the node serving the token's shard; the others refuse it at once and name it.
        var answers: [(node: String, status: Int, body: [String: Any])] = []
        for (name, node) in [("a", a), ("b", b), ("c", c)] {
            let response = try await node.client.post(
                "/v1/push", json: #"{"token":"\#(tokenHex(7))","event":"update","content_state":{"home":0}}"#)
            answers.append((name, response.status, response.json ?? [:]))
        }
        let served = answers.filter { $0.status == 200 }
        #expect(served.count == 1 && served.first?.body["action"] as? String == "delivered", "\(answers)")
        for refused in answers where refused.status != 200 {
            let detail = refused.body["detail"] as? String ?? ""
            #expect(
                refused.status == 503 && refused.body["code"] as? String == "shard_elsewhere"
                    && detail.contains("node \(served.first?.node ?? "?") serves it"), "\(refused)")
        }

        // Publish through B, follow from C, kill A once a quarter is delivered.
        let published = try await b.client.post(
            "/v1/channels/match/updates", json: updateBody(timestamp: unixNow, home: 1))
        #expect(published.status == 202, "\(published)")
        let wave = try #require(published.json?["wave_id"] as? Int)
        let quarter = await eventually(timeout: .seconds(120)) {
            ((await Self.report(c, wave))?["delivered"] as? Int ?? 0) >= Self.total / 4
        }
        let early = await Self.report(c, wave) ?? [:]
        try #require(quarter, "a quarter delivered: \(early)")
        // The wave list of any node shows it running (the sum of every node's shards, as GET of the wave).
        let listed = (try? await c.client.get("/v1/waves").json?["waves"] as? [[String: Any]]) ?? []
        let running = listed.first { $0["id"] as? Int == wave }
        #expect(
            running?["state"] as? String == "running" && (running?["delivered"] as? Int ?? 0) >= Self.total / 4,
            "the running wave in C's list: \(listed)")
        let lostShards = await Self.held(a)
        a.signal(SIGKILL)
        let killed = ContinuousClock.now
        _ = await a.waitForExit()
        // Read from the lease table itself (a node's API may be busy loading the shards it took).
        let movedOver = await eventually(timeout: .seconds(60)) {
            (try? postgres.psql("SELECT count(*) FROM shard_leases WHERE node IN ('b', 'c') AND expires_at > now()"))
                == "\(Self.shards)"
        }
        let takeover = ContinuousClock.now - killed
        #expect(movedOver, "B and C take A's shards \(lostShards)")
        let completed = await eventually(timeout: .seconds(180)) {
            (await Self.report(c, wave))?["state"] as? String == "complete"
        }
        let firstReport = await Self.report(c, wave) ?? [:]
        #expect(completed, "\(firstReport)\n\(c.errors.suffix(1500))")
        let final = try #require(await Self.report(c, wave))
        #expect(final["targeted"] as? Int == Self.total && final["delivered"] as? Int == Self.total, "\(final)")
        let accounted = ["delivered", "failed", "superseded", "expired", "invalidated"].reduce(0) {
            $0 + ((final[$1] as? Int) ?? 0)
        }
        #expect(accounted == Self.total, "every token accounted for exactly once: \(final)")
        let fromB = await Self.report(b, wave) ?? [:]
        #expect(
            final as NSDictionary == fromB as NSDictionary, "any node answers the same report: C \(final)\nB \(fromB)")
        // B published it: B logs its completion (once, from the store) and counts it in its metrics.
        let loggedByB = await eventually(timeout: .seconds(30)) { b.errors.contains("wave complete") }
        #expect(loggedByB, "B logs the completion of the wave it published: \(b.errors.suffix(1500))")
        #expect(try await b.client.get("/metrics").text.contains("fanfare_waves_completed_total 1"))

        // Phase 2: B stopped past its lease mid-wave; C finishes B's shards; B resumed sends nothing.
        let second = try await c.client.post(
            "/v1/channels/match/updates", json: updateBody(timestamp: unixNow + 1, home: 2))
        let secondWave = try #require(second.json?["wave_id"] as? Int)
        let started = await eventually(timeout: .seconds(120)) {
            ((await Self.report(c, secondWave))?["delivered"] as? Int ?? 0) >= Self.total / 4
        }
        try #require(started, "the second wave runs")
        let stoppedShards = await Self.held(b)
        b.signal(SIGSTOP)
        let secondDone = await eventually(timeout: .seconds(180)) {
            (await Self.report(c, secondWave))?["state"] as? String == "complete"
        }
        let secondSoFar = await Self.report(c, secondWave) ?? [:]
        #expect(secondDone, "C finishes the second wave alone: \(secondSoFar)")
        let heldByC = await Self.held(c)
        #expect(heldByC.count == Self.shards)
        // C ended B's database sessions once B's heartbeat was older than the lease, so the locks B held went.
        let fencedB = await eventually(timeout: .seconds(30)) { c.errors.contains("cluster: fenced node b ") }
        #expect(fencedB, "C fenced the stopped node: \(c.errors.suffix(1500))")
        let metricsOfC = try await c.client.get("/metrics").text
        #expect(
            metricsOfC.contains("fanfare_cluster_shards_held \(Self.shards)"), "C's metrics: \(metricsOfC.prefix(3000))"
        )
        #expect(metricsOfC.contains("fanfare_cluster_takeovers_total "), "C took over shards of A or B")
        #expect(metricsOfC.contains("fanfare_cluster_sessions_fenced_total "), "C counts the sessions it ended")
        let resumedAt = Self.nowMilliseconds
        b.signal(SIGCONT)
        let status = await b.waitForExit(timeout: .seconds(30))
        #expect(status == 75, "B resumed, saw its leases gone and exited 75: \(b.errors.suffix(1500))")
        let secondReport = try #require(await Self.report(c, secondWave))
        #expect(
            secondReport["targeted"] as? Int == Self.total && secondReport["delivered"] as? Int == Self.total,
            "\(secondReport)")

        c.signal(SIGTERM)
        #expect(await c.waitForExit() == 0, "\(c.errors.suffix(1500))")
        await simulator.stop()

        let log = try AcceptedLog(path: logPath)
        #expect(log.unparsable == 0)
        #expect(log.idsByToken.count == Self.total, "every token reached")
        let afterResume = log.times.filter { $0 >= resumedAt }.count
        #expect(afterResume == 0, "\(afterResume) pushes reached the simulator after the stopped node resumed")
        // Each token got two waves; a third line of a token is a resend. A kill leaves at most the window of each
        // lost shard (plus what was in flight) to resend; SIGSTOP the same for B's shards.
        // Token 7 also got one single push (above), with an id of its own.
        let resent = log.idsByToken.filter { $0.key.lowercased() != tokenHex(7).lowercased() }.values.filter {
            $0.count > 2
        }
        let bound = 2 * (lostShards.count + stoppedShards.count) * (Self.window + Self.streams)
        #expect(resent.count <= bound, "\(resent.count) tokens resent, at most \(bound)")
        #expect(resent.allSatisfy { Set($0).count == 2 }, "a resend carries its first attempt's apns-id")
        print(
            """
            multinode: 3 nodes, \(Self.shards) shards, \(Self.total) tokens; registration through one node \(registration); \
            kill -9: takeover of \(lostShards) in \(takeover); resends \(resent.count) (bound \(bound)); \
            SIGSTOP: resumed node exited \(status), \(afterResume) pushes after resume
            """)
    }
}

// Issue 24's fault campaign: three `fanfare serve` nodes on one real PostgreSQL, a mixed audience (update tokens
// registered through one node, broadcast subscriptions through another, the channel linked to an APNs broadcast
// channel through the third), one wave published mid-campaign, and one fault per scenario while it runs. Every
// scenario ends with the same checks: the wave completes on the cluster with every token accounted for once,
// every token reached, duplicates only where a shard changed hands without a hand-over (and then within the
// checkpoint window, each with its first apns-id), the broadcast sent once (or resent once with the same
// apns-request-id, reported), no node exits but with 0 or 75 (or the signal the scenario sent), and no API call
// on a live node answered anything but 200 or 503 with Retry-After. Short in the test command; perf/chaos.sh runs
// it full-size (FANFARE_CHAOS=full) and prints the table docs/deployment.md shows.
import FanfareTestSupport
import Foundation
import Glibc
import Testing

enum ChaosScenario: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case killNode = "kill -9 of a node"
    case stopNodePastLease = "a node stopped (SIGSTOP) past its lease"
    case restartDatabase = "PostgreSQL crash-stopped and started"
    case freezeDatabase = "PostgreSQL frozen (SIGSTOP)"
    case cutNodeFromDatabase = "one node cut from PostgreSQL"
    case nodeJoins = "a fourth node joins"
    case rollingRestart = "rolling restart of every node"

    var testDescription: String { rawValue }
}

/// One row of the campaign's table.
struct ChaosRow {
    var scenario: ChaosScenario
    var makespanSeconds: Double
    var duplicates: Int
    var broadcastsSent: Int
    var apiErrors: Int
    var refusals: Int
    var restarts: Int
    var recoverySeconds: Double

    var line: String {
        let makespan = String(format: "%.1f", makespanSeconds)
        let recovery = String(format: "%.1f", recoverySeconds)
        return "| \(scenario.rawValue) | \(makespan) s | \(duplicates) | \(broadcastsSent) | \(apiErrors) | "
            + "\(refusals) | \(restarts) | \(recovery) s |"
    }
}

@Suite("fault campaign: several nodes on PostgreSQL (child processes)", .serialized, .ownThread)
struct ChaosCampaignTests {
    @Test("a fault mid-wave loses nothing", arguments: ChaosScenario.allCases)
    func aFaultMidWaveLosesNothing(_ scenario: ChaosScenario) async throws {
        let size = ChaosSize.current
        let cluster = try await ChaosCluster(size: size)
        defer { cluster.removeFiles() }
        let nodes = ["a", "b", "c"]
        for name in nodes { cluster.manage(name, true) }
        async let startA = cluster.start("a")
        async let startB = cluster.start("b")
        async let startC = cluster.start("c")
        _ = try await (startA, startB, startC)
        for name in nodes { cluster.manage(name, false) }
        cluster.startSupervisor()
        let settled = await eventually(timeout: .seconds(120)) { await cluster.sharesSettled(among: nodes) }
        let shares = await cluster.held()
        try #require(settled, "every node serves a share: \(shares)\n\(cluster.logs())")

        try await Self.registerAudience(cluster)
        let publisher = try #require(cluster.node("c"))
        let published = try await publisher.client.post(
            "/v1/channels/\(ChaosCluster.channel)/updates", json: updateBody(timestamp: unixNow, home: 1))
        try #require(published.status == 202, "\(published)")
        let wave = try #require(published.json?["wave_id"] as? Int)
        let quarter = await eventually(timeout: .seconds(120)) { await cluster.delivered(wave) >= size.tokens / 4 }
        let early = await cluster.report(wave) ?? [:]
        try #require(quarter, "a quarter delivered: \(early)")

        let prober = ChaosProber()
        prober.start(cluster, wave: wave)
        let faultStarted = ContinuousClock.now
        try await ChaosFaults.inject(scenario, into: cluster, prober: prober)
        let recovered = await eventually(timeout: .seconds(180)) {
            await cluster.sharesSettled(among: [])
        }
        let recovery = ContinuousClock.now - faultStarted
        let served = await cluster.held()
        #expect(recovered, "every shard served again: \(served)\n\(cluster.logs())")
        let complete = await eventually(timeout: .seconds(300)) {
            (await cluster.report(wave))?["state"] as? String == "complete"
        }
        let report = await cluster.report(wave) ?? [:]
        #expect(complete, "the wave completes: \(report)\n\(cluster.logs())")
        await prober.stop()
        let restarts = cluster.exits.count
        await cluster.stopAll()

        var row = try Self.check(scenario, cluster, report: report, prober: prober, recovery: recovery)
        row.restarts = restarts
        print("chaos \(size.name): \(row.line)")
    }

    /// Tokens through A, broadcast subscriptions through B, the channel linked through C; every node's shards
    /// hold their tokens before the wave.
    static func registerAudience(_ cluster: ChaosCluster) async throws {
        let size = cluster.size
        let (a, b, c) = (cluster.node("a")!, cluster.node("b")!, cluster.node("c")!)
        for start in stride(from: 0, to: size.tokens, by: 10_000) {
            let end = min(size.tokens, start + 10_000)
            let response = try await a.client.post(
                "/v1/tokens", json: registrationBody(start..<end, channel: ChaosCluster.channel))
            try #require(response.status == 200 && response.json?["registered"] as? Int == end - start, "\(response)")
        }
        for start in stride(from: 0, to: size.subscribers, by: 5_000) {
            let items = (start..<min(size.subscribers, start + 5_000)).map {
                #"{"kind":"broadcast","channels":["\#(ChaosCluster.channel)"],"activity_id":"s\#($0)","device_id":"sd\#($0)"}"#
            }
            let response = try await b.client.post(
                "/v1/tokens", json: #"{"tokens":[\#(items.joined(separator: ","))]}"#)
            try #require(response.status == 200, "\(response)")
        }
        let link = try await c.client.put(
            "/v1/channels/\(ChaosCluster.channel)/broadcast", json: #"{"storage_policy":0}"#)
        try #require(link.status == 200, "\(link)")
        let filled = await eventually(timeout: .seconds(120)) {
            var sum = 0
            for (_, node) in cluster.running { sum += (await ChaosCluster.cluster(node)?["shard_tokens"] as? Int) ?? 0 }
            return sum == size.tokens
        }
        try #require(filled, "the nodes' shards hold every token")
    }

    /// The checks every scenario ends with; the row it measured.
    static func check(
        _ scenario: ChaosScenario, _ cluster: ChaosCluster, report: [String: Any], prober: ChaosProber,
        recovery: Duration
    ) throws -> ChaosRow {
        let size = cluster.size
        let count = { (key: String) in report[key] as? Int ?? -1 }
        #expect(count("targeted") == size.tokens && count("delivered") == size.tokens, "\(report)")
        #expect(count("accounted") == size.tokens, "every token accounted for once: \(report)")
        let broadcast = report["broadcast"] as? [String: Any] ?? [:]
        #expect(
            broadcast["outcome"] as? String == "delivered" && broadcast["subscribers"] as? Int == size.subscribers,
            "\(broadcast)")

        let log = try AcceptedLog(path: cluster.logPath)
        #expect(log.unparsable == 0)
        #expect(log.idsByToken.count == size.tokens, "every token reached: \(log.idsByToken.count)")
        let duplicated = log.idsByToken.values.filter { $0.count > 1 }
        #expect(duplicated.allSatisfy { Set($0).count == 1 }, "a resend carries its first apns-id")
        // Exits: the signal the scenario sent, 0 after SIGTERM, 75 after a lost lease; anything else is a fault.
        let unexpected = cluster.exits.filter { !$0.expected && $0.status != 0 && $0.status != 75 }
        #expect(unexpected.isEmpty, "exits: \(cluster.exits)\n\(cluster.logs())")
        let abrupt = cluster.exits.filter { $0.status != 0 }.count
        // A shard changes hands without a hand-over only when its node died or lost its lease: then what it
        // sent after its last durable checkpoint may go again (at most the window, plus what was in flight).
        let bound = abrupt == 0 ? 0 : ChaosCluster.shards * (ChaosCluster.window + size.streams)
        #expect(duplicated.count <= bound, "\(duplicated.count) duplicates (bound \(bound)); exits \(cluster.exits)")
        let requestIDs = log.broadcasts.map(\.requestID)
        let resent = broadcast["resent_after_restart"] as? Bool == true
        #expect(
            log.broadcasts.count == 1 || (log.broadcasts.count == 2 && resent && Set(requestIDs).count == 1),
            "the broadcast once for the cluster: \(log.broadcasts), resent \(resent)")
        #expect(prober.errors.isEmpty, "API errors: \(prober.errors.prefix(10))")
        #expect(prober.answers > 0, "the prober got answers")
        let makespan = report["makespan_seconds"] as? Double ?? 0
        let seconds = Double(recovery.components.seconds) + Double(recovery.components.attoseconds) / 1e18
        return ChaosRow(
            scenario: scenario, makespanSeconds: makespan, duplicates: duplicated.count,
            broadcastsSent: log.broadcasts.count, apiErrors: prober.errors.count, refusals: prober.refusals,
            restarts: 0, recoverySeconds: seconds)
    }
}

// Issue 24: with several nodes, a request carrying an Idempotency-Key is claimed in the shared database while it
// runs, so a retry that lands on another node is refused as in progress (409) instead of running the request a
// second time; the answer, once stored, is replayed by every node. Two gates on two connections to one real
// PostgreSQL stand for two nodes.
import FanfarePostgres
@testable import FanfareService
import FanfareStorage
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

@Suite("Idempotency keys across nodes (PostgreSQL)", .serialized, .ownThread)
struct SharedIdempotencyTests {
    @Test func aRetryOnAnotherNodeWhileTheFirstRunsIsInProgressThenReplayed() throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        let clock = Atomic<Int64>(1_800_000_000_000)
        let now: @Sendable () -> Int64 = { clock.load(ordering: .relaxed) }
        let nodeA = IdempotencyGate(
            store: try PostgresTokenStore(url: postgres.url), lifetime: .seconds(86_400), wallClockMilliseconds: now)
        let nodeB = IdempotencyGate(
            store: try PostgresTokenStore(url: postgres.url), lifetime: .seconds(86_400), wallClockMilliseconds: now)
        let request = IdempotencyGate.fingerprint(method: "POST", path: "/v1/push", body: Array("{}".utf8))
        let other = IdempotencyGate.fingerprint(method: "POST", path: "/v1/push", body: Array("{\"x\":1}".utf8))

        guard case .proceed(let claim) = try nodeA.begin(scope: "key-1", key: "k", fingerprint: request) else {
            Issue.record("the first request runs")
            return
        }
        #expect(
            try nodeB.begin(scope: "key-1", key: "k", fingerprint: request) == .inProgress,
            "the retry on B while A runs it")
        #expect(try nodeB.begin(scope: "key-1", key: "k", fingerprint: other) == .reused, "another request, same key")
        #expect(try nodeB.begin(scope: "key-2", key: "k", fingerprint: request).isProceed, "another caller's key")
        try nodeA.finish(
            claim, status: 200, headers: [.init(name: "Content-Type", value: "application/json")], body: [1])
        guard case .replay(let stored) = try nodeB.begin(scope: "key-1", key: "k", fingerprint: request) else {
            Issue.record("B replays A's answer")
            return
        }
        #expect(stored.status == 200 && stored.body == [1])

        // A 5xx is not kept, and an abandoned request frees its key: the retry runs.
        guard case .proceed(let failing) = try nodeA.begin(scope: "key-1", key: "5xx", fingerprint: request) else {
            Issue.record("runs")
            return
        }
        try nodeA.finish(failing, status: 503, headers: [], body: [])
        guard case .proceed(let abandoned) = try nodeB.begin(scope: "key-1", key: "5xx", fingerprint: request) else {
            Issue.record("the retry of a 5xx runs")
            return
        }
        nodeB.abandon(abandoned)
        #expect(try nodeA.begin(scope: "key-1", key: "5xx", fingerprint: request).isProceed)

        // A node that died mid-request leaves its claim: it frees after the claim lifetime.
        guard case .proceed = try nodeA.begin(scope: "key-1", key: "dead", fingerprint: request) else {
            Issue.record("runs")
            return
        }
        #expect(try nodeB.begin(scope: "key-1", key: "dead", fingerprint: request) == .inProgress)
        clock.add(IdempotencyGate.claimLifetimeMilliseconds + 1, ordering: .relaxed)
        #expect(try nodeB.begin(scope: "key-1", key: "dead", fingerprint: request).isProceed)
    }
}

extension IdempotencyGate.Decision: Equatable {
    public static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.inProgress, .inProgress), (.reused, .reused), (.proceed, .proceed): return true
        case (.replay(let a), .replay(let b)): return a == b
        default: return false
        }
    }

    var isProceed: Bool {
        if case .proceed = self { return true }
        return false
    }
}

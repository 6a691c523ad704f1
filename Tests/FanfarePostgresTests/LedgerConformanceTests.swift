import FanfareCore
import FanfarePostgres
import FanfareSQLite
import FanfareStorage
import Foundation
import Synchronization
import Testing

// The registry's broadcast subscriptions, ledger and broadcast links: the same expectations against
// SQLiteTokenStore and PostgresTokenStore (both keep them with the same rules).

private typealias LedgerTestStore = any SubscriptionLedgerStore & ServiceStorage & BroadcastLinkStore

/// A fresh store of `kind` stamping its history with a test clock.
private func withClockedStore<T>(
    _ kind: StoreKind, retention: Duration = LedgerRetention.default, _ body: (LedgerTestStore, LedgerClock) throws -> T
) throws -> T {
    try withDatabase(kind) { database in
        let clock = LedgerClock()
        let store: LedgerTestStore
        if let url = database.url {
            store = try PostgresTokenStore(url: url, historyRetention: retention, clock: clock.read)
        } else {
            store = try SQLiteTokenStore(path: database.sqlitePath, historyRetention: retention, clock: clock.read)
        }
        defer { try? store.close() }
        return try body(store, clock)
    }
}

extension PostgresSuites {
    @Suite("Registry conformance: replacement rules and broadcast subscriptions", .serialized)
    struct ReplacementRuleConformanceTests {
        @Test(arguments: StoreKind.allCases)
        func aNewPushToStartTokenReplacesTheOldOneOfTheSameDeviceAndType(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, clock in
                try store.register([
                    LedgerFixture.pushToStart(1, device: "d1"),
                    LedgerFixture.pushToStart(2, device: "d1", type: "OtherAttributes"),
                    LedgerFixture.pushToStart(3, device: "d2"),
                ])
                // The same token again replaces nothing.
                #expect(try store.register([LedgerFixture.pushToStart(1, device: "d1")]).replacedCount == 0)
                let result = try store.register([LedgerFixture.pushToStart(4, device: "d1", broadcast: true)])
                #expect(result.replacedTokens == [makeToken(1)])
                #expect(result.replacedSubscriptions.isEmpty && result.subscriptionDeltas.isEmpty)
                #expect(Set(try store.all().keys) == [makeToken(2), makeToken(3), makeToken(4)])
                #expect(try store.all()[makeToken(4)]?.supportsBroadcast == true)
                #expect(try store.all()[makeToken(3)]?.supportsBroadcast == false)

                let ledger = try #require(
                    try store.ledger(token: makeToken(1), bundleID: testBundle, environment: .production))
                #expect(ledger.registration == nil)
                #expect(ledger.history.map(\.kind) == [.replaced, .registered])
                #expect(ledger.history[0].replacedBy == makeToken(4))
                #expect(ledger.history[0].at == clock.now.load(ordering: .relaxed))
                #expect(ledger.history[1].at == 1_700_000_000_000)
                #expect(ledger.history[0].registrationKind == .pushToStart)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func withinOneBatchTheLastPushToStartTokenOfADeviceWins(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, _ in
                let result = try store.register([
                    LedgerFixture.pushToStart(1, device: "d1"), LedgerFixture.pushToStart(2, device: "d1"),
                    LedgerFixture.update(3, activity: "a3"),
                ])
                #expect(result.replacedTokens == [makeToken(1)])
                #expect(Set(try store.all().keys) == [makeToken(2), makeToken(3)])
                #expect(try store.count() == 2)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func aSubscriptionReplacesTheUpdateTokensOfItsActivity(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, _ in
                try store.register([LedgerFixture.update(1, activity: "a1"), LedgerFixture.update(2, activity: "a2")])
                let result = try store.register(
                    [], subscriptions: [LedgerFixture.subscription("a1", channels: ["match-1", "all"])])
                #expect(result.replacedTokens == [makeToken(1)])
                #expect(result.subscriptionDeltas == ["match-1": 1, "all": 1])
                #expect(Set(try store.all().keys) == [makeToken(2)])
                #expect(
                    try store.subscription(activityID: "a1", bundleID: testBundle, environment: .production)?.channels
                        == ["all", "match-1"])
                #expect(
                    try store.subscriptionCounts(bundleID: testBundle, environment: .production) == [
                        "match-1": 1, "all": 1,
                    ])
                let ledger = try #require(
                    try store.ledger(token: makeToken(1), bundleID: testBundle, environment: .production))
                #expect(ledger.history.first?.kind == .replaced)
                #expect(ledger.history.first?.replacedBy == nil)  // by the activity's broadcast subscription
            }
        }

        @Test(arguments: StoreKind.allCases)
        func anUpdateTokenReplacesTheSubscriptionOfItsActivity(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, _ in
                try store.register(
                    [], subscriptions: [LedgerFixture.subscription("a1"), LedgerFixture.subscription("a2")])
                let result = try store.register([LedgerFixture.update(1, activity: "a1")])
                #expect(result.replacedSubscriptions == ["a1"])
                #expect(result.replacedTokens.isEmpty)
                #expect(result.subscriptionDeltas == ["match-1": -1])
                #expect(try store.subscription(activityID: "a1", bundleID: testBundle, environment: .production) == nil)
                #expect(try store.subscriptionCounts(bundleID: testBundle, environment: .production) == ["match-1": 1])
                let activity = try #require(
                    try store.ledger(activityID: "a1", bundleID: testBundle, environment: .production))
                #expect(activity.updateTokens == [makeToken(1)])
                #expect(activity.subscription == nil)
                #expect(activity.history.first?.kind == .replaced)
                #expect(activity.history.first?.registrationKind == .broadcastSubscription)
                #expect(activity.history.first?.replacedBy == makeToken(1))
            }
        }

        @Test(arguments: StoreKind.allCases)
        func oneBatchWritesTokensThenSubscriptionsInOneTransaction(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, _ in
                // The same activity as a token and a subscription in one batch: the subscription (later) wins.
                let result = try store.register(
                    [LedgerFixture.update(1, activity: "a1"), LedgerFixture.update(2, activity: "a2")],
                    subscriptions: [LedgerFixture.subscription("a1")])
                #expect(result.replacedTokens == [makeToken(1)])
                #expect(Set(try store.all().keys) == [makeToken(2)])
                // A bad subscription rejects the whole batch, numbered after the tokens; nothing is written.
                #expect(
                    throws: RegistryError.invalidRegistration(
                        index: 1, reason: "no channels; a token must follow at least one channel")
                ) {
                    try store.register(
                        [LedgerFixture.update(3, activity: "a3")],
                        subscriptions: [LedgerFixture.subscription("a4", channels: [])])
                }
                #expect(
                    throws: RegistryError.invalidRegistration(
                        index: 0, reason: "broadcast subscription without an activity id")
                ) { try store.register([], subscriptions: [LedgerFixture.subscription("")]) }
                #expect(try store.count() == 1)
                #expect(try store.subscriptionCounts(bundleID: testBundle, environment: .production) == ["match-1": 1])
            }
        }

        @Test(arguments: StoreKind.allCases)
        func reRegisteringASubscriptionMovesItsChannelsAndReportsTheDeltas(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, _ in
                try store.register(
                    [],
                    subscriptions: [
                        LedgerFixture.subscription("a1", channels: ["m1", "m2"]),
                        LedgerFixture.subscription("a2", channels: ["m1"]),
                    ])
                var moved = LedgerFixture.subscription("a1", channels: ["m2", "m3"], createdAt: 1_700_000_500_000)
                moved.frequentUpdates = true
                let result = try store.register([], subscriptions: [moved])
                #expect(result.subscriptionDeltas == ["m1": -1, "m3": 1])
                let stored = try #require(
                    try store.subscription(activityID: "a1", bundleID: testBundle, environment: .production))
                #expect(stored.createdAt == 1_700_000_000_000)  // kept
                #expect(stored.lastSeenAt == 1_700_000_500_000)
                #expect(stored.frequentUpdates)
                #expect(
                    try store.subscriptionCounts(bundleID: testBundle, environment: .production) == [
                        "m1": 1, "m2": 1, "m3": 1,
                    ])
                let removed = try store.unregisterSubscriptions(
                    activityIDs: ["a1", "unknown"], bundleID: testBundle, environment: .production)
                #expect(removed.subscriptions == ["a1"])
                #expect(removed.subscriptionDeltas == ["m2": -1, "m3": -1])
                #expect(try store.subscriptionCounts(bundleID: testBundle, environment: .production) == ["m1": 1])
            }
        }

        @Test(arguments: StoreKind.allCases)
        func subscriptionsRetireWithTheirChannelsEndAndByAge(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, _ in
                try store.register(
                    [LedgerFixture.update(1, activity: "a1"), LedgerFixture.pushToStart(2, device: "d2")],
                    subscriptions: [
                        LedgerFixture.subscription("s1", channels: ["match-1"]),
                        LedgerFixture.subscription("s2", channels: ["match-2"], createdAt: 500),
                    ])
                let ended = try store.retire(following: "match-1")
                #expect(ended.tokens == [makeToken(1)])
                #expect(ended.subscriptions == ["s1"])
                #expect(ended.subscriptionDeltas == ["match-1": -1])
                #expect(try store.count() == 1)  // the push-to-start token stays
                let old = try store.retire(createdBefore: 1_000)
                #expect(old.tokens.isEmpty)
                #expect(old.subscriptions == ["s2"])
                #expect(old.subscriptionDeltas == ["match-2": -1])
                #expect(try store.subscriptionCounts(bundleID: testBundle, environment: .production).isEmpty)
                let s1 = try #require(
                    try store.ledger(activityID: "s1", bundleID: testBundle, environment: .production))
                #expect(s1.history.first?.kind == .retiredChannelEnded)
                #expect(s1.history.first?.channel == "match-1")
                let s2 = try #require(
                    try store.ledger(activityID: "s2", bundleID: testBundle, environment: .production))
                #expect(s2.history.map(\.kind) == [.retiredLifetime, .registered])
                let token = try #require(
                    try store.ledger(token: makeToken(1), bundleID: testBundle, environment: .production))
                #expect(token.history.first?.kind == .retiredChannelEnded)
            }
        }
    }

    @Suite("Registry conformance: the token ledger", .serialized)
    struct TokenLedgerConformanceTests {
        @Test(arguments: StoreKind.allCases)
        func linksAnUpdateTokenToItsPushToStartTokenAndBack(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, _ in
                try store.saveRetirement(
                    bundleID: testBundle, environment: .production, channel: "match-1", dueAt: 1_700_009_000)
                try store.register(
                    [
                        LedgerFixture.pushToStart(1, device: "d1"),
                        LedgerFixture.update(2, activity: "a2", device: "d1", channels: ["match-1", "all"]),
                        LedgerFixture.update(3, activity: "a3", device: "d9"),
                    ],
                    subscriptions: [LedgerFixture.subscription("a4", device: "d1")])

                let updateEntry = try #require(
                    try store.ledger(
                        token: makeToken(2), bundleID: testBundle, environment: .production,
                        activityLifetime: .seconds(3_600)))
                #expect(updateEntry.startedBy == makeToken(1))
                #expect(updateEntry.registration?.activityID == "a2")
                let retiresAt: Int64 = 1_700_000_000_000 + 3_600_000
                #expect(updateEntry.retiresByLifetimeAt == retiresAt)
                #expect(updateEntry.pendingRetirements == ["match-1": 1_700_009_000])
                #expect(updateEntry.history.map(\.kind) == [.registered])

                let startEntry = try #require(
                    try store.ledger(token: makeToken(1), bundleID: testBundle, environment: .production))
                #expect(startEntry.startedBy == nil)
                #expect(startEntry.retiresByLifetimeAt == nil)
                #expect(
                    startEntry.activities == [
                        LedgerActivity(
                            activityID: "a2", token: makeToken(2), channels: ["all", "match-1"],
                            createdAt: 1_700_000_000_000),
                        LedgerActivity(
                            activityID: "a4", token: nil, channels: ["match-1"], createdAt: 1_700_000_000_000),
                    ])
                // No push-to-start token for d9; another app knows nothing of these tokens.
                #expect(
                    try store.ledger(token: makeToken(3), bundleID: testBundle, environment: .production)?.startedBy
                        == nil)
                #expect(try store.ledger(token: makeToken(1), bundleID: testBundle, environment: .sandbox) == nil)
                #expect(try store.ledger(token: makeToken(99), bundleID: testBundle, environment: .production) == nil)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func historyKeepsInvalidationsWithTheirReasonAndUnregistrations(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, clock in
                try store.register([LedgerFixture.update(1, activity: "a1"), LedgerFixture.update(2, activity: "a2")])
                let invalidatedAt = clock.now.load(ordering: .relaxed)
                #expect(
                    try store.invalidate([
                        TokenInvalidation(token: makeToken(1), invalidSince: 1_700_000_100_000, reason: "Unregistered")
                    ]) == [true])
                clock.advance(by: 1_000)
                #expect(try store.unregister([makeToken(2)]) == 1)
                clock.advance(by: 1_000)
                // Registered again: the ledger shows the live registration and the ended one.
                var again = LedgerFixture.update(1, activity: "a1-new")
                again.createdAt = clock.now.load(ordering: .relaxed)
                again.lastSeenAt = again.createdAt
                try store.register([again])

                let first = try #require(
                    try store.ledger(token: makeToken(1), bundleID: testBundle, environment: .production))
                #expect(first.registration?.activityID == "a1-new")
                #expect(first.history.map(\.kind) == [.registered, .invalidated, .registered])
                #expect(first.history[1].reason == "Unregistered")
                #expect(first.history[1].invalidSince == 1_700_000_100_000)
                #expect(first.history[1].at == invalidatedAt)
                #expect(first.history[1].activityID == "a1")
                let second = try #require(
                    try store.ledger(token: makeToken(2), bundleID: testBundle, environment: .production))
                #expect(second.registration == nil)
                #expect(second.history.map(\.kind) == [.unregistered, .registered])
                // A token kept because it was registered after the 410 gets no history row.
                #expect(
                    try store.invalidate([
                        TokenInvalidation(token: makeToken(1), invalidSince: 5, reason: "Unregistered")
                    ])
                        == [false])
                #expect(
                    try store.ledger(token: makeToken(1), bundleID: testBundle, environment: .production)?.history.count
                        == 3)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func historyIsPrunedByAge(_ kind: StoreKind) throws {
            try withClockedStore(kind, retention: .seconds(60)) { store, clock in
                try store.register([LedgerFixture.update(1, activity: "a1"), LedgerFixture.update(2, activity: "a2")])
                _ = try store.unregister([makeToken(1)])
                clock.advance(by: 30_000)
                _ = try store.unregister([makeToken(2)])
                clock.advance(by: 40_000)  // the first row is 70 s old, the second 40 s
                _ = try store.retire(createdBefore: 0)  // the maintenance sweep
                #expect(try store.ledger(token: makeToken(1), bundleID: testBundle, environment: .production) == nil)
                #expect(try store.ledger(token: makeToken(2), bundleID: testBundle, environment: .production) != nil)
                #expect(try store.pruneLedgerHistory(before: Int64.max) == 1)
                #expect(try store.ledger(token: makeToken(2), bundleID: testBundle, environment: .production) == nil)
            }
        }
    }

    @Suite("Registry conformance: broadcast links and broadcast wave fields", .serialized)
    struct BroadcastStorageConformanceTests {
        @Test(arguments: StoreKind.allCases)
        func broadcastLinksRoundTripAndScheduleTheirDeletion(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, _ in
                let link = BroadcastLink(
                    channel: "match-1", channelID: "dHdvL2RvbWFpbnM+Kw==", storagePolicy: 1, createdByUs: true,
                    createdAt: 1_700_000_000_000)
                let given = BroadcastLink(
                    channel: "match-2", channelID: "YWJj", storagePolicy: 0, createdByUs: false,
                    createdAt: 1_700_000_000_001)
                try store.saveBroadcastLink(link, bundleID: testBundle, environment: .production)
                try store.saveBroadcastLink(given, bundleID: testBundle, environment: .production)
                #expect(
                    try store.broadcastLink(channel: "match-1", bundleID: testBundle, environment: .production) == link)
                #expect(try store.broadcastLink(channel: "match-1", bundleID: testBundle, environment: .sandbox) == nil)
                #expect(try store.broadcastLinks(bundleID: testBundle, environment: .production) == [link, given])
                #expect(
                    try store.scheduleBroadcastLinkDeletion(
                        channel: "match-1", bundleID: testBundle, environment: .production, after: 1_700_003_600))
                #expect(
                    !(try store.scheduleBroadcastLinkDeletion(
                        channel: "nope", bundleID: testBundle, environment: .production, after: 1)))
                #expect(
                    try store.dueBroadcastLinkDeletions(
                        now: 1_700_003_599, bundleID: testBundle, environment: .production
                    )
                    .isEmpty)
                var due = link
                due.deleteAfter = 1_700_003_600
                #expect(
                    try store.dueBroadcastLinkDeletions(
                        now: 1_700_003_600, bundleID: testBundle, environment: .production)
                        == [due])
                #expect(
                    try store.removeBroadcastLink(channel: "match-1", bundleID: testBundle, environment: .production))
                #expect(
                    !(try store.removeBroadcastLink(channel: "match-1", bundleID: testBundle, environment: .production))
                )
                #expect(try store.broadcastLinks(bundleID: testBundle, environment: .production) == [given])
                #expect(throws: RegistryError.self) {
                    var bad = given
                    bad.storagePolicy = 2
                    try store.saveBroadcastLink(bad, bundleID: testBundle, environment: .production)
                }
            }
        }

        /// Several nodes: one claims the deletion of a due link's APNs channel; another gets it only once that
        /// claim ran out (the claimant died before deleting it).
        @Test func oneNodeClaimsTheDeletionOfAChannel() throws {
            try withClockedStore(.postgres) { store, _ in
                let claims = try #require(store as? any BroadcastLinkDeletionClaims)
                let link = BroadcastLink(
                    channel: "match-1", channelID: "YWJj", storagePolicy: 0, createdByUs: true, createdAt: 1)
                try store.saveBroadcastLink(link, bundleID: testBundle, environment: .production)
                func claim(_ node: String, for duration: Duration = .seconds(60)) throws -> Bool {
                    try claims.claimBroadcastLinkDeletion(
                        channel: "match-1", bundleID: testBundle, environment: .production, claimant: node,
                        claimFor: duration)
                }
                #expect(!(try claim("a")), "nothing to claim before the deletion is scheduled")
                try store.scheduleBroadcastLinkDeletion(
                    channel: "match-1", bundleID: testBundle, environment: .production, after: 10)
                #expect(try claim("a", for: .milliseconds(300)))
                #expect(!(try claim("b")), "a holds it")
                #expect(try claim("a", for: .milliseconds(300)), "a may renew its own claim")
                Thread.sleep(forTimeInterval: 0.4)
                #expect(try claim("b"), "a's claim ran out")
                #expect(!(try claim("a")))
                #expect(!(try claim("c", for: .seconds(1))), "b holds it")
            }
        }

        @Test(arguments: StoreKind.allCases)
        func wavesKeepTheirBroadcastPart(_ kind: StoreKind) throws {
            try withClockedStore(kind) { store, _ in
                var broadcastWave = WaveRecord(
                    id: 1, bundleID: testBundle, environment: .production, channel: "match-1", event: "start",
                    timestamp: 1_700_000_000, priority: "immediate", hasAlert: true, payload: [1], freshUntil: nil,
                    collapseID: nil, dismissalDate: nil, publishedAt: 1_700_000_000_000, shardCount: 1, startKeys: [])
                broadcastWave.broadcastChannelID = "dHdvL2RvbWFpbnM+Kw=="
                broadcastWave.channelPayload = Array("{\"aps\":{\"input-push-channel\":\"x\"}}".utf8)
                var plain = broadcastWave
                plain.id = 2
                plain.broadcastChannelID = nil
                plain.channelPayload = nil
                try store.saveWave(broadcastWave)
                try store.saveWave(plain)
                #expect(
                    try store.unfinishedWaves(bundleID: testBundle, environment: .production).map(\.record)
                        == [broadcastWave, plain])

                var report = WaveReportRecord(
                    id: 1, bundleID: testBundle, environment: .production, channel: "match-1", event: "start",
                    timestamp: 1_700_000_000, publishedAt: 1_700_000_000_000, completedAt: 1_700_000_001_000)
                report.broadcast = BroadcastPartRecord(
                    channelID: "dHdvL2RvbWFpbnM+Kw==", subscribers: 400, requests: 2, outcome: "delivered",
                    reason: "TooManyRequests", priority: 10, downgraded: true,
                    resentAfterRestart: true)
                var plainReport = report
                plainReport.id = 2
                plainReport.broadcast = nil
                try store.completeWave(report)
                try store.completeWave(plainReport)
                #expect(try store.waveReport(id: 1) == report)
                #expect(try store.waveReport(id: 2) == plainReport)
                var negative = report
                negative.broadcast?.requests = -1
                #expect(throws: RegistryError.self) { try store.completeWave(negative) }
            }
        }
    }
}

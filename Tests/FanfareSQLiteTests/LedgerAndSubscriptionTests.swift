import FanfareCore
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

@testable import FanfareSQLite
import FanfareStorage

private func withClockedStore<T>(
    retention: Duration = SQLiteTokenStore.defaultHistoryRetention, _ body: (SQLiteTokenStore, LedgerClock) throws -> T
) throws -> T {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let clock = LedgerClock()
    let store = try SQLiteTokenStore(path: directory.path("fanfare.db"), historyRetention: retention, clock: clock.read)
    return try body(store, clock)
}

@Suite("Registry: broadcast subscriptions and the ledger on SQLite", .ownThread)
struct SQLiteLedgerTests {
    @Test func subscriptionsSurviveARestart() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("fanfare.db")
        do {
            let store = try SQLiteTokenStore(path: path)
            try store.register(
                [LedgerFixture.pushToStart(1, device: "d1", broadcast: true)],
                subscriptions: [LedgerFixture.subscription("a1")])
        }
        let store = try SQLiteTokenStore(path: path)
        #expect(try store.subscriptionCounts(bundleID: testBundle, environment: .production) == ["match-1": 1])
        #expect(try store.all()[makeToken(1)]?.supportsBroadcast == true)
        // The replacement rule holds across the restart.
        #expect(try store.register([LedgerFixture.pushToStart(2, device: "d1")]).replacedTokens == [makeToken(1)])
    }

    /// A registry written by schema v3 (tokens and a wave in it) opens, gains the v4 tables and columns, and keeps
    /// everything.
    @Test func aVersion3RegistryUpgrades() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("fanfare.db")
        let registrations = (0..<200).map { number in
            number.isMultiple(of: 4) ? pushToStartRegistration(number) : updateRegistration(number)
        }
        let wave = WaveRecord(
            id: 1, bundleID: testBundle, environment: .production, channel: "match-1", event: "update",
            timestamp: 1_700_000_000, priority: "auto", hasAlert: false, payload: [1, 2, 3], freshUntil: nil,
            collapseID: nil, dismissalDate: nil, publishedAt: 1_700_000_000_000, shardCount: 1, startKeys: [7])
        do {
            let store = try SQLiteTokenStore(path: path)
            try store.register(registrations)
            try store.saveWave(wave)
            try store.rewindToVersion3()
            #expect(try store.scalar(sql: "SELECT count(*) FROM sqlite_master WHERE name = 'token_history'") == 0)
            try store.close()
        }
        let store = try SQLiteTokenStore(path: path)
        #expect(try store.scalar(sql: "SELECT count(*) FROM grdb_migrations") == 6)
        #expect(try store.count() == 200)
        let stored = try store.all()
        for registration in registrations { #expect(stored[registration.token] == registration) }
        #expect(try store.unfinishedWaves(bundleID: testBundle, environment: .production).map(\.record) == [wave])
        // The new rules work on the upgraded file.
        let result = try store.register(
            [LedgerFixture.pushToStart(10_000, device: "device-0")],
            subscriptions: [LedgerFixture.subscription("activity-1")])
        #expect(
            result.replacedTokens.sorted { $0.hexString < $1.hexString }
                == [makeToken(0), makeToken(1)].sorted { $0.hexString < $1.hexString })
        #expect(
            try store.ledger(token: makeToken(1), bundleID: testBundle, environment: .production)?.history.first?.kind
                == .replaced)
    }
}

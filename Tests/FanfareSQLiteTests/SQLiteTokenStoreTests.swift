import FanfareCore
import FanfareTestSupport
import Foundation
import Testing

@testable import FanfareSQLite
import FanfareStorage

@Suite("SQLiteTokenStore: registrations", .ownThread)
struct SQLiteTokenStoreTests {
    @Test func roundTripsEveryField() throws {
        try withStore { store, _ in
            let update = TokenRegistration(
                token: makeToken(1), kind: .update, activityID: "activity-ü-1", deviceID: "device-9",
                attributesType: "MatchAttributes", bundleID: testBundle, environment: .production,
                frequentUpdates: true, channels: ["match-1", "team-7"], createdAt: 1_700_000_000_123,
                lastSeenAt: 1_700_000_999_456)
            let pushToStart = TokenRegistration(
                token: makeToken(2, byteCount: DeviceToken.minimumByteCount), kind: .pushToStart,
                deviceID: "device-2", attributesType: "MatchAttributes", bundleID: testBundle,
                environment: .production, frequentUpdates: false, channels: ["team-7"], createdAt: 42)
            let longest = TokenRegistration(
                token: makeToken(3, byteCount: DeviceToken.maximumByteCount), kind: .update,
                activityID: "a", bundleID: testBundle, environment: .production, channels: ["match-1"],
                createdAt: 1, lastSeenAt: Int64.max)
            try store.register([update, pushToStart, longest])

            #expect(try store.count() == 3)
            let stored = try store.all()
            #expect(stored.count == 3)
            #expect(stored[update.token] == update.sortedChannels)
            #expect(stored[pushToStart.token] == pushToStart.sortedChannels)
            #expect(stored[longest.token] == longest.sortedChannels)
            #expect(stored[pushToStart.token]?.lastSeenAt == 42)  // defaults to createdAt
        }
    }

    @Test func survivesRestart() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("fanfare.db")
        let registrations = (0..<500).map { number in
            number.isMultiple(of: 5)
                ? pushToStartRegistration(number, channels: ["match-\(number % 3)", "all"])
                : updateRegistration(number, channels: ["match-\(number % 7)"], createdAt: Int64(1_000 + number))
        }
        do {
            let store = try SQLiteTokenStore(path: path)
            try store.register(Array(registrations[..<250]))
            try store.register(Array(registrations[250...]))
            #expect(try store.unregister([makeToken(0)]) == 1)
        }  // the store is released here: the connection closes

        let reopened = try SQLiteTokenStore(path: path)
        #expect(try reopened.count() == 499)
        let stored = try reopened.all()
        for registration in registrations.dropFirst() {
            #expect(stored[registration.token] == registration.sortedChannels)
        }
        // The channel cache starts empty after a restart: registering to an existing channel reuses its row.
        try reopened.register([updateRegistration(10_000, channels: ["match-1"])])
        #expect(try reopened.all()[makeToken(10_000)]?.channels == ["match-1"])
    }

    @Test func explicitCloseThenReopen() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("fanfare.db")
        let store = try SQLiteTokenStore(path: path)
        try store.register([updateRegistration(1)])
        try store.close()
        #expect {
            try store.register([updateRegistration(2)])
        } throws: { error in
            guard case .storage(let message) = error as? RegistryError else { return false }
            return message.contains("registering 1 tokens failed")
        }
        #expect(throws: RegistryError.self) { try store.count() }
        #expect(try SQLiteTokenStore(path: path).count() == 1)
    }

    @Test func usesWALWithFullSync() throws {
        try withStore { store, _ throws in
            #expect(try store.pragma("journal_mode") == "wal")
            #expect(try store.pragma("synchronous") == "2")  // FULL
        }
    }

    @Test func reRegistrationKeepsCreatedAtAndReplacesEverythingElse() throws {
        try withStore { store, _ in
            try store.register([updateRegistration(1, channels: ["match-1", "match-2"], createdAt: 1_000)])
            let again = TokenRegistration(
                token: makeToken(1), kind: .update, activityID: "activity-new", bundleID: testBundle,
                environment: .production, frequentUpdates: true, channels: ["match-3"], createdAt: 5_000,
                lastSeenAt: 6_000)
            try store.register([again])

            #expect(try store.count() == 1)
            var expected = again
            expected.createdAt = 1_000
            #expect(try store.all()[makeToken(1)] == expected)
            // The old memberships are gone: retiring the old channels finds nothing.
            #expect(try store.retireUpdateTokens(following: "match-1").isEmpty)
            #expect(try store.retireUpdateTokens(following: "match-2").isEmpty)
            #expect(try store.retireUpdateTokens(following: "match-3") == [makeToken(1)])
        }
    }

    @Test func reRegistrationNeverMovesLastSeenAtBack() throws {
        try withStore { store, _ in
            try store.register([updateRegistration(1, createdAt: 1_000, lastSeenAt: 9_000)])
            try store.register([updateRegistration(1, createdAt: 1_000, lastSeenAt: 2_000)])
            #expect(try store.all()[makeToken(1)]?.lastSeenAt == 9_000)
        }
    }

    @Test func duplicatesInsideOneBatch() throws {
        try withStore { store, _ in
            try store.register([
                updateRegistration(1, channels: ["a"], createdAt: 1_000),
                updateRegistration(1, channels: ["b", "b", "c"], createdAt: 2_000),
            ])
            let stored = try #require(try store.all()[makeToken(1)])
            #expect(stored.channels == ["b", "c"])  // the later entry wins; a repeated channel is stored once
            #expect(stored.createdAt == 1_000)
            #expect(try store.count() == 1)
        }
    }

    @Test func emptyBatchesAreNoOps() throws {
        try withStore { store, _ in
            try store.register([])
            #expect(try store.unregister([]) == 0)
            #expect(try store.count() == 0)
        }
    }

    @Test func unregisterRemovesTokensAndCountsThem() throws {
        try withStore { store, _ in
            try store.register([updateRegistration(1), updateRegistration(2), pushToStartRegistration(3)])
            #expect(try store.unregister([makeToken(1), makeToken(3), makeToken(99)]) == 2)
            #expect(try store.count() == 1)
            #expect(Set(try store.all().keys) == [makeToken(2)])
            #expect(try store.unregister([makeToken(1)]) == 0)
        }
    }

    @Test func invalidateHonoursReRegistrationAfterThe410() throws {
        try withStore { store, _ in
            try store.register([
                updateRegistration(1, createdAt: 1_000, lastSeenAt: 2_000),
                updateRegistration(2, createdAt: 1_000, lastSeenAt: 2_000),
            ])
            // APNs says the token died at 1999, but the app registered it again at 2000: keep it.
            #expect(try store.invalidate(makeToken(1), invalidSince: 1_999) == false)
            #expect(try store.count() == 2)
            // Dead at or after the last registration: remove it.
            #expect(try store.invalidate(makeToken(1), invalidSince: 2_000) == true)
            #expect(try store.count() == 1)
            // No timestamp (BadDeviceToken, DeviceTokenNotForTopic): remove regardless.
            #expect(try store.invalidate(makeToken(2), invalidSince: nil) == true)
            #expect(try store.count() == 0)
            #expect(try store.invalidate(makeToken(3), invalidSince: nil) == false)
            #expect(try store.invalidate(makeToken(3), invalidSince: 5_000) == false)
        }
    }

    @Test func aBatchOfInvalidationsKeepsTheRuleOfEachToken() throws {
        try withStore { store, _ in
            try store.register((1...6).map { updateRegistration($0, createdAt: 1_000, lastSeenAt: 2_000) })
            let removed = try store.invalidate([
                TokenInvalidation(token: makeToken(1), invalidSince: 1_999),  // registered again since: kept
                TokenInvalidation(token: makeToken(2), invalidSince: 2_000),
                TokenInvalidation(token: makeToken(3), invalidSince: nil),
                TokenInvalidation(token: makeToken(3), invalidSince: nil),  // twice: the second finds nothing
                TokenInvalidation(token: makeToken(9), invalidSince: nil),  // never registered
            ])
            #expect(removed == [false, true, true, false, false])
            #expect(Set(try store.all().keys) == [makeToken(1), makeToken(4), makeToken(5), makeToken(6)])
            #expect(try store.invalidate([]) == [])
            // Durable: a new store on the file sees the same.
            try store.close()
            let reopened = try SQLiteTokenStore(path: store.path)
            #expect(try reopened.count() == 4 && reopened.rowCount() == 4)
            // The protocol's default (one call per token) gives the same answers for other stores.
            #expect(
                try OneByOne(reopened).invalidate([TokenInvalidation(token: makeToken(4), invalidSince: nil)]) == [true]
            )
            #expect(try reopened.count() == 3)
        }
    }

    @Test func retireByChannelKeepsPushToStartTokens() throws {
        try withStore { store, _ in
            try store.register([
                updateRegistration(1, channels: ["match-1"]),
                updateRegistration(2, channels: ["match-1", "match-2"]),
                updateRegistration(3, channels: ["match-2"]),
                pushToStartRegistration(4, channels: ["match-1"]),
            ])
            let retired = try store.retireUpdateTokens(following: "match-1")
            #expect(Set(retired) == [makeToken(1), makeToken(2)])
            #expect(retired.count == 2)
            #expect(Set(try store.all().keys) == [makeToken(3), makeToken(4)])
            #expect(try store.retireUpdateTokens(following: "match-1").isEmpty)
            #expect(try store.retireUpdateTokens(following: "no-such-channel").isEmpty)

            // "match-2" loses its last follower and its row; registering to it again must still work.
            #expect(try store.retireUpdateTokens(following: "match-2") == [makeToken(3)])
            try store.register([updateRegistration(5, channels: ["match-2", "match-1"])])
            #expect(try store.all()[makeToken(5)]?.channels == ["match-1", "match-2"])
            #expect(try store.all()[makeToken(4)]?.channels == ["match-1"])
        }
    }

    @Test func retireByAgeTouchesOnlyOldUpdateTokens() throws {
        try withStore { store, _ in
            try store.register([
                updateRegistration(1, channels: ["old"], createdAt: 1_000),
                updateRegistration(2, channels: ["old"], createdAt: 2_000),
                updateRegistration(3, channels: ["new"], createdAt: 3_000),
                updateRegistration(4, channels: ["new"], createdAt: 2_500),
                pushToStartRegistration(5, channels: ["team"], createdAt: 500),
            ])
            let retired = try store.retireUpdateTokens(createdBefore: 2_500)
            #expect(Set(retired) == [makeToken(1), makeToken(2)])
            #expect(retired.count == 2)
            #expect(Set(try store.all().keys) == [makeToken(3), makeToken(4), makeToken(5)])
            #expect(try store.retireUpdateTokens(createdBefore: 2_500).isEmpty)

            // The sweep dropped channel "old"; it comes back when a token follows it again.
            try store.register([updateRegistration(6, channels: ["old"], createdAt: 4_000)])
            #expect(try store.all()[makeToken(6)]?.channels == ["old"])
            #expect(try store.retireUpdateTokens(following: "old") == [makeToken(6)])
        }
    }

    @Test func forEachRegistrationFiltersByAppAndEnvironment() throws {
        try withStore { store, _ in
            try store.register([
                updateRegistration(1, bundleID: "com.example.a", environment: .production),
                updateRegistration(2, bundleID: "com.example.a", environment: .sandbox),
                pushToStartRegistration(3, bundleID: "com.example.b", environment: .production),
                updateRegistration(4, bundleID: "com.example.a", environment: .production),
            ])
            #expect(
                Set(try store.all(bundleID: "com.example.a", environment: .production).keys)
                    == [makeToken(1), makeToken(4)])
            #expect(Set(try store.all(bundleID: "com.example.a", environment: .sandbox).keys) == [makeToken(2)])
            #expect(Set(try store.all(bundleID: "com.example.b", environment: .production).keys) == [makeToken(3)])
            #expect(try store.all(bundleID: "com.example.b", environment: .sandbox).isEmpty)
            #expect(try store.all(bundleID: "com.example.c", environment: .production).isEmpty)

            // Moving a token to another app (re-registration) moves it in the listing too.
            try store.register([updateRegistration(1, bundleID: "com.example.b", environment: .sandbox)])
            #expect(Set(try store.all(bundleID: "com.example.b", environment: .sandbox).keys) == [makeToken(1)])
            #expect(Set(try store.all(bundleID: "com.example.a", environment: .production).keys) == [makeToken(4)])
        }
    }

    @Test func forEachRegistrationReportsCallbackErrors() throws {
        struct Stop: Error {}
        try withStore { store, _ in
            try store.register([updateRegistration(1), updateRegistration(2)])
            var calls = 0
            #expect(throws: RegistryError.invalidRegistration(index: 7, reason: "from the callback")) {
                try store.forEachRegistration(bundleID: testBundle, environment: .production) { _ in
                    calls += 1
                    throw RegistryError.invalidRegistration(index: 7, reason: "from the callback")
                }
            }
            #expect(calls == 1)  // the first error stops the scan
            #expect {
                try store.forEachRegistration(bundleID: testBundle, environment: .production) { _ in throw Stop() }
            } throws: { error in
                guard case .storage(let message) = error as? RegistryError else { return false }
                return message.contains("callback threw")
            }
            // The store is still usable afterwards.
            #expect(try store.count() == 2)
        }
    }

    @Test func concurrentCallersAreSerialised() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteTokenStore(path: directory.path("fanfare.db"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    for batch in 0..<10 {
                        let first = worker * 10_000 + batch * 100
                        try store.register(
                            (first..<first + 100).map { updateRegistration($0, channels: ["w\(worker)"]) })
                        _ = try store.count()
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try store.count() == 8_000)
        #expect(try store.retireUpdateTokens(following: "w3").count == 1_000)
    }
}

/// A store that only has the single-token calls, to exercise `TokenStore.invalidate(_:)`'s default.
private final class OneByOne: TokenStore {
    let inner: SQLiteTokenStore
    init(_ inner: SQLiteTokenStore) { self.inner = inner }
    func register(
        _ registrations: [TokenRegistration], subscriptions: [BroadcastSubscription]
    )
        throws(RegistryError) -> RegistrationResult
    {
        try inner.register(registrations, subscriptions: subscriptions)
    }
    func unregister(_ tokens: [DeviceToken], in scope: RegistryScope) throws(RegistryError) -> Int {
        try inner.unregister(tokens, in: scope)
    }
    func invalidate(_ token: DeviceToken, invalidSince: Int64?) throws(RegistryError) -> Bool {
        try inner.invalidate(token, invalidSince: invalidSince)
    }
    func forEachRegistration(
        bundleID: String, environment: APNsEnvironment, _ body: (TokenRegistration) throws -> Void
    ) throws(RegistryError) {
        try inner.forEachRegistration(bundleID: bundleID, environment: environment, body)
    }
    func retire(following channel: String, in scope: RegistryScope) throws(RegistryError) -> RetirementResult {
        try inner.retire(following: channel, in: scope)
    }
    func retire(createdBefore: Int64, in scope: RegistryScope) throws(RegistryError) -> RetirementResult {
        try inner.retire(createdBefore: createdBefore, in: scope)
    }
    func subscriptionCounts(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [String: Int] {
        try inner.subscriptionCounts(bundleID: bundleID, environment: environment)
    }
    func ledger(
        token: DeviceToken, bundleID: String, environment: APNsEnvironment, activityLifetime: Duration
    )
        throws(RegistryError) -> TokenLedgerEntry?
    {
        try inner.ledger(token: token, bundleID: bundleID, environment: environment, activityLifetime: activityLifetime)
    }
    func count() throws(RegistryError) -> Int { try inner.count() }
}

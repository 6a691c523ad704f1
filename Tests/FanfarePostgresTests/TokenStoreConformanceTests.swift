import FanfareCore
import FanfareStorage
import Foundation
import Testing

/// The same expectations against SQLiteTokenStore and PostgresTokenStore: registration, the replacement rules,
/// unregister, invalidate, retirement, count and the start-up scan.
extension PostgresSuites {
    @Suite("TokenStore conformance: SQLite and PostgreSQL", .serialized)
    struct TokenStoreConformanceTests {
        @Test(arguments: StoreKind.allCases)
        func roundTripsEveryField(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                let update = TokenRegistration(
                    token: makeToken(1), kind: .update, activityID: "activity-ü-1\t\"quoted\"\\", deviceID: "device-9",
                    attributesType: "MatchAttributes", bundleID: testBundle, environment: .production,
                    frequentUpdates: true, supportsBroadcast: false, channels: ["match-1", "team, \"7\"\n"],
                    createdAt: 1_700_000_000_123, lastSeenAt: 1_700_000_999_456)
                let pushToStart = TokenRegistration(
                    token: makeToken(2, byteCount: DeviceToken.minimumByteCount), kind: .pushToStart,
                    deviceID: "device-2", attributesType: "MatchAttributes", bundleID: testBundle,
                    environment: .production,
                    supportsBroadcast: true, channels: ["team, \"7\"\n"], createdAt: 42)
                let longest = TokenRegistration(
                    token: makeToken(3, byteCount: DeviceToken.maximumByteCount), kind: .update, activityID: "a",
                    bundleID: testBundle, environment: .production, channels: ["match-1"], createdAt: 1,
                    lastSeenAt: Int64.max)
                let otherApp = updateRegistration(4, environment: .sandbox)
                try store.register([update, pushToStart, longest, otherApp])

                #expect(try store.count() == 4)
                let stored = try store.all()
                #expect(stored.count == 3)
                #expect(stored[update.token] == update.sortedChannels)
                #expect(stored[pushToStart.token] == pushToStart.sortedChannels)
                #expect(stored[longest.token] == longest.sortedChannels)
                #expect(try store.all(environment: .sandbox) == [otherApp.token: otherApp])
                #expect(try store.all(bundleID: "com.example.unknown").isEmpty)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func registeringAgainKeepsCreatedAtAndMovesLastSeenForwardOnly(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                try store.register([updateRegistration(1, channels: ["a"], createdAt: 1_000, lastSeenAt: 5_000)])
                try store.register([updateRegistration(1, channels: ["b", "c"], createdAt: 2_000, lastSeenAt: 9_000)])
                var stored = try #require(try store.all()[makeToken(1)])
                #expect(stored.createdAt == 1_000)
                #expect(stored.lastSeenAt == 9_000)
                #expect(stored.channels == ["b", "c"])
                // A late, older registration replaces the fields but cannot move last-seen back.
                try store.register([updateRegistration(1, channels: ["d"], createdAt: 3_000, lastSeenAt: 7_000)])
                stored = try #require(try store.all()[makeToken(1)])
                #expect(stored.lastSeenAt == 9_000)
                #expect(stored.channels == ["d"])
                // Twice in one batch: one row, the last one's fields.
                try store.register([
                    updateRegistration(2, channels: ["x"], createdAt: 100, lastSeenAt: 100),
                    updateRegistration(2, channels: ["y"], createdAt: 200, lastSeenAt: 200),
                ])
                stored = try #require(try store.all()[makeToken(2)])
                #expect(stored.channels == ["y"])
                #expect(stored.createdAt == 100)
                #expect(stored.lastSeenAt == 200)
                #expect(try store.count() == 2)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func aPushToStartTokenReplacesTheOthersOfItsDevice(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                var result = try store.register([
                    pushToStartRegistration(1, device: "phone"), pushToStartRegistration(2),
                ])
                #expect(result.replacedTokens.isEmpty)
                result = try store.register([pushToStartRegistration(3, device: "phone")])
                #expect(result.replacedTokens == [makeToken(1)])
                // In one batch the last one of a device wins, earlier ones of the batch included.
                result = try store.register([
                    pushToStartRegistration(4, device: "tablet"), pushToStartRegistration(5, device: "phone"),
                    pushToStartRegistration(6, device: "tablet"),
                ])
                #expect(Set(result.replacedTokens) == [makeToken(3), makeToken(4)])
                #expect(result.replacedTokens.first == makeToken(3))  // in the order of the batch's winners
                #expect(Set(try store.all().keys) == [makeToken(2), makeToken(5), makeToken(6)])
                // Update tokens of the same device are not push-to-start tokens: untouched.
                var update = updateRegistration(7)
                update.deviceID = "phone"
                try store.register([update])
                result = try store.register([pushToStartRegistration(8, device: "phone")])
                #expect(result.replacedTokens == [makeToken(5)])
                #expect(try store.count() == 4)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func anInvalidBatchWritesNothing(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                var bad = updateRegistration(2)
                bad.activityID = nil
                #expect(
                    throws: RegistryError.invalidRegistration(index: 1, reason: "update token without an activity id")
                ) {
                    try store.register([updateRegistration(1), bad, updateRegistration(3)])
                }
                let count = try store.count()
                #expect(count == 0)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func unregisterCountsWhatWasRegistered(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                try store.register((0..<10).map { updateRegistration($0) })
                #expect(try store.unregister([]) == 0)
                #expect(try store.unregister([makeToken(1), makeToken(2), makeToken(99)]) == 2)
                #expect(try store.unregister([makeToken(1)]) == 0)
                #expect(try store.count() == 8)
                #expect(try store.all()[makeToken(1)] == nil)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func invalidationRespectsALaterRegistration(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                try store.register([
                    updateRegistration(1, lastSeenAt: 1_700_000_000_000),
                    updateRegistration(2, lastSeenAt: 1_700_000_005_000),
                ])
                let removed = try store.invalidate([
                    TokenInvalidation(token: makeToken(1), invalidSince: 1_700_000_001_000),
                    TokenInvalidation(token: makeToken(2), invalidSince: 1_700_000_001_000),  // registered again since
                    TokenInvalidation(token: makeToken(3), invalidSince: nil),  // unknown
                ])
                #expect(removed == [true, false, false])
                #expect(try store.invalidate(makeToken(2), invalidSince: nil))
                #expect(try store.count() == 0)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func retirementRemovesUpdateTokensOnly(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                try store.register([
                    updateRegistration(1, channels: ["match-1"], createdAt: 1_000),
                    updateRegistration(2, channels: ["match-2", "match-1"], createdAt: 5_000),
                    updateRegistration(3, channels: ["match-3"], createdAt: 2_000),
                    pushToStartRegistration(4, channels: ["match-1"], createdAt: 1),
                ])
                #expect(Set(try store.retire(following: "match-1").tokens) == [makeToken(1), makeToken(2)])
                #expect(try store.retire(createdBefore: 3_000).tokens == [makeToken(3)])
                #expect(Set(try store.all().keys) == [makeToken(4)])
            }
        }

        /// More than one page of the PostgreSQL scan (10,000 rows) and one COPY chunk (4,096 rows).
        @Test(arguments: StoreKind.allCases)
        func aLargeBatchLoadsBackWhole(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                let registrations = (0..<25_000).map { updateRegistration($0, channels: ["match-\($0 % 3)"]) }
                try store.register(Array(registrations[..<12_000]))
                try store.register(Array(registrations[12_000...]))
                #expect(try store.count() == 25_000)
                let stored = try store.all()
                #expect(stored.count == 25_000)
                #expect(registrations.allSatisfy { stored[$0.token] == $0 })
            }
        }

        @Test(arguments: StoreKind.allCases)
        func aThrowingCallbackStopsTheScanWithItsError(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                try store.register((0..<5).map { updateRegistration($0) })
                var seen = 0
                #expect(throws: RegistryError.invalidWave(id: 7, reason: "stop")) {
                    try store.forEachRegistration(bundleID: testBundle, environment: .production) { _ in
                        seen += 1
                        if seen == 2 { throw RegistryError.invalidWave(id: 7, reason: "stop") }
                    }
                }
                #expect(seen == 2)
                #expect(try store.count() == 5)  // the store still answers
            }
        }
    }
}

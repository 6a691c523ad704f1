import FanfareCore
import FanfareRegistryFixtures
import FanfareStorage
import Foundation
import Testing

/// One registry serves several apps and both environments: a removal names its scope (an engine's app and
/// environment, or an app's every environment) and never reaches another app's tokens or subscriptions.
extension PostgresSuites {
    @Suite("Scoped removals: SQLite and PostgreSQL", .serialized)
    struct ScopedRemovalConformanceTests {
        static let other = "com.example.other"

        /// Tokens 1-3: the test bundle in production, sandbox, and the other app; all on "match-1".
        static func registerThreeApps(_ store: any TokenStore, createdAt: Int64 = 1_700_000_000_000) throws {
            try store.register(
                [
                    updateRegistration(1, createdAt: createdAt),
                    updateRegistration(2, environment: .sandbox, createdAt: createdAt),
                    updateRegistration(3, bundleID: other, createdAt: createdAt),
                ],
                subscriptions: [
                    BroadcastSubscription(
                        activityID: "sub-a", bundleID: testBundle, environment: .production, channels: ["match-1"],
                        createdAt: createdAt),
                    BroadcastSubscription(
                        activityID: "sub-b", bundleID: other, environment: .production, channels: ["match-1"],
                        createdAt: createdAt),
                ])
        }

        @Test(arguments: StoreKind.allCases)
        func unregisterReachesOnlyItsScope(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                try Self.registerThreeApps(store)
                let all = [makeToken(1), makeToken(2), makeToken(3)]
                #expect(try store.unregister(all, in: .app(Self.other, .sandbox)) == 0)
                #expect(try store.unregister(all, in: .bundle(testBundle)) == 2, "both environments of the app")
                #expect(try store.count() == 1)
                #expect(
                    try store.all(bundleID: Self.other).keys.sorted { $0.hexString < $1.hexString } == [makeToken(3)])
                #expect(try store.unregister(all, in: .app(Self.other, .production)) == 1)
                #expect(try store.count() == 0)
            }
        }

        @Test(arguments: StoreKind.allCases)
        func retiringAChannelReachesOnlyItsApp(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                try Self.registerThreeApps(store)
                let retired = try store.retire(following: "match-1", in: .app(testBundle, .production))
                #expect(retired.tokens == [makeToken(1)])
                #expect(retired.subscriptions == ["sub-a"])
                #expect(retired.subscriptionDeltas == ["match-1": -1])
                #expect(try store.count() == 2)
                #expect(try store.subscriptionCounts(bundleID: Self.other, environment: .production) == ["match-1": 1])
                let rest = try store.retire(following: "match-1")
                #expect(Set(rest.tokens) == [makeToken(2), makeToken(3)], "every app without a scope")
            }
        }

        @Test(arguments: StoreKind.allCases)
        func ageRetirementReachesOnlyItsApp(_ kind: StoreKind) throws {
            try withStore(kind) { store in
                try Self.registerThreeApps(store, createdAt: 1_000)
                let retired = try store.retire(createdBefore: 2_000, in: .app(Self.other, .production))
                #expect(retired.tokens == [makeToken(3)])
                #expect(retired.subscriptions == ["sub-b"])
                #expect(try store.count() == 2)
                #expect(try store.subscriptionCounts(bundleID: testBundle, environment: .production) == ["match-1": 1])
                #expect(try store.retire(createdBefore: 2_000, in: .app(Self.other, .sandbox)).tokens.isEmpty)
            }
        }
    }
}

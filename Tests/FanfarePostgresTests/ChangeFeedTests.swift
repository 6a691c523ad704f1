import FanfareCore
import FanfarePostgres
import FanfareStorage
import Foundation
import Testing

/// The registry's change feed (`token_changes`, written by triggers in the registration's own transaction): what
/// a node reads after its position, and what pruning keeps for nodes that have not read it yet.
extension PostgresSuites {
    @Suite("PostgresTokenStore: the registry's change feed", .serialized)
    struct ChangeFeedTests {
        @Test func changesAfterAPositionAreTheTokensAsTheyAreNow() throws {
            try withDatabase(.postgres) { database in
                let store = try #require(try database.open() as? PostgresTokenStore)
                defer { try? store.close() }
                let start = try store.lastTokenChange()
                try store.register((0..<50).map { updateRegistration($0, channels: ["a"]) })
                try store.register([updateRegistration(7, channels: ["b"])])
                #expect(try store.unregister([makeToken(3)]) == 1)
                let page = try store.tokenChanges(
                    after: start, bundleID: testBundle, environment: .production, limit: 1_000)
                #expect(page.isComplete)
                #expect(page.removed == [makeToken(3)])
                #expect(page.registered.count == 49)
                #expect(page.registered.first { $0.token == makeToken(7) }?.channels == ["b"])
                #expect(page.last == (try store.lastTokenChange()))
                // Pages: a limit smaller than the log ends incomplete, and the next read goes on from it.
                let first = try store.tokenChanges(
                    after: start, bundleID: testBundle, environment: .production, limit: 20)
                // Each log row names one token as it is now: token 3 of the first batch is removed by now.
                #expect(!first.isComplete && first.registered.count + first.removed.count == 20)
                let rest = try store.tokenChanges(
                    after: first.last, bundleID: testBundle, environment: .production, limit: 1_000)
                #expect(rest.isComplete)
                // Another app's changes are not this app's.
                let other = try store.tokenChanges(
                    after: start, bundleID: "com.example.other", environment: .production, limit: 1_000)
                #expect(other.registered.isEmpty && other.removed.isEmpty)
            }
        }

        @Test func aNodeReadsOnlyTheChangesOfTheShardsItHolds() throws {
            try withDatabase(.postgres) { database in
                let store = try #require(try database.open() as? PostgresTokenStore)
                defer { try? store.close() }
                let start = try store.lastTokenChange()
                let registrations = (0..<200).map { updateRegistration($0) }
                try store.register(registrations)
                #expect(try store.unregister(registrations.prefix(20).map(\.token)) == 20)
                let held: Set<Int> = [1, 3]
                let mine = { (token: DeviceToken) in held.contains(Int(token.shardHash % 4)) }
                let page = try store.tokenChanges(
                    after: start, bundleID: testBundle, environment: .production, limit: 1_000, shards: held, of: 4)
                #expect(page.isComplete)
                #expect(Set(page.registered.map(\.token)) == Set(registrations.dropFirst(20).map(\.token).filter(mine)))
                #expect(Set(page.removed) == Set(registrations.prefix(20).map(\.token).filter(mine)))
                // Its position moves past the other shards' changes too.
                #expect(page.last == (try store.lastTokenChange()))
                // Holding nothing: nothing to read, and the position still moves on.
                let none = try store.tokenChanges(
                    after: start, bundleID: testBundle, environment: .production, limit: 1_000, shards: [], of: 4)
                #expect(none.registered.isEmpty && none.removed.isEmpty && none.last == page.last)
            }
        }

        @Test func pruningKeepsWhatALiveNodeHasNotRead() throws {
            try withDatabase(.postgres) { database in
                let store = try #require(try database.open() as? PostgresTokenStore)
                defer { try? store.close() }
                try store.register((0..<10).map { updateRegistration($0) })
                let slowPosition = try store.lastTokenChange()
                try store.register((10..<30).map { updateRegistration($0) })
                // A live node that read up to `slowPosition`, a dead one that read nothing.
                _ = try store.heartbeat(node: "slow", window: .seconds(60), feedPosition: slowPosition)
                _ = try store.heartbeat(node: "dead", window: .seconds(60), feedPosition: 0)
                try database.execute(
                    "UPDATE cluster_nodes SET seen_at = now() - interval '1 hour' WHERE node = 'dead'", store)
                #expect(try store.pruneTokenChanges(olderThan: .zero, liveWithin: .seconds(60)) == 10)
                let unread = try store.tokenChanges(
                    after: slowPosition, bundleID: testBundle, environment: .production, limit: 1_000)
                #expect(unread.registered.count == 20, "the slow node still finds every change it has not read")
                // Once it has read everything (its next heartbeat), the rest may go.
                _ = try store.heartbeat(node: "slow", window: .seconds(60), feedPosition: try store.lastTokenChange())
                #expect(try store.pruneTokenChanges(olderThan: .zero, liveWithin: .seconds(60)) == 20)
                // A heartbeat without a position keeps the last one.
                _ = try store.heartbeat(node: "slow", window: .seconds(60))
                #expect(
                    try database.scalar(
                        "SELECT count(*) FROM cluster_nodes WHERE node = 'slow' AND feed_position IS NOT NULL", store)
                        == 1)
                // Rows younger than the retention stay whatever the nodes read.
                try store.register([updateRegistration(99)])
                #expect(try store.pruneTokenChanges(olderThan: .seconds(600), liveWithin: .seconds(60)) == 0)
            }
        }
    }
}

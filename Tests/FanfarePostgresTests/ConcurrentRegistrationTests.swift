import FanfareCore
import FanfarePostgres
import FanfareStorage
import Foundation
import Synchronization
import Testing

/// Registrations on several connections at once (`registrationConnections`, and several nodes on one database):
/// batches sharing tokens neither deadlock nor lose a row, and the push-to-start replacement rule holds across
/// batches that commit at the same time.
extension PostgresSuites {
    @Suite("PostgresTokenStore: registrations on several connections at once", .serialized)
    struct ConcurrentRegistrationTests {
        /// Runs each body on a thread of its own, all at once; the errors they threw.
        static func concurrently(_ bodies: [@Sendable () throws -> Void]) -> [String] {
            let errors = Mutex<[String]>([])
            let group = DispatchGroup()
            for body in bodies {
                group.enter()
                Thread.detachNewThread {
                    do { try body() } catch { errors.withLock { $0.append("\(error)") } }
                    group.leave()
                }
            }
            group.wait()
            return errors.withLock { $0 }
        }

        @Test func batchesSharingTokensInOppositeOrdersAllLand() throws {
            try withDatabase(.postgres) { database in
                let store = try #require(try database.open() as? PostgresTokenStore)
                defer { try? store.close() }
                #expect(store.registrationConnections == 2)
                // A second store on the same database stands for a second node.
                let other = try #require(try database.open() as? PostgresTokenStore)
                defer { try? other.close() }
                let forward = (0..<4_000).map { updateRegistration($0, channels: ["forward"]) }
                let backward = Array((2_000..<6_000).map { updateRegistration($0, channels: ["backward"]) }.reversed())
                var bodies: [@Sendable () throws -> Void] = []
                for round in 0..<3 {
                    bodies.append { _ = try store.register(round % 2 == 0 ? forward : backward) }
                    bodies.append { _ = try store.register(round % 2 == 0 ? backward : forward) }
                    bodies.append { _ = try other.register(round % 2 == 0 ? backward : forward) }
                }
                let errors = Self.concurrently(bodies)
                #expect(errors.isEmpty, "\(errors)")
                #expect(try store.count() == 6_000)
                // Both connections of the store took batches: at least one lane opened beside the first.
                #expect(
                    try database.scalar(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND usename = 'fanfare' AND backend_type = 'client backend'",
                        store) >= 3)
            }
        }

        @Test func pushToStartTokensOfOneDeviceRegisteredAtOnceLeaveOne() throws {
            try withDatabase(.postgres) { database in
                let store = try #require(try database.open() as? PostgresTokenStore)
                defer { try? store.close() }
                let other = try #require(try database.open() as? PostgresTokenStore)
                defer { try? other.close() }
                for round in 0..<20 {
                    // Two batches at once, each with a new push-to-start token for the same device (and padding, so
                    // the transactions overlap).
                    let padding = { (base: Int) in (0..<500).map { updateRegistration(base + $0) } }
                    let first =
                        padding(100_000 + round * 2_000) + [pushToStartRegistration(1_000 + round * 2, device: "phone")]
                    let second =
                        padding(101_000 + round * 2_000) + [pushToStartRegistration(1_001 + round * 2, device: "phone")]
                    let errors = Self.concurrently([
                        { _ = try store.register(first) }, { _ = try other.register(second) },
                    ])
                    #expect(errors.isEmpty, "\(errors)")
                    let starts = try database.scalar("SELECT count(*) FROM tokens WHERE kind = 1", store)
                    #expect(starts == 1, "round \(round): \(starts) push-to-start tokens for one device")
                }
            }
        }
    }
}

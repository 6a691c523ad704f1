import FanfareCore
@testable import FanfarePostgres
import FanfareStorage
import Foundation
import PostgresNIO
import Testing

/// Issue 22: a client that is slow between the statements of its transaction (a loaded machine, a slow disk, a
/// big file: `fanfare import` beside a CPU hog) keeps its session and commits. Only a stalled cluster node's
/// sessions are ended, by a live node (FencingTests).
extension PostgresSuites {
    @Suite("PostgresTokenStore: a slow client keeps its transaction", .serialized)
    struct SlowClientTests {
        /// Longer than the 3 s the server once allowed between two statements of a transaction (issue 22).
        static let pause: TimeAmount = .seconds(5)

        @Test func aTransactionPausedBetweenItsStatementsCommits() throws {
            try withDatabase(.postgres) { database in
                let store = try #require(try database.open() as? PostgresTokenStore)
                defer { try? store.close() }
                let pause = Self.pause
                try store.inTransaction("writing two apps with a pause between them") { connection, logger in
                    try await connection.query(
                        "INSERT INTO apps (bundle_id, environment) VALUES ('com.example.before-pause', 0)",
                        logger: logger)
                    try await idle(connection, for: pause)
                    try await connection.query(
                        "INSERT INTO apps (bundle_id, environment) VALUES ('com.example.after-pause', 0)",
                        logger: logger)
                }
                #expect(
                    try database.scalar(
                        "SELECT count(*) FROM apps WHERE bundle_id IN ('com.example.before-pause', 'com.example.after-pause')",
                        store) == 2)
                #expect(store.connectionsOpened == 1, "the session was never cut")
            }
        }

        /// A node loading a shard on a loaded machine: the scan's pages come from one transaction, and the caller's
        /// work on each row runs between its statements.
        @Test func aScanWhoseCallerPausesReadsEveryPage() throws {
            try withDatabase(.postgres) { database in
                let store = try #require(try database.open() as? PostgresTokenStore)
                defer { try? store.close() }
                let count = PostgresTokenStore.readPageRows + 1
                try store.register((0..<count).map { updateRegistration($0) })
                var seen = 0
                try store.forEachRegistration(bundleID: testBundle, environment: .production) { _ in
                    seen += 1
                    if seen == 1 { Thread.sleep(forTimeInterval: Double(Self.pause.nanoseconds) / 1e9) }
                }
                #expect(seen == count)
                #expect(store.connectionsOpened == 1, "the session was never cut")
            }
        }
    }
}

@testable import FanfarePostgres
import FanfareStorage
import Foundation
import PostgresNIO
import Synchronization

/// A transaction of a store, on a thread of its own, that takes a lock and then idles until `release()`: what a
/// client stopped between two statements (SIGSTOP, a frozen VM) or merely slow leaves on the server.
final class HeldTransaction: Sendable {
    /// Past this the transaction gives up waiting for `release()` (a test that failed must not hang).
    static let longestHold: Duration = .seconds(300)

    private let holding = Atomic<Bool>(false)
    private let released = Atomic<Bool>(false)
    private let outcome = Mutex<Result<Void, RegistryError>?>(nil)
    private let started = ContinuousClock.now

    /// Runs `lock` (a statement that locks something) in a transaction of `store`, then idles.
    init(_ store: PostgresTokenStore, locking lock: String) {
        Thread.detachNewThread { [self] in
            let result = Result { () throws(RegistryError) in
                try store.inTransaction("holding a lock: \(lock)") { connection, logger in
                    try await connection.query(PostgresQuery(unsafeSQL: lock), logger: logger)
                    self.holding.store(true, ordering: .releasing)
                    let clock = ContinuousClock()
                    let deadline = clock.now + Self.longestHold
                    while !self.released.load(ordering: .acquiring) && clock.now < deadline {
                        try await idle(connection, for: .milliseconds(50))
                    }
                }
            }
            outcome.withLock { $0 = result }
        }
    }

    /// The lock is taken (the transaction idles from now on).
    var isHolding: Bool { holding.load(ordering: .acquiring) }
    /// How long since the transaction was started.
    var age: Duration { ContinuousClock.now - started }
    /// Lets the transaction commit.
    func release() { released.store(true, ordering: .releasing) }
    /// How the transaction ended (nil while it runs).
    var result: Result<Void, RegistryError>? { outcome.withLock { $0 } }
}

/// Polls `condition` every 50 ms until it holds or `timeout` passed; whether it held. Only a liveness bound: a
/// loaded machine may take long, never too short.
func waitUntil(timeout: Duration, _ condition: () throws -> Bool) rethrows -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while true {
        if try condition() { return true }
        if clock.now >= deadline { return false }
        Thread.sleep(forTimeInterval: 0.05)
    }
}

/// Waits on the connection's event loop without a statement: the session idles (in its transaction, if one is
/// open). Not `Task.sleep`: inside the store's calls the task runs on the event loop (a task executor), and a
/// timer of the Swift pool did not resume it here.
func idle(_ connection: PostgresConnection, for duration: TimeAmount) async throws {
    try await connection.eventLoop.scheduleTask(in: duration) {}.futureResult.get()
}

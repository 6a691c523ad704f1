import NIOCore
import PostgresNIO

/// Runs postgres-nio's async calls for the synchronous stores, on the connection's own event loop: the task's
/// jobs run on that loop (a task executor), so neither the work nor the blocked caller needs a thread of the
/// Swift concurrency pool (which a blocked caller could be starving). Callers must not be on that event loop.
final class EventLoopTaskExecutor: TaskExecutor, @unchecked Sendable {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) { self.eventLoop = eventLoop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// Runs `work` to its end and returns its result, blocking the calling thread meanwhile. When `closed`
    /// completes first (the connection `work` uses went), the call fails with `ConnectionClosedDuringCall` at
    /// once: postgres-nio never answers a statement written to a closed connection (its write fails before
    /// the statement's promise is handed on), so `work` would wait for ever. It is left suspended. Past
    /// `timeout` the call fails with `CallTimedOut` (a frozen server, a network that drops without a reset:
    /// nothing else would end it); the caller must then close the connection, which ends `work`.
    func run<T: Sendable>(
        failingWhen closed: EventLoopFuture<Void>? = nil, timeout: TimeAmount? = nil,
        _ work: @escaping @Sendable () async throws -> T
    ) throws -> T {
        let promise = eventLoop.makePromise(of: T.self)
        Task(executorPreference: self) {
            do { promise.succeed(try await work()) } catch { promise.fail(error) }
        }
        // A promise takes its first result: a call that ended before the close or the timeout keeps its own.
        closed?.whenComplete { _ in promise.fail(ConnectionClosedDuringCall()) }
        if let timeout {
            let expiry = eventLoop.scheduleTask(in: timeout) { promise.fail(CallTimedOut(after: timeout)) }
            promise.futureResult.whenComplete { _ in expiry.cancel() }
        }
        return try promise.futureResult.wait()
    }
}

/// No answer within the call's time limit: the server is stuck or the network went without a word.
struct CallTimedOut: Error, CustomStringConvertible {
    let after: TimeAmount
    var description: String {
        "PostgreSQL did not answer within \(after.nanoseconds / 1_000_000_000) s (a stuck server, or a network that "
            + "dropped the connection without a word); the call was abandoned and its connection is replaced"
    }
}

/// The connection closed while a call was using it (the server ended the session, restarted, or the network
/// failed): what the call did in an open transaction is rolled back by the server.
struct ConnectionClosedDuringCall: Error, CustomStringConvertible {
    var description: String {
        "the connection closed during the call (the server ended the session, or the network failed)"
    }
}

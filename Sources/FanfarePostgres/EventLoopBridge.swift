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

    /// Runs `work` to its end and returns its result, blocking the calling thread meanwhile.
    func run<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) throws -> T {
        let promise = eventLoop.makePromise(of: T.self)
        Task(executorPreference: self) {
            do { promise.succeed(try await work()) } catch { promise.fail(error) }
        }
        return try promise.futureResult.wait()
    }
}

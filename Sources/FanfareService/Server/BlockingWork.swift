import NIOPosix

/// Runs blocking calls (SQLite writes with fsync, registry reads, waits for engine queues) on a few threads
/// of their own, so they never hold up the concurrency pool that serves HTTP (2 threads on a 2-core machine).
package final class BlockingWork: Sendable {
    private let pool: NIOThreadPool

    package init(threads: Int) {
        pool = NIOThreadPool(numberOfThreads: threads)
        pool.start()
    }

    package func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.runIfActive(body)
    }

    package func shutdown() async {
        try? await pool.shutdownGracefully()
    }
}

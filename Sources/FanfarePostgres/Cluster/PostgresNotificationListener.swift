import FanfareStorage
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// LISTENs on channels on a connection of its own and calls `onNotify(channel)` for each notification. A lost
/// connection is opened again (every second until it works), and since notifications sent meanwhile are lost,
/// every channel is reported once after a reconnect: whoever reacts reads what it may have missed. Nodes poll
/// as well: this only makes them react at once. A cluster node passes its `incarnation`, which names the session
/// (a live node ends it if this node stalls, like its other sessions).
public final class PostgresNotificationListener: Sendable {
    private let task: Mutex<Task<Void, Never>?> = Mutex(nil)
    private let stopped = StopFlag()

    private final class StopFlag: Sendable {
        private let value = Atomic<Bool>(false)
        var isSet: Bool { value.load(ordering: .acquiring) }
        func set() { value.store(true, ordering: .releasing) }
    }

    public init(
        url: String, channels: [String], incarnation: NodeIncarnation? = nil, logger: Logger,
        onNotify: @escaping @Sendable (String) -> Void
    ) throws(RegistryError) {
        let connector = try PostgresTokenStore.connector(url, incarnation: incarnation)
        let eventLoop = PostgresConnection.defaultEventLoopGroup.any()
        let stopped = self.stopped
        task.withLock {
            $0 = Task {
                var attempt = 0
                while !stopped.isSet {
                    attempt += 1
                    do {
                        let connection = try await connector.connect(on: eventLoop, id: attempt, logger: logger)
                        let reconnected = attempt > 1
                        do {
                            try await withThrowingTaskGroup(of: Void.self) { group in
                                for channel in channels {
                                    group.addTask {
                                        try await connection.listen(on: channel) { notifications in
                                            if reconnected { onNotify(channel) }  // what was sent while away
                                            for try await _ in notifications { onNotify(channel) }
                                        }
                                    }
                                }
                                try await group.waitForAll()
                            }
                        } catch {
                            // Closed and waited for (postgres-nio asserts that a connection is closed before it goes).
                            try? await connection.close().get()
                            throw error
                        }
                        try? await connection.close().get()
                    } catch {
                        if stopped.isSet || Task.isCancelled { return }
                        logger.warning(
                            "postgres: listening for notifications failed (\(PostgresTokenStore.describe(error))); again in 1 s"
                        )
                    }
                    if stopped.isSet || Task.isCancelled { return }
                    try? await Task.sleep(for: .seconds(1))
                }
            }
        }
    }

    /// Stops listening and closes the connection.
    public func stop() {
        stopped.set()
        task.withLock { task in
            task?.cancel()
            task = nil
        }
    }

    deinit { stop() }
}

import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Logging
import Metrics
import Synchronization
import Glibc

/// The engine's background thread for durable work that must not run on a worker: deleting tokens APNs
/// called dead (then reporting them), and retiring ended channels and expired activities.
///
/// Shards hand it invalidations through a lock-free queue; an overflow list behind a lock catches the rare
/// burst beyond its capacity, so no invalidation is ever dropped.
final class RegistryWorker: InvalidationSink, @unchecked Sendable {
    struct Invalidation: Sendable {
        let token: DeviceToken
        let reason: APNsReason?
        let invalidSince: Int64?
    }

    private let store: TokenStore
    private let queue = BoundedMPSCQueue<Invalidation>(capacity: 1 << 14)
    private let overflow = Mutex<[Invalidation]>([])
    private let stopRequested = Atomic<Bool>(false)
    /// Posted for each invalidation handed over, and by `stop`: the thread sleeps on it when it has nothing to do.
    private let work = ThreadSignal()
    private let onInvalidation: (@Sendable (InvalidationReport) -> Void)?
    private let maintenance: @Sendable () -> Void
    private let maintenanceInterval: UInt64
    private let logger: Logger
    private let removedCounter: Counter
    private let keptCounter: Counter
    private var thread: pthread_t?

    /// Counters for statistics.
    let persisted = Atomic<Int>(0)
    let keptAfterReRegistration = Atomic<Int>(0)
    let storageErrors = Atomic<Int>(0)
    private let lastErrorBox = Mutex<String?>(nil)
    var lastError: String? { lastErrorBox.withLock { $0 } }

    init(
        store: TokenStore, maintenanceInterval: Duration, onInvalidation: (@Sendable (InvalidationReport) -> Void)?,
        logger: Logger, metrics: (any MetricsFactory)?, maintenance: @escaping @Sendable () -> Void
    ) {
        self.store = store
        self.onInvalidation = onInvalidation
        self.logger = logger
        let factory = metrics ?? MetricsSystem.factory
        removedCounter = Counter(label: "fanfare_invalid_tokens_removed_total", factory: factory)
        keptCounter = Counter(label: "fanfare_invalid_tokens_kept_after_reregistration_total", factory: factory)
        self.maintenance = maintenance
        self.maintenanceInterval = max(1_000_000, FanoutEngine.nanoseconds(maintenanceInterval))
    }

    func start() {
        do {
            thread = try PlainThread.start(named: "fanfare-registry") { self.run() }
        } catch {
            preconditionFailure("could not start the registry thread: \(error)")
        }
    }

    /// Any thread (a shard's, on its hot path for failures only): never blocks for long, never drops.
    func tokenInvalidated(_ token: DeviceToken, reason: APNsReason?, invalidSince: Int64?) {
        let item = Invalidation(token: token, reason: reason, invalidSince: invalidSince)
        if !queue.enqueue(item) { overflow.withLock { $0.append(item) } }
        work.post()  // an atomic increment unless the thread sleeps on it
    }

    /// Stops the thread after it has written every invalidation handed to it.
    func stop() {
        stopRequested.store(true, ordering: .releasing)
        work.post()
        if let thread { PlainThread.join(thread) }
        thread = nil
    }

    private func run() {
        var nextMaintenance = monotonicNow() &+ maintenanceInterval
        while true {
            let stopping = stopRequested.load(ordering: .acquiring)
            var batch: [Invalidation] = []
            while batch.count < 4096, let item = queue.dequeue() { batch.append(item) }
            batch += overflow.withLock { list in
                defer { list.removeAll() }
                return list
            }
            if !batch.isEmpty { write(batch) }
            if stopping && batch.isEmpty && queue.approximateCount == 0 { return }
            let now = monotonicNow()
            if now >= nextMaintenance && !stopping {
                maintenance()
                nextMaintenance = now &+ maintenanceInterval
            }
            if batch.isEmpty { work.wait(until: nextMaintenance) }
        }
    }

    /// Removes a batch in one transaction (one fsync for all: deleting one per transaction managed a few
    /// hundred a second), then reports each. If the transaction fails, tokens go one by one so a single bad
    /// one cannot keep the others.
    private func write(_ batch: [Invalidation]) {
        // The reason goes into the token's ledger history.
        let items = batch.map {
            TokenInvalidation(token: $0.token, invalidSince: $0.invalidSince, reason: $0.reason?.rawValue)
        }
        do {
            let removed = try store.invalidate(items)
            for (item, wasRemoved) in zip(batch, removed) { report(item, removed: wasRemoved) }
        } catch {
            noteError("removing \(batch.count) invalid tokens in one transaction: \(error); retrying one by one")
            for item in batch {
                do {
                    let single = TokenInvalidation(
                        token: item.token, invalidSince: item.invalidSince, reason: item.reason?.rawValue)
                    report(item, removed: try store.invalidate([single]).first ?? false)
                } catch {
                    noteError("removing an invalid token: \(error)")
                }
            }
        }
    }

    private func report(_ item: Invalidation, removed: Bool) {
        if removed {
            persisted.add(1, ordering: .relaxed)
            removedCounter.increment()
        } else {
            keptAfterReRegistration.add(1, ordering: .relaxed)
            keptCounter.increment()
        }
        onInvalidation?(
            InvalidationReport(
                token: item.token, reason: item.reason, invalidSince: item.invalidSince, removed: removed))
    }

    func noteError(_ message: String) {
        storageErrors.add(1, ordering: .relaxed)
        lastErrorBox.withLock { $0 = message }
        logger.error("registry: \(message)")
    }
}

/// A token APNs reported dead, after the registry durably removed it (or kept it, if the app registered it
/// again after APNs' timestamp).
public struct InvalidationReport: Sendable {
    public let token: DeviceToken
    /// BadDeviceToken, DeviceTokenNotForTopic, Unregistered or ExpiredToken.
    public let reason: APNsReason?
    /// From a 410: since when APNs considers the token dead (UNIX ms).
    public let invalidSince: Int64?
    /// False when the registry kept the token because it was registered again after `invalidSince`.
    public let removed: Bool
}

import FanfareCore
import FanfareIO
import FanfareStorage
import Logging
import Synchronization
import Glibc

/// The engine's thread for durable-wave writes that must not run on a worker: shard checkpoints, final wave
/// reports and pending retirements, in the order they were handed over.
///
/// Shards submit a checkpoint batch every `CheckpointConfiguration.interval` (not per push) under a short lock;
/// the thread writes everything pending in one `saveCheckpoints` transaction, then raises each shard's
/// durable generation (shards read it once per loop iteration and move their cursors' permits) and kicks the
/// shard's worker. A failed write is kept and retried; shards stall at their window meanwhile.
final class CheckpointWriter: @unchecked Sendable {
    private enum Work {
        case checkpoints(shard: Int, generation: UInt64, [WaveCheckpoint])
        case complete(WaveReportRecord)
        /// Leased shards: this node's part of the wave is done; complete it if every shard's is.
        case finishShared(UInt64)
        case retirement(channel: String, dueAt: Int64)
    }

    private let store: any WaveStore
    private let bundleID: String
    private let environment: APNsEnvironment
    private let logger: Logger
    private let pending = Mutex<[Work]>([])
    private let durable: UnsafeMutablePointer<Atomic<UInt64>>
    private let shardCount: Int
    private let wake: UnsafeMutablePointer<sem_t>
    private let stopRequested = Atomic<Bool>(false)
    private let abandoned = Atomic<Bool>(false)
    private var thread: pthread_t?
    /// Kicks a shard's worker after its checkpoint became durable.
    var kick: (@Sendable (Int) -> Void)?

    let writes = Atomic<Int>(0)
    let errors = Atomic<Int>(0)
    private let lastErrorBox = Mutex<String?>(nil)
    var lastError: String? { lastErrorBox.withLock { $0 } }

    init(store: any WaveStore, bundleID: String, environment: APNsEnvironment, shards: Int, logger: Logger) {
        self.store = store
        self.bundleID = bundleID
        self.environment = environment
        self.logger = logger
        shardCount = shards
        durable = .allocate(capacity: shards)
        for index in 0..<shards { (durable + index).initialize(to: Atomic(0)) }
        wake = .allocate(capacity: 1)
        sem_init(wake, 0, 0)
    }

    deinit {
        durable.deinitialize(count: shardCount)
        durable.deallocate()
        sem_destroy(wake)
        wake.deallocate()
    }

    func start() {
        do {
            thread = try PlainThread.start(named: "fanfare-ckpt") { self.run() }
        } catch {
            preconditionFailure("could not start the checkpoint thread: \(error)")
        }
    }

    /// The newest checkpoint generation of `shard` on disk.
    @inline(__always)
    func durableGeneration(shard: Int) -> UInt64 { durable[shard].load(ordering: .acquiring) }

    /// A shard's thread, once per checkpoint (not per push).
    func submit(shard: Int, generation: UInt64, _ checkpoints: [WaveCheckpoint]) {
        pending.withLock { $0.append(.checkpoints(shard: shard, generation: generation, checkpoints)) }
        sem_post(wake)
    }

    /// Any thread: the wave completed; its final report replaces its checkpoints.
    func complete(_ report: WaveReportRecord) {
        pending.withLock { $0.append(.complete(report)) }
        sem_post(wake)
    }

    /// Any thread (leased shards): this node finished its part of the wave (its final checkpoints were handed
    /// over before this).
    func finishShared(_ waveID: UInt64) {
        pending.withLock { $0.append(.finishShared(waveID)) }
        sem_post(wake)
    }

    func saveRetirement(channel: String, dueAt: Int64) {
        pending.withLock { $0.append(.retirement(channel: channel, dueAt: dueAt)) }
        sem_post(wake)
    }

    /// Writes everything handed over so far, then stops the thread.
    func stop() {
        stopRequested.store(true, ordering: .releasing)
        sem_post(wake)
        if let thread { PlainThread.join(thread) }
        thread = nil
    }

    /// After `stop()`, on the caller's thread: writes what was handed over since, then `extra` (a graceful
    /// shutdown's last checkpoints). Returns false if something could not be written.
    func writeRemaining(_ extra: [WaveCheckpoint]) -> Bool {
        var work = pending.withLock { list in
            defer { list.removeAll() }
            return list
        }
        if !extra.isEmpty { work.append(.checkpoints(shard: 0, generation: 0, extra)) }
        return write(work).isEmpty
    }

    /// Tests: what a crash leaves behind. Stops at once; nothing handed over from now on reaches the store.
    func abandon() {
        abandoned.store(true, ordering: .releasing)
        sem_post(wake)
        if let thread { PlainThread.join(thread) }
        thread = nil
    }

    private func run() {
        while true {
            if abandoned.load(ordering: .acquiring) { return }
            let stopping = stopRequested.load(ordering: .acquiring)
            let work = pending.withLock { list in
                defer { list.removeAll(keepingCapacity: true) }
                return list
            }
            if !work.isEmpty {
                let failed = write(work)
                if !failed.isEmpty {
                    pending.withLock { $0.insert(contentsOf: failed, at: 0) }
                    if stopping { return }  // the engine writes nothing more; what failed is reported
                    usleep(50_000)  // a failing disk: retry, without spinning
                    continue
                }
            }
            if stopping { return }
            if pending.withLock({ $0.isEmpty }) { sem_wait(wake) }
        }
    }

    /// Writes `work` in order; returns what could not be written (from the first failure on).
    private func write(_ work: [Work]) -> [Work] {
        var index = 0
        while index < work.count {
            // Consecutive checkpoint batches go in one transaction.
            var batch: [WaveCheckpoint] = []
            var generations: [(Int, UInt64)] = []
            var end = index
            while end < work.count, case .checkpoints(let shard, let generation, let items) = work[end] {
                batch.append(contentsOf: items)
                generations.append((shard, generation))
                end += 1
            }
            do {
                if end > index {
                    try store.saveCheckpoints(Self.newestPerWaveAndShard(batch))
                    for (shard, generation) in generations where generation > durable[shard].load(ordering: .relaxed) {
                        durable[shard].store(generation, ordering: .releasing)
                    }
                    for shard in Set(generations.map(\.0)) { kick?(shard) }
                    index = end
                } else {
                    switch work[index] {
                    case .complete(let report): try store.completeWave(report)
                    case .finishShared(let waveID):
                        if let shared = store as? any SharedWaveStore {
                            let completedAt = FanoutEngine.wallMilliseconds()
                            _ = try shared.completeIfFinished(waveID: waveID) { record, checkpoints in
                                SharedWaveSummary(record: record, checkpoints: checkpoints, logger: logger)
                                    .finalReport(completedAt: completedAt)
                            }
                        }
                    case .retirement(let channel, let dueAt):
                        try store.saveRetirement(
                            bundleID: bundleID, environment: environment, channel: channel, dueAt: dueAt)
                    case .checkpoints: break
                    }
                    index += 1
                }
                writes.add(1, ordering: .relaxed)
            } catch {
                errors.add(1, ordering: .relaxed)
                let message = "\(error)"
                switch error {
                case .invalidWave, .unknownWave:
                    // Refused for good (retrying would block every later write): drop it, say so.
                    logger.error("durable waves: the store refused a write, dropped: \(message)")
                    lastErrorBox.withLock { $0 = message }
                    index = max(end, index + 1)
                    continue
                default: break
                }
                let first = lastErrorBox.withLock { last in
                    defer { last = message }
                    return last != message
                }
                if first { logger.error("durable waves: could not write (retrying): \(message)") }
                return Array(work[index...])
            }
        }
        return []
    }

    /// A batch may hold several checkpoints of one (wave, shard): only the newest matters.
    private static func newestPerWaveAndShard(_ batch: [WaveCheckpoint]) -> [WaveCheckpoint] {
        var seen = Set<[UInt64]>()
        var kept: [WaveCheckpoint] = []
        for checkpoint in batch.reversed() where seen.insert([checkpoint.waveID, UInt64(checkpoint.shard)]).inserted {
            kept.append(checkpoint)
        }
        return kept.reversed()
    }
}

import FanfareClient
import FanfareCore
import Histogram
import Synchronization

/// Where one push of a load run ended, as a small fixed index (no allocation to count it).
public enum LoadOutcome: Hashable, Sendable, CustomStringConvertible {
    case delivered
    case rejected(status: Int, reason: APNsReason?)
    case deadlineExceeded
    case resendLimitReached
    case shutdown
    case unconfirmed

    static let reasons = APNsReason.allCases
    static let slotCount = 5 + reasons.count + 1

    var slot: Int {
        switch self {
        case .delivered: return 0
        case .deadlineExceeded: return 1
        case .resendLimitReached: return 2
        case .shutdown: return 3
        case .unconfirmed: return 4
        case .rejected(_, let reason?): return 5 + Self.reasons.firstIndex(of: reason)!
        case .rejected(_, nil): return 5 + Self.reasons.count
        }
    }

    static func from(slot: Int) -> LoadOutcome {
        switch slot {
        case 0: return .delivered
        case 1: return .deadlineExceeded
        case 2: return .resendLimitReached
        case 3: return .shutdown
        case 4: return .unconfirmed
        case let index where index < 5 + reasons.count:
            let reason = reasons[index - 5]
            return .rejected(status: reason.status, reason: reason)
        default: return .rejected(status: 0, reason: nil)
        }
    }

    init(_ disposition: PushDisposition) {
        switch disposition {
        case .delivered: self = .delivered
        case .rejected(let status, let reason, _, _, _): self = .rejected(status: status, reason: reason)
        case .failed(.deadlineExceeded): self = .deadlineExceeded
        case .failed(.resendLimitReached): self = .resendLimitReached
        case .failed(.shutdown): self = .shutdown
        case .failed(.unconfirmed): self = .unconfirmed
        }
    }

    public var description: String {
        switch self {
        case .delivered: return "200 delivered"
        case .rejected(let status, let reason?): return "\(status) \(reason.rawValue)"
        case .rejected(_, nil): return "other status (unknown reason)"
        case .deadlineExceeded: return "failed: deadline exceeded"
        case .resendLimitReached: return "failed: resend limit reached"
        case .shutdown: return "failed: shut down"
        case .unconfirmed: return "failed: unconfirmed (connection ended after sending)"
        }
    }

    public var isError: Bool { self != .delivered }
}

/// Counts every result and records its latency. Each worker writes its own record (`PushResult.worker`),
/// so the per-push cost is one uncontended lock; the progress display reads the records once a second.
public final class LoadRecorder: PushResultHandler {
    struct WorkerRecord {
        var latency = Histogram<UInt64>(
            lowestDiscernibleValue: 1, highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three)
        var counts = [Int](repeating: 0, count: LoadOutcome.slotCount)
        var resends = 0
    }

    /// A Mutex is not copyable, so each lives in its own box.
    final class RecordBox: Sendable {
        let record = Mutex(WorkerRecord())
    }

    private let records: [RecordBox]
    private let completedCount = Atomic<Int>(0)
    private let errorCount = Atomic<Int>(0)

    public init(workers: Int) {
        records = (0..<workers).map { _ in RecordBox() }
    }

    public var completed: Int { completedCount.load(ordering: .acquiring) }
    public var errors: Int { errorCount.load(ordering: .relaxed) }

    public func pushCompleted(_ result: PushResult) {
        record(
            result.disposition, latencyNanoseconds: result.latencyNanoseconds, resends: result.resends,
            worker: result.worker)
    }

    /// The worker's call: the few fields counted here, read in place (no `PushResult` is built).
    public func pushCompleted(inPlace completion: borrowing PushCompletion) {
        record(
            completion.disposition, latencyNanoseconds: completion.latencyNanoseconds, resends: completion.resends,
            worker: completion.worker)
    }

    private func record(_ disposition: PushDisposition, latencyNanoseconds: UInt64, resends: Int, worker: Int) {
        let outcome = LoadOutcome(disposition)
        // Microseconds: a 1 µs to 1 h range at 3 significant digits.
        let micros = max(1, latencyNanoseconds / 1000)
        records[worker].record.withLock { record in
            _ = record.latency.record(micros)
            record.counts[outcome.slot] += 1
            record.resends += resends
        }
        if outcome.isError { errorCount.add(1, ordering: .relaxed) }
        completedCount.add(1, ordering: .releasing)
    }

    /// Merged latency (µs) and counts so far.
    func snapshot() -> (latency: Histogram<UInt64>, counts: [LoadOutcome: Int], resends: Int) {
        var latency = Histogram<UInt64>(
            lowestDiscernibleValue: 1, highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three)
        var slots = [Int](repeating: 0, count: LoadOutcome.slotCount)
        var resends = 0
        for record in records {
            record.record.withLock { record in
                latency.add(record.latency)
                for index in slots.indices { slots[index] += record.counts[index] }
                resends += record.resends
            }
        }
        var counts: [LoadOutcome: Int] = [:]
        for (slot, count) in slots.enumerated() where count > 0 { counts[LoadOutcome.from(slot: slot)] = count }
        return (latency, counts, resends)
    }
}

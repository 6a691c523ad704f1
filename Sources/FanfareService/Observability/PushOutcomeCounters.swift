import FanfareClient
import FanfareCore
import Synchronization

/// Push results by outcome and reason, counted on the worker thread that finished each push (the engine's
/// `onPushResult`): one relaxed add to a row only that worker writes, so workers never share a cache line.
package final class PushOutcomeCounters: @unchecked Sendable {
    /// One column per outcome: delivered, rejected per APNs reason (+ unknown), failed per local cause.
    package static let reasons = APNsReason.allCases
    static let rejectedUnknown = 1 + reasons.count
    static let failedDeadline = rejectedUnknown + 1
    static let failedResendLimit = rejectedUnknown + 2
    static let failedShutdown = rejectedUnknown + 3
    static let failedUnconfirmed = rejectedUnknown + 4
    static let columns = rejectedUnknown + 5
    /// Row stride, rounded up to whole cache lines (64 bytes = 8 counters).
    private static let stride = (columns + 7) / 8 * 8

    private let workers: Int
    private let counts: UnsafeMutablePointer<Atomic<Int>>

    package init(workers: Int) {
        self.workers = workers
        counts = .allocate(capacity: workers * Self.stride)
        for index in 0..<workers * Self.stride { (counts + index).initialize(to: Atomic(0)) }
    }

    deinit {
        counts.deinitialize(count: workers * Self.stride)
        counts.deallocate()
    }

    /// On the worker thread that finished the push.
    package func record(_ result: PushResult) {
        let column: Int
        switch result.disposition {
        case .delivered: column = 0
        case .rejected(_, let reason, _, _, _):
            column = reason.flatMap { reason in Self.reasons.firstIndex(of: reason).map { $0 + 1 } } ?? Self.rejectedUnknown
        case .failed(.deadlineExceeded): column = Self.failedDeadline
        case .failed(.resendLimitReached): column = Self.failedResendLimit
        case .failed(.shutdown): column = Self.failedShutdown
        case .failed(.unconfirmed): column = Self.failedUnconfirmed
        }
        let worker = result.worker >= 0 && result.worker < workers ? result.worker : 0
        counts[worker * Self.stride + column].add(1, ordering: .relaxed)
    }

    /// (outcome, reason) → count, summed over workers; only non-zero ones.
    package var totals: [(outcome: String, reason: String, count: Int)] {
        var result: [(String, String, Int)] = []
        for column in 0..<Self.columns {
            var sum = 0
            for worker in 0..<workers { sum += counts[worker * Self.stride + column].load(ordering: .relaxed) }
            guard sum > 0 else { continue }
            result.append((Self.outcome(column), Self.reason(column), sum))
        }
        return result
    }

    static func outcome(_ column: Int) -> String {
        if column == 0 { return "delivered" }
        return column <= rejectedUnknown ? "rejected" : "failed"
    }

    static func reason(_ column: Int) -> String {
        switch column {
        case 0: return "none"
        case rejectedUnknown: return "UnknownReason"
        case failedDeadline: return "DeadlineExceeded"
        case failedResendLimit: return "ResendLimitReached"
        case failedShutdown: return "Shutdown"
        case failedUnconfirmed: return "Unconfirmed"
        default: return reasons[column - 1].rawValue
        }
    }
}

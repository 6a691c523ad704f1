import FanfareClient
import FanfareCore

/// Why a targeted token's push failed for good, as a small index so per-wave counters are a flat array.
/// The APNs reasons come first (in `APNsReason.allCases` order), then the local ones.
enum FailureReason {
    static let apnsReasons = APNsReason.allCases
    static let unknownAPNsReason = apnsReasons.count
    static let deadlineExceeded = apnsReasons.count + 1
    static let resendLimitReached = apnsReasons.count + 2
    static let shutdown = apnsReasons.count + 3
    static let unconfirmed = apnsReasons.count + 4
    static let count = apnsReasons.count + 5

    static func index(of reason: APNsReason) -> Int {
        // APNsReason is a String enum: find it once per failure (rare), not per push.
        apnsReasons.firstIndex(of: reason)!
    }

    static func index(of disposition: PushDisposition) -> Int {
        switch disposition {
        case .delivered: preconditionFailure("a delivered push has no failure reason")
        case .rejected(_, let reason, _, _, _): return reason.map(index(of:)) ?? unknownAPNsReason
        case .failed(.deadlineExceeded): return deadlineExceeded
        case .failed(.resendLimitReached): return resendLimitReached
        case .failed(.shutdown): return shutdown
        case .failed(.unconfirmed): return unconfirmed
        }
    }

    /// The index of a reason name (`name(_:)`'s inverse); an unknown name is `unknownAPNsReason`.
    static func index(named name: String) -> Int {
        if let reason = APNsReason(rawValue: name), let index = apnsReasons.firstIndex(of: reason) { return index }
        for index in apnsReasons.count..<count where self.name(index) == name { return index }
        return unknownAPNsReason
    }

    static func name(_ index: Int) -> String {
        if index < apnsReasons.count { return apnsReasons[index].rawValue }
        switch index {
        case unknownAPNsReason: return "UnknownReason"
        case deadlineExceeded: return "DeadlineExceeded"
        case resendLimitReached: return "ResendLimitReached"
        case shutdown: return "Shutdown"
        case unconfirmed: return "Unconfirmed"
        default: preconditionFailure("no failure reason \(index)")
        }
    }
}

import FanfareCore

/// How one push ended. Every submitted push ends in exactly one `PushResult`.
public struct PushResult: Sendable {
    public var cookie: UInt64
    /// The push's token or broadcast channel.
    public var target: PushTarget
    public var disposition: PushDisposition
    /// The `apns-id` the request carried (APNs echoes it). For a broadcast, the request id of APNs' answer
    /// when it carried one (`apns-request-id` or `apns-id`, whichever it sent), else the request's own.
    public var apnsID: PushIdentifier
    /// How many times the push was re-sent after a connection refused or lost it unprocessed.
    public var resends: Int
    /// From submission (or `PushJob.scheduledAt`) to the answer, in nanoseconds.
    public var latencyNanoseconds: UInt64
    /// The worker thread that finished the push (`0..<workerCount`): handlers can keep per-worker state
    /// without locks, since a worker calls its handler from one thread only.
    public var worker: Int
    /// True when an earlier attempt of this push may have reached APNs (it was re-sent after an unconfirmed
    /// attempt, see `PushFailure.unconfirmed`): the device may have got it twice.
    public var possibleDuplicate: Bool = false

    public init(
        cookie: UInt64, target: PushTarget, disposition: PushDisposition, apnsID: PushIdentifier, resends: Int,
        latencyNanoseconds: UInt64, worker: Int
    ) {
        self.cookie = cookie
        self.target = target
        self.disposition = disposition
        self.apnsID = apnsID
        self.resends = resends
        self.latencyNanoseconds = latencyNanoseconds
        self.worker = worker
    }

    public init(
        cookie: UInt64, token: DeviceToken, disposition: PushDisposition, apnsID: PushIdentifier, resends: Int,
        latencyNanoseconds: UInt64, worker: Int
    ) {
        self.init(
            cookie: cookie, target: .device(token), disposition: disposition, apnsID: apnsID, resends: resends,
            latencyNanoseconds: latencyNanoseconds, worker: worker)
    }

    /// The device token; ``PushTarget/noDevice`` for a broadcast (check `channel`).
    public var token: DeviceToken {
        get {
            if case .device(let token) = target { return token }
            return PushTarget.noDevice
        }
        set { target = .device(newValue) }
    }

    /// The broadcast channel, nil for a token push.
    public var channel: BroadcastChannelID? {
        if case .channel(let channel) = target { return channel }
        return nil
    }

    public var isDelivered: Bool {
        if case .delivered = disposition { return true }
        return false
    }
}

/// The three ways a push can end.
public enum PushDisposition: Sendable, Equatable, CustomStringConvertible {
    /// APNs answered 200.
    case delivered
    /// APNs answered with an error status; `action` says what to do (apns-spec.md §7.4).
    /// `reason` is nil for a reason string this build does not know (`rawReason` then holds it).
    case rejected(status: Int, reason: APNsReason?, rawReason: String?, action: PushAction, timestamp: Int64?)
    /// No answer from APNs; the push was given up locally.
    case failed(PushFailure)

    public var description: String {
        switch self {
        case .delivered: return "200 delivered"
        case .rejected(let status, let reason, let raw, let action, let timestamp):
            var text = "\(status) \(reason?.rawValue ?? raw ?? "(no reason)") -> \(action.rawValue)"
            if let timestamp { text += " (token inactive since \(timestamp) ms)" }
            return text
        case .failed(let failure): return "failed: \(failure)"
        }
    }

    /// The action for every ending, including local failures.
    public var action: PushAction {
        switch self {
        case .delivered: return .delivered
        case .rejected(_, _, _, let action, _): return action
        case .failed(let failure): return failure.action
        }
    }
}

/// Why a push ended without an APNs answer.
public enum PushFailure: Sendable, Equatable, CustomStringConvertible {
    /// Its deadline passed before APNs answered (the stream was reset).
    case deadlineExceeded
    /// It was re-sent `maxResends` times after connections failed or refused it; the last cause is given.
    case resendLimitReached(lastCause: String)
    /// The client shut down before the push was sent.
    case shutdown
    /// The request went out, but its connection ended before APNs answered (a reset, a lost connection,
    /// a stream closed without an answer below GOAWAY's last-stream-id): APNs may or may not have processed
    /// it. The client re-sends only what provably never reached APNs; these come back unless
    /// `ClientConfiguration.resendUnconfirmed` asks for a resend (which may then deliver twice).
    case unconfirmed(cause: String)

    public var description: String {
        switch self {
        case .deadlineExceeded: return "deadline exceeded before APNs answered"
        case .resendLimitReached(let cause): return "gave up after repeated resends (last: \(cause))"
        case .shutdown: return "client shut down before the push was answered"
        case .unconfirmed(let cause):
            return "sent, but no answer came before the connection ended (\(cause)); APNs may have processed it"
        }
    }

    public var action: PushAction {
        switch self {
        case .deadlineExceeded, .resendLimitReached: return .retryLater
        case .shutdown: return .retryLater
        case .unconfirmed: return .retryLater
        }
    }
}

/// Receives results on the worker thread that finished the push. Must be quick and must not block.
///
/// The worker calls `pushCompleted(inPlace:)`, which reads the push where the client keeps it (its stream
/// slot) instead of copying it into a `PushResult`; its default builds the `PushResult` and calls
/// `pushCompleted(_:)`. A handler on a hot path that needs only a few fields implements both.
public protocol PushResultHandler: AnyObject, Sendable {
    func pushCompleted(_ result: PushResult)
    func pushCompleted(inPlace completion: borrowing PushCompletion)
}

extension PushResultHandler {
    public func pushCompleted(inPlace completion: borrowing PushCompletion) {
        pushCompleted(completion.result)
    }
}

/// A finished push, read in place for the length of one `PushResultHandler.pushCompleted(inPlace:)` call: the
/// fields of its `PushResult` without building one. Not copyable, and not valid after the call returns (the
/// job it reads is freed with its stream slot): take `result` to keep it.
public struct PushCompletion: ~Copyable {
    private let job: UnsafePointer<PushJob>
    public let disposition: PushDisposition
    /// From submission (or `PushJob.scheduledAt`) to the answer, in nanoseconds.
    public let latencyNanoseconds: UInt64
    /// The worker thread that finished the push (`0..<workerCount`).
    public let worker: Int

    init(job: UnsafePointer<PushJob>, disposition: PushDisposition, latencyNanoseconds: UInt64, worker: Int) {
        self.job = job
        self.disposition = disposition
        self.latencyNanoseconds = latencyNanoseconds
        self.worker = worker
    }

    public var cookie: UInt64 { job.pointee.cookie }
    public var resends: Int { job.pointee.resends }
    public var possibleDuplicate: Bool { job.pointee.possibleDuplicate }
    public var target: PushTarget { job.pointee.target }
    /// As `PushResult.apnsID`.
    public var apnsID: PushIdentifier { job.pointee.apnsID ?? PushIdentifier() }

    public var isDelivered: Bool {
        if case .delivered = disposition { return true }
        return false
    }

    /// The same ending as a `PushResult` value (a copy of the token or channel and the id).
    public var result: PushResult {
        var result = PushResult(
            cookie: job.pointee.cookie, target: job.pointee.target, disposition: disposition, apnsID: apnsID,
            resends: job.pointee.resends, latencyNanoseconds: latencyNanoseconds, worker: worker)
        if job.pointee.possibleDuplicate { result.possibleDuplicate = true }
        return result
    }
}

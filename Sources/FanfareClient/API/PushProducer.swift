/// A source of pushes that a worker pulls from on its own thread whenever its connections have free streams.
///
/// This is the zero-queue path: no cross-thread hand-off, no wake-up, nothing buffered beyond the streams
/// available. Load generators and fan-out shards implement it; `APNsClient.submit` is the other way in.
///
/// The worker calls `poll(now:into:)`, which writes the push straight into the stream slot it will be sent from
/// (a job is about 280 bytes: returned by value it was copied from producer to worker to slot). Its default
/// calls `poll(now:)`; a producer on a hot path implements both (`ProducerPoll(writing:)` makes the value form
/// from the in-place one).
public protocol PushProducer: AnyObject {
    /// Called on the worker thread with the loop's monotonic clock. Return the next push, a time to ask
    /// again, or `.finished` once there will never be another push.
    func poll(now: UInt64) -> ProducerPoll

    /// The same as `poll(now:)`, writing the push into `job`: uninitialized memory the worker owns (its next
    /// stream slot) and lends for this call only. Initialize it exactly when returning `.produced`.
    func poll(now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> ProducerStatus

    /// Called on the worker thread once per loop iteration, whether or not streams are free: a producer with
    /// its own inbox (a fan-out shard's command queue) takes commands here so they never wait for a stream.
    func service(now: UInt64)
}

extension PushProducer {
    public func service(now: UInt64) {}

    public func poll(now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> ProducerStatus {
        switch poll(now: now) {
        case .push(let produced):
            job.initialize(to: produced)
            return .produced
        case .wait(let until): return .wait(until: until)
        case .finished: return .finished
        }
    }
}

public enum ProducerPoll {
    case push(PushJob)
    /// Nothing due yet: poll again at this monotonic time (ns).
    case wait(until: UInt64)
    case finished

    /// The value form of an in-place poll: runs `poll` on temporary storage and moves a produced job out.
    public init(writing poll: (UnsafeMutablePointer<PushJob>) -> ProducerStatus) {
        self = withUnsafeTemporaryAllocation(of: PushJob.self, capacity: 1) { storage in
            let job = storage.baseAddress!
            switch poll(job) {
            case .produced: return .push(job.move())
            case .wait(let until): return .wait(until: until)
            case .finished: return .finished
            }
        }
    }
}

/// What an in-place poll (`PushProducer.poll(now:into:)`) did.
public enum ProducerStatus: Equatable, Sendable {
    /// It initialized the job it was given.
    case produced
    /// Nothing due yet (the job is left uninitialized): poll again at this monotonic time (ns).
    case wait(until: UInt64)
    /// There will never be another push (the job is left uninitialized).
    case finished
}

/// A source of pushes that a worker pulls from on its own thread whenever its connections have free streams.
///
/// This is the zero-queue path: no cross-thread hand-off, no wake-up, nothing buffered beyond the streams
/// available. Load generators and fan-out shards implement it; `APNsClient.submit` is the other way in.
public protocol PushProducer: AnyObject {
    /// Called on the worker thread with the loop's monotonic clock. Return the next push, a time to ask
    /// again, or `.finished` once there will never be another push.
    func poll(now: UInt64) -> ProducerPoll

    /// Called on the worker thread once per loop iteration, whether or not streams are free: a producer with
    /// its own inbox (a fan-out shard's command queue) takes commands here so they never wait for a stream.
    func service(now: UInt64)
}

extension PushProducer {
    public func service(now: UInt64) {}
}

public enum ProducerPoll {
    case push(PushJob)
    /// Nothing due yet: poll again at this monotonic time (ns).
    case wait(until: UInt64)
    case finished
}

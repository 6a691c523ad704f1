/// A source of pushes that a worker pulls from on its own thread whenever its connections have free streams.
///
/// This is the zero-queue path: no cross-thread hand-off, no wake-up, nothing buffered beyond the streams
/// available. Load generators and fan-out shards implement it; `APNsClient.submit` is the other way in.
public protocol PushProducer: AnyObject {
    /// Called on the worker thread with the loop's monotonic clock. Return the next push, a time to ask
    /// again, or `.finished` once there will never be another push.
    func poll(now: UInt64) -> ProducerPoll
}

public enum ProducerPoll {
    case push(PushJob)
    /// Nothing due yet: poll again at this monotonic time (ns).
    case wait(until: UInt64)
    case finished
}

import FanfareClient
import FanfareCore
import Logging

/// Drives one real shard without a network, for the benchmarks: the caller plays the worker (poll) and APNs
/// (every push delivered). Measures the engine's own per-push work and allocations: picking the member,
/// the budget, building the push, and accounting its result.
@_spi(Benchmarks)
public final class ShardProbe: InvalidationSink, @unchecked Sendable {
    private var shard: Shard!
    private var sequence: UInt64 = 0
    private var jobs: [PushJob] = []
    private let channel = "probe"

    public init(tokens: Int, tokenBytes: Int = 80) throws {
        let settings = ShardSettings(
            standardBudget: .standard, frequentBudget: .frequent, minimumInterval: 0, retryDelays: [1_000_000])
        let breaker = InvalidTokenBreaker(
            configuration: InvalidTokenBreakerConfiguration(), logger: Logger(label: "fanfare.probe"))
        shard = Shard(index: 0, settings: settings, commandCapacity: 16, invalidations: self, breaker: breaker)
        shard.reserve(tokens: tokens)
        for index in 0..<tokens {
            var bytes = [UInt8](repeating: 0, count: tokenBytes)
            var state = UInt64(index) &* 0x9E37_79B9_7F4A_7C15 | 1
            for offset in 0..<tokenBytes {
                state = state &* 6364136223846793005 &+ 1442695040888963407
                bytes[offset] = UInt8(truncatingIfNeeded: state >> 56)
            }
            shard.register(
                RegistrationBatch.Entry(
                    token: try DeviceToken(bytes: bytes), pushToStart: false, frequentUpdates: index % 3 == 0,
                    registeredAtSeconds: 1_700_000_000, channels: [0]))
        }
        jobs.reserveCapacity(tokens)
    }

    /// Starts a wave to every token (allocates: the wave, its payload and tallies; once per wave).
    public func publish() throws {
        sequence += 1
        var content = LiveActivityContent(event: .update, timestamp: 1_800_000_000 + Int64(sequence))
        content.contentState = try RawJSON(validating: #"{"home":1,"away":0,"minute":63}"#)
        content.alert = LiveActivityAlert(title: .plain("Goal!"), body: .plain("1-0"))
        let update = ChannelUpdate(channel: channel, content: content, priority: .auto)
        let wave = Wave(id: sequence, update: update, shardCount: 1, publishedAt: monotonicNow(), onComplete: nil)
        let published = PublishedUpdate(
            wave: wave, update: update, channel: 0, sequence: sequence, payload: try PushPayload(liveActivity: content),
            deadline: 0)
        shard.inbox.enqueueControl(.publish(published))
        shard.service(now: monotonicNow())
    }

    /// Takes up to `streams` pushes from the shard, answers each 200, until the wave is done. Returns pushes.
    @discardableResult
    public func drain(streams: Int = 1000) -> Int {
        var total = 0
        let now = monotonicNow()
        while true {
            jobs.removeAll(keepingCapacity: true)
            while jobs.count < streams, case .push(let job) = shard.poll(now: now) { jobs.append(job) }
            if jobs.isEmpty { return total }
            for job in jobs {
                shard.pushCompleted(
                    PushResult(
                        cookie: job.cookie, token: job.token, disposition: .delivered,
                        apnsID: job.apnsID ?? PushIdentifier(),
                        resends: 0, latencyNanoseconds: 0, worker: 0),
                    now: now)
            }
            total += jobs.count
        }
    }

    func tokenInvalidated(_ token: DeviceToken, reason: APNsReason?, invalidSince: Int64?) {}
}

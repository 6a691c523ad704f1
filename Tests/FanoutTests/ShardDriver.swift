// Drives one real Shard by hand: the test plays the worker (service + poll) and APNs (the results), so the
// fan-out state machine can be checked step by step and deterministically. The network path is covered by
// the end-to-end fan-out tests against the simulator.
@testable import FanfareClient
import FanfareCore
@testable import FanfareFanout
import Logging
import Synchronization
import Testing

final class RecordingInvalidations: InvalidationSink, @unchecked Sendable {
    private let list = Mutex<[(DeviceToken, APNsReason?, Int64?)]>([])
    func tokenInvalidated(_ token: DeviceToken, reason: APNsReason?, invalidSince: Int64?) {
        list.withLock { $0.append((token, reason, invalidSince)) }
    }
    var tokens: [DeviceToken] { list.withLock { $0.map(\.0) } }
}

final class ShardDriver {
    let shard: Shard
    let invalidations = RecordingInvalidations()
    let breaker: InvalidTokenBreaker
    private var sequence: UInt64 = 0
    private var nextWaveID: UInt64 = 1
    /// Channel names → ids, as the engine's `ChannelDirectory` assigns them (never forgotten here).
    private var channelIDs: [String: UInt16] = [:]
    /// The test's clock (monotonic ns); tests move it forward by hand.
    var now: UInt64

    init(
        minimumInterval: UInt64 = 0, retryDelays: [UInt64] = [1_000_000, 2_000_000],
        standard: PriorityBudgetProfile = .standard, frequent: PriorityBudgetProfile = .frequent,
        breaker configuration: InvalidTokenBreakerConfiguration = InvalidTokenBreakerConfiguration(),
        retryUnconfirmed: Bool = false, startingAt start: UInt64? = nil
    ) {
        var settings = ShardSettings(
            standardBudget: standard, frequentBudget: frequent, minimumInterval: minimumInterval,
            retryDelays: retryDelays)
        settings.retryUnconfirmed = retryUnconfirmed
        breaker = InvalidTokenBreaker(configuration: configuration, logger: Logger(label: "test.breaker"))
        // The shard's clock counts from the test's: a seeded schedule then replays to the decisecond.
        let now = start ?? monotonicNow()
        shard = Shard(
            index: 0, settings: settings, commandCapacity: 64, invalidations: invalidations, breaker: breaker,
            clockOrigin: now)
        self.now = now
    }

    /// A restarted engine's driver goes on where `other` stopped: its clock, channel ids, wave ids and sequences.
    func carryOver(from other: ShardDriver) {
        now = other.now
        sequence = other.sequence
        nextWaveID = other.nextWaveID
        channelIDs = other.channelIDs
    }

    func nextSequence() -> UInt64 {
        sequence += 1
        return sequence
    }

    func channelID(_ name: String) -> UInt16 {
        if let id = channelIDs[name] { return id }
        let id = UInt16(channelIDs.count)
        channelIDs[name] = id
        return id
    }

    func register(
        _ tokens: [DeviceToken], channel: String = "match", frequent: Bool = false, pushToStart: Bool = false,
        at: UInt32 = 1_700_000_000
    ) {
        for token in tokens {
            shard.register(
                RegistrationBatch.Entry(
                    token: token, pushToStart: pushToStart, frequentUpdates: frequent, registeredAtSeconds: at,
                    channels: [channelID(channel)]))
        }
    }

    /// Queues a control command the way the engine does (counting its slot) and lets the shard take it.
    func send(_ command: ShardCommand) {
        #expect(shard.inbox.hasControlRoom)
        shard.inbox.enqueueControl(command)
        shard.service(now: now)
    }

    /// Queues a single push the way the engine does and lets the shard take it.
    func send(_ single: SinglePush) {
        #expect(shard.inbox.enqueueSingle(single))
        shard.service(now: now)
    }

    /// Queues a control command the way the engine does, without letting the shard take it yet.
    func queue(_ command: ShardCommand) {
        #expect(shard.inbox.hasControlRoom)
        shard.inbox.enqueueControl(command)
    }

    /// Publishes through the shard's command queue, as the engine does.
    @discardableResult
    func publish(
        channel: String = "match", timestamp: Int64, event: LiveActivityEvent = .update, alert: Bool = false,
        priority: UpdatePriority = .auto, deadline: UInt64 = 0
    ) throws -> Wave {
        let (published, wave) = try update(
            channel: channel, timestamp: timestamp, event: event, alert: alert, priority: priority, deadline: deadline)
        send(.publish(published))
        return wave
    }

    /// The update `publish` sends, and its wave.
    func update(
        channel: String = "match", timestamp: Int64, event: LiveActivityEvent = .update, alert: Bool = false,
        priority: UpdatePriority = .auto, deadline: UInt64 = 0
    ) throws -> (PublishedUpdate, Wave) {
        try update(
            channelUpdate(channel: channel, timestamp: timestamp, event: event, alert: alert, priority: priority),
            deadline: deadline)
    }

    /// The update as a caller of `FanoutEngine.publish` would make it.
    func channelUpdate(
        channel: String = "match", timestamp: Int64, event: LiveActivityEvent = .update, alert: Bool = false,
        priority: UpdatePriority = .auto
    ) throws -> ChannelUpdate {
        try Self.channelUpdate(channel: channel, timestamp: timestamp, event: event, alert: alert, priority: priority)
    }

    /// The update as a caller of `FanoutEngine.publish` would make it (its content state carries the timestamp).
    static func channelUpdate(
        channel: String, timestamp: Int64, event: LiveActivityEvent = .update, alert: Bool, priority: UpdatePriority
    ) throws -> ChannelUpdate {
        var content = LiveActivityContent(event: event, timestamp: timestamp)
        content.contentState = try RawJSON(validating: #"{"t":\#(timestamp)}"#)
        if alert || event == .start { content.alert = LiveActivityAlert(title: .plain("Goal"), body: .plain("1-0")) }
        if event == .start {
            content.attributesType = "MatchAttributes"
            content.attributes = try RawJSON(validating: #"{"id":"m1"}"#)
        }
        return ChannelUpdate(channel: channel, content: content, priority: priority)
    }

    /// `update` as the engine hands it to a shard, and its wave.
    func update(_ update: ChannelUpdate, deadline: UInt64 = 0) throws -> (PublishedUpdate, Wave) {
        let content = update.content
        let wave = Wave(
            id: nextWaveID, update: update, shardCount: 1, publishedAt: now, breaker: breaker, onComplete: nil)
        nextWaveID += 1
        let published = PublishedUpdate(
            wave: wave, update: update, channel: channelID(update.channel), sequence: nextSequence(),
            payload: try PushPayload(liveActivity: content), deadline: deadline)
        return (published, wave)
    }

    /// Polls up to `limit` pushes (as a worker with that many free streams would).
    func take(_ limit: Int = .max) -> [PushJob] {
        var jobs: [PushJob] = []
        while jobs.count < limit, case .push(let job) = shard.poll(now: now) { jobs.append(job) }
        return jobs
    }

    func answer(_ job: PushJob, _ disposition: PushDisposition) {
        let result = PushResult(
            cookie: job.cookie, token: job.token, disposition: disposition, apnsID: PushIdentifier(), resends: 0,
            latencyNanoseconds: 0, worker: 0)
        shard.pushCompleted(result, now: now)
    }

    func deliver(_ jobs: [PushJob]) { for job in jobs { answer(job, .delivered) } }

    static func rejected(_ reason: APNsReason, timestamp: Int64? = nil) -> PushDisposition {
        .rejected(status: reason.status, reason: reason, rawReason: nil, action: reason.action, timestamp: timestamp)
    }
}

/// The timestamp inside a job's payload (`{"aps":{"timestamp":N,...`), to tell waves apart.
func payloadTimestamp(_ job: PushJob) -> Int64 {
    let text = String(decoding: job.payload.bytes, as: UTF8.self)
    guard let range = text.range(of: "\"timestamp\":") else { return -1 }
    return Int64(text[range.upperBound...].prefix { $0.isNumber }) ?? -1
}

extension WaveReport {
    /// Every targeted token has exactly one outcome.
    var balanced: Bool { accounted == targeted }
}

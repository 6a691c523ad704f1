import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

extension FanoutEngine {
    // MARK: - Durable waves

    /// Complete reports read at start-up to find newer waves of a resumed wave's channel.
    static let supersedingReportsRead = 4096

    /// A channel's audience of a wave: its push-to-start tokens for `start`, its update tokens otherwise.
    static func audienceKey(_ channel: String, event: String) -> String {
        channel + (event == "start" ? "\u{0}start" : "\u{0}update")
    }

    /// The newest wave id of each audience among `unfinished` and the waves that completed after the oldest of
    /// them (on another engine, or before the crash): an unfinished wave that is not its audience's newest
    /// ends superseded.
    func newestWaves(after unfinished: [UnfinishedWave]) -> [String: UInt64] {
        var newest: [String: UInt64] = [:]
        func saw(_ key: String, _ id: UInt64) { newest[key] = max(newest[key] ?? 0, id) }
        for wave in unfinished { saw(Self.audienceKey(wave.record.channel, event: wave.record.event), wave.record.id) }
        let oldest = unfinished.first?.record.id ?? 0
        do {
            let reports = try waveStore?.waveReports(
                bundleID: configuration.bundleID, environment: configuration.environment,
                limit: Self.supersedingReportsRead)
            for report in reports ?? [] where report.id > oldest {
                saw(Self.audienceKey(report.channel, event: report.event), report.id)
            }
        } catch {
            configuration.logger.error("durable waves: reading recent reports failed (\(error)); resuming without them")
        }
        return newest
    }

    /// Each shard's last durable checkpoint of `wave` (nil: that shard's part starts over), and how many times
    /// the wave restarted before. A wave that ran on a different number of shards starts over everywhere.
    func shardCheckpoints(of wave: UnfinishedWave) -> ([ShardCheckpoint?], restarts: Int) {
        let record = wave.record
        var checkpoints = [ShardCheckpoint?](repeating: nil, count: shards.count)
        var restarts = 0
        guard record.shardCount == shards.count else {
            if !wave.checkpoints.isEmpty {
                configuration.logger.warning(
                    "durable waves: wave \(record.id) ran on \(record.shardCount) shards, this engine has \(shards.count): it starts over"
                )
            }
            return (checkpoints, 0)
        }
        for stored in wave.checkpoints where stored.shard >= 0 && stored.shard < shards.count {
            do {
                let checkpoint = try ShardCheckpoint(decoding: stored.data)
                checkpoints[stored.shard] = checkpoint
                restarts = max(restarts, checkpoint.restarts)
            } catch {
                configuration.logger.error(
                    "durable waves: wave \(record.id), shard \(stored.shard): \(error); that shard's part starts over")
            }
        }
        return (checkpoints, restarts)
    }

    /// Picks up the waves an earlier engine left unfinished, oldest first: the newest wave of each channel
    /// (and audience) resumes from its shards' checkpoints; an older one, or one a newer wave of its channel
    /// followed, ends superseded for what is left; one past `freshUntil` ends expired.
    func resume(_ unfinished: [UnfinishedWave], onShards taking: [Int]? = nil) {
        let now = configuration.wallClock()
        let newest = newestWaves(after: unfinished)
        for wave in unfinished {
            let record = wave.record
            let stored: StoredWaveUpdate
            do {
                stored = try StoredWaveUpdate(
                    record, wallNow: now, wallMilliseconds: Self.wallMilliseconds(), monotonicNow: monotonicNow())
            } catch {
                configuration.logger.error("durable waves: wave \(record.id) \(error); it is not resumed")
                continue
            }
            var mode = Shard.ResumeMode.resume
            if newest[Self.audienceKey(record.channel, event: record.event)] != record.id {
                mode = .supersede
            } else if let freshUntil = record.freshUntil, freshUntil <= now {
                mode = .expire
            }
            enqueueResumed(wave, stored, mode: mode, onShards: taking)
            configuration.logger.notice(
                "durable waves: wave \(record.id) on \(record.channel) \(mode == .resume ? "resumes" : mode == .supersede ? "ends superseded" : "ends expired") after a restart"
            )
        }
    }

    /// Counts `wave` as unfinished again and hands it, with each shard's checkpoint, to the shards `taking` (all
    /// of them when nil), which resume, supersede or expire their part as `mode` says.
    private func enqueueResumed(
        _ wave: UnfinishedWave, _ stored: StoredWaveUpdate, mode: Shard.ResumeMode, onShards taking: [Int]?
    ) {
        let record = wave.record
        let (update, payload, publishedAt, deadline) = (
            stored.update, stored.payload, stored.publishedAt, stored.deadline
        )
        let (checkpoints, restarts) = shardCheckpoints(of: wave)
        // The broadcast half as published; its outcome comes from its shard's checkpoint.
        let broadcast = broadcastPart(of: record)
        control.withLock { state in
            let sequence = state.nextSequence
            state.nextSequence += 1
            let channel = state.channels.mention(record.channel, sequence: sequence)
            state.channels.setLatestTimestamp(
                max(state.latest[record.channel] ?? record.timestamp, record.timestamp), of: channel)
            let resumed = Wave(
                id: record.id, update: update, shardCount: shards.count, publishedAt: publishedAt, breaker: breaker,
                publishedAtWall: record.publishedAt, restarts: restarts + 1, broadcast: broadcast,
                participating: taking,
                onComplete: { [weak self] wave in self?.waveCompleted(wave) })
            // Its tallies start from the checkpoints (the shards store them before anything is sent).
            let published = PublishedUpdate(
                wave: resumed, update: update, channel: channel, sequence: sequence, payload: payload,
                deadline: deadline,
                channelPayload: stored.channelPayload)
            published.hasAlert = record.hasAlert
            unfinishedWaves.add(1, ordering: .acquiringAndReleasing)
            history.append(resumed)
            for index in taking ?? Array(shards.indices) {
                enqueueWaiting(
                    .resumeWave(ResumedWave(update: published, checkpoint: checkpoints[index], mode: mode)),
                    shard: index)
            }
        }
    }
}

import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

extension Shard {
    // MARK: - Shutdown

    /// After the worker thread is gone (joined): starts queued waves, then ends every outcome still open as
    /// failed (Shutdown; held bad-token answers with their own reason, the tokens kept), so every wave
    /// completes and every targeted token is accounted for.
    func abandonAfterStop() {
        ownership.handOver()
        let now = monotonicNow()
        service(now: now, commandLimit: .max, workUntil: .max)
        failQueuedSingles()
        if window.heldCount > 0 { releaseHeld(prune: false, resend: false, now: now) }
        endOpenOutcomes()
    }

    /// After the worker thread is gone, for a graceful shutdown of a durable engine: starts queued waves, fails
    /// queued single pushes, and returns every unfinished wave's progress (the waves stay unfinished: the next
    /// engine resumes them). `now`: the shard's clock (a schedule test passes its own, which never runs back).
    func checkpointAfterStop(now: UInt64 = monotonicNow()) -> [WaveCheckpoint] {
        ownership.handOver()
        let writer = checkpoints
        checkpoints = nil  // nothing more goes to the writer: the engine writes what this returns
        service(now: now, commandLimit: .max, workUntil: .max)
        checkpoints = writer
        failQueuedSingles()
        return finalCheckpoints()
    }

    /// Every unfinished wave's progress as a final checkpoint (nothing more of it goes out from this shard): what
    /// a graceful stop and a hand-over leave for the next holder.
    func finalCheckpoints() -> [WaveCheckpoint] {
        let savedAt = Int64(time(nil)) * 1000
        return waves.indices.compactMap { slot in
            guard let wave = waves[slot] else { return nil }
            return WaveCheckpoint(
                waveID: wave.update.wave.id, shard: index, data: progress(of: slot, final: true).encoded(),
                savedAt: savedAt)
        }
    }

    func failQueuedSingles() {
        for index in nextReadySingle..<readySingles.count {
            let single = readySingles[index]
            single.completion(
                PushResult(
                    cookie: single.job.cookie, token: single.job.token, disposition: .failed(.shutdown),
                    apnsID: single.job.apnsID ?? PushIdentifier(), resends: 0, latencyNanoseconds: 0, worker: self.index
                ))
        }
        readySingles.removeAll()
        nextReadySingle = 0
    }

    func endOpenOutcomes() {
        let reason = FailureReason.shutdown
        for channel in broadcastLanes.waitingChannels {
            let slot = broadcastLanes.modify(channel) { lane in
                defer { lane.waiting = 0 }
                return lane.waiting - 1
            }
            waves[slot]?.update.wave.broadcast?.finish(.failed, reason: reason)
            settle(slot)
        }
        for audienceIndex in audiences.indices {
            for member in audiences[audienceIndex].owed.indices {
                let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
                guard owedSlot >= 0 else { continue }
                audiences[audienceIndex].owed[member] = 0
                waves[owedSlot]!.tally.recordFailure(reason: reason)
                settle(owedSlot)
            }
            if audiences[audienceIndex].cursorActive { endCursor(audienceIndex) }
        }
        for slot in waves.indices {
            guard let wave = waves[slot] else { continue }
            assert(wave.outstanding >= wave.unvisited, "in-flight pushes remain after the client stopped")
            finishRest(of: slot, as: .failed(reason: reason))
        }
    }
}

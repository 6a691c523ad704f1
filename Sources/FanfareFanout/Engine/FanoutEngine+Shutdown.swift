import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

extension FanoutEngine {
    // MARK: - Shutdown

    /// A `push` caller is past its enqueue. The last one after a shutdown wakes `waitForEnqueuingPushes`: the
    /// shutdown flag's store and this count's decrement are sequentially consistent, so one of the two sides
    /// sees the other.
    func enqueueFinished() {
        let left = enqueuingPushes.subtract(1, ordering: .sequentiallyConsistent).newValue
        if left == 0 && isShutDown.load(ordering: .sequentiallyConsistent) { enqueuingDone.post() }
    }

    /// After setting the shutdown flag: waits for the `push` callers that passed its check to finish enqueuing.
    func waitForEnqueuingPushes() {
        while enqueuingPushes.load(ordering: .sequentiallyConsistent) > 0 {
            enqueuingDone.wait(until: monotonicNow() &+ 10_000_000)
        }
    }

    /// Stops the workers; every wave completes (outcomes still open end as failed: Shutdown) and every
    /// invalidation already reported is written to the registry. A `publish`, `register` or `push` racing it
    /// either is refused with `.shutDown` or gets its outcome.
    public func shutdown() {
        guard !isShutDown.exchange(true, ordering: .sequentiallyConsistent) else { return }
        channelManager?.shutdown()
        // Control commands are queued under the lock after checking the flag: once we have held it, no more come.
        control.withLock { _ in }
        waitForEnqueuingPushes()
        guard let checkpointWriter else {
            client.shutdown()
            for shard in shards { shard.abandonAfterStop() }
            registryWorker.stop()
            return
        }
        // Durable waves: send no more wave pushes, let the ones out be answered (so none is resent), then record
        // where every unfinished wave is. The next engine on the store resumes them.
        for shard in shards {
            shard.stopWavesRequested.store(true, ordering: .relaxed)
            shard.inFlight.store(-1, ordering: .relaxed)
            client.kickProducer(worker: shard.index)
        }
        // Each shard posts `drained` from its loop once nothing of it is out (its loop runs at least every 5 ms
        // while stopping); the bounded waits only re-kick a worker that slept through the first kick.
        let deadline = monotonicNow() &+ Self.nanoseconds(configuration.shutdownDrainTimeout)
        for shard in shards {
            while shard.inFlight.load(ordering: .acquiring) != 0 && monotonicNow() < deadline {
                shard.drained.wait(until: min(deadline, monotonicNow() &+ 50_000_000))
                client.kickProducer(worker: shard.index)
            }
        }
        client.shutdown()
        checkpointWriter.stop()  // after what shards handed it is written
        checkpointWriter.kick = nil  // the workers are gone
        var final: [WaveCheckpoint] = []
        for shard in shards { final += shard.checkpointAfterStop() }
        // Then what the shards' last service handed over (a wave that completed there) and the last checkpoints.
        if !checkpointWriter.writeRemaining(final) {
            configuration.logger.error(
                "durable waves: the last checkpoints could not be written (\(checkpointWriter.lastError ?? "?")); the next start resumes from earlier ones"
            )
        }
        for wave in history.recent where !wave.isComplete { wave.interrupt() }
        registryWorker.stop()
    }

    /// `shutdown()` from an async caller: the drain and the last checkpoints are waited for on a thread of their
    /// own, so the caller's cooperative thread is free meanwhile.
    public func shutdown() async {
        await BlockingHandOff.run(name: "fanout-stop") { self.shutdown() }
    }

    /// Tests: leaves the store as a crash (kill -9) would. The checkpoint thread stops writing at once, the
    /// workers stop, and nothing is accounted or checkpointed any more: the waves stay unfinished in memory and
    /// in the store, at their last durable checkpoints.
    func abandonForTesting() {
        guard !isShutDown.exchange(true, ordering: .sequentiallyConsistent) else { return }
        control.withLock { _ in }
        waitForEnqueuingPushes()
        checkpointWriter?.abandon()
        client.shutdown()
        registryWorker.stop()
    }
}

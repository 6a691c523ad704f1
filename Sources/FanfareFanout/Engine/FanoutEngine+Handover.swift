import FanfareClient
import FanfareCore
import FanfareIO
import Synchronization

/// Several nodes: handing shards to another node (rebalancing, docs/deployment.md "Rebalancing").
extension FanoutEngine {
    /// What `handOverShards` did with each shard.
    public struct Handover: Sendable, Equatable {
        /// Drained and checkpointed: the node taking them resumes exactly where these stopped.
        public var clean: [Int] = []
        /// Not drained within the time given: stopped anyway, so the taker resumes from their last durable
        /// checkpoint and may resend what was out after it (each resend with its first apns-id).
        public var forced: [Int] = []
    }

    /// Hands held shards over: each stops sending wave pushes, lets the ones out be answered, writes a last
    /// checkpoint of every unfinished wave and waits until it is durable (at most `timeout` in all), then empties
    /// its tables; the shard is no longer held, and the caller lets its lease go. A shard handed over cleanly may
    /// be taken again later (it loads afresh); one forced is stale until the node restarts (`staleShards`).
    public func handOverShards(_ indices: [Int], timeout: Duration) -> Handover {
        let requests: [(Int, ShardRelease)] = control.withLock { state in
            guard !isShutDown.load(ordering: .acquiring) else { return [] }
            return Set(indices).sorted().compactMap { index in
                guard shards.indices.contains(index), state.held[index] else { return nil }
                let request = ShardRelease()
                enqueueWaiting(.release(request), shard: index)
                return (index, request)
            }
        }
        let deadline = monotonicNow() &+ Self.nanoseconds(timeout)
        var handover = Handover()
        for (index, request) in requests {
            // The shard polls every 5 ms while releasing; the bounded waits only re-kick a sleeping worker.
            while !request.finished && monotonicNow() < deadline {
                request.done.wait(until: min(deadline, monotonicNow() &+ 50_000_000))
                kick(shard: index)
            }
            shards[index].sendUntil.store(0, ordering: .releasing)
            control.withLock { $0.held[index] = false }
            if request.finished {
                handover.clean.append(index)
            } else {
                request.cancel()
                kick(shard: index)
                handover.forced.append(index)
            }
        }
        feed.withLock { feed in for index in handover.clean + handover.forced { feed.heldSince[index] = nil } }
        if !handover.clean.isEmpty { configuration.logger.notice("leases: handed over shards \(handover.clean)") }
        if !handover.forced.isEmpty {
            configuration.logger.warning(
                "leases: shards \(handover.forced) did not drain within \(timeout); handed over from their last durable checkpoints"
            )
        }
        return handover
    }

    /// Shards whose hand-over was forced: their tables here are stale, so this engine does not take them again.
    public var staleShards: Set<Int> {
        Set(shards.indices.filter { shards[$0].stale.load(ordering: .acquiring) })
    }
}

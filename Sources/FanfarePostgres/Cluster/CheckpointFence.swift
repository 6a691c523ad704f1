import Synchronization

/// The leases a node's checkpoint writes are fenced by: `saveCheckpoints` writes a shard's checkpoint only while
/// the database still gives that shard's lease to this node at the epoch it holds; a refused shard is reported
/// through `onRefused` (the node lost it and must stop sending it).
public final class CheckpointFence: Sendable {
    struct Leases: Sendable {
        var node: String
        var shards: [Int] = []
        var epochs: [Int64] = []
    }

    private let state: Mutex<Leases>
    private let onRefused: @Sendable (Set<Int>) -> Void

    public init(node: String, onRefused: @escaping @Sendable (Set<Int>) -> Void) {
        state = Mutex(Leases(node: node))
        self.onRefused = onRefused
    }

    /// The leases held now (replaces the previous set).
    public func hold(_ leases: [ShardLease]) {
        state.withLock { state in
            state.shards = leases.map(\.shard)
            state.epochs = leases.map(\.epoch)
        }
    }

    var leases: Leases { state.withLock { $0 } }

    func refused(_ shards: Set<Int>) { onRefused(shards) }
}

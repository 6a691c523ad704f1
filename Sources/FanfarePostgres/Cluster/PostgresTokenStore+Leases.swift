import FanfareCore
import FanfareStorage
import Logging
import PostgresNIO

/// A shard lease this node holds: the epoch it got it with.
public struct ShardLease: Sendable, Equatable {
    public var shard: Int
    public var epoch: Int64
    public init(shard: Int, epoch: Int64) {
        self.shard = shard
        self.epoch = epoch
    }
}

/// The nodes a heartbeat saw.
public struct ClusterMembership: Sendable, Equatable {
    /// Nodes seen within the window that take shards (this one included): a node that lost a lease takes
    /// none until it restarts, so the others' fair share counts it out.
    public var live: Int
    /// Of those, the ones that started (this run of them) at least a window ago: past the join window a node
    /// waits by default, so ready to take shards. Holders hand shards over only to settled nodes (`ClusterNode`).
    public var settled: Int
    /// How long before this heartbeat the node's previous one was, on the database's clock (nil: its first).
    /// Longer than a lease means that every node may have been away (the database was out of reach or stalled):
    /// the others' heartbeats are just as old, so they look dead until they come back.
    public var sincePrevious: Duration?

    public init(live: Int, settled: Int, sincePrevious: Duration? = nil) {
        self.live = live
        self.settled = settled
        self.sincePrevious = sincePrevious
    }
}

/// Shard leases on the database's clock (docs/deployment.md, "Leases"): a node takes expired leases (raising
/// their epoch), renews the ones it holds, and lets them go when it stops. Each call is one transaction.
extension PostgresTokenStore {
    /// Fixes the cluster's shard count on first use (creating a lease row per shard); a different count later is
    /// refused: every token's shard depends on it.
    public func joinCluster(shardCount: Int) throws(RegistryError) {
        guard shardCount >= 1 && shardCount <= 4096 else {
            throw .storage("the shard count must be in 1...4096 (got \(shardCount))")
        }
        let stored = try inTransaction("joining the cluster with \(shardCount) shards") { connection, logger -> Int in
            try await connection.query(
                "SELECT pg_advisory_xact_lock(\(PostgresSchema.changeLockSpace), -3)", logger: logger)
            try await connection.query(
                "INSERT INTO cluster_config (shard_count) VALUES (\(Int32(shardCount))) ON CONFLICT (singleton) DO NOTHING",
                logger: logger)
            var count = shardCount
            for try await value in try await connection.query("SELECT shard_count FROM cluster_config", logger: logger)
                .decode(Int32.self)
            {
                count = Int(value)
            }
            if count == shardCount {
                try await connection.query(
                    """
                    INSERT INTO shard_leases (shard) SELECT generate_series(0, \(Int32(shardCount - 1)))
                    ON CONFLICT (shard) DO NOTHING
                    """, logger: logger)
            }
            return count
        }
        guard stored == shardCount else {
            throw .storage(
                "this database's cluster has \(stored) shards; this node was started with \(shardCount): start every node "
                    + "with --shards \(stored)")
        }
    }

    /// Records that `node` is alive, the run of it whose sessions these are (`incarnation`; nil: unchanged) and
    /// how far it has read the change feed (nil: unchanged); returns the nodes seen within `window`. A new
    /// incarnation (the node restarted) starts its `started_at` again.
    @discardableResult
    public func heartbeat(
        node: String, incarnation: NodeIncarnation? = nil, window: Duration, feedPosition: Int64? = nil,
        accepting: Bool = true
    ) throws(RegistryError) -> ClusterMembership {
        let seconds = Self.seconds(window)
        let incarnation = incarnation?.hex
        return try inTransaction("recording node \(node)'s heartbeat") { connection, logger -> ClusterMembership in
            var sincePrevious: Duration?
            for try await seconds in try await connection.query(
                "SELECT extract(epoch FROM now() - seen_at)::float8 FROM cluster_nodes WHERE node = \(node)",
                logger: logger
            ).decode(Double.self) {
                sincePrevious = .milliseconds(Int64(max(0, seconds) * 1000))
            }
            try await connection.query(
                """
                INSERT INTO cluster_nodes (node, started_at, seen_at, feed_position, incarnation, accepting)
                VALUES (\(node), now(), now(), \(feedPosition), \(incarnation), \(accepting))
                ON CONFLICT (node) DO UPDATE SET seen_at = now(), accepting = EXCLUDED.accepting,
                    started_at = CASE WHEN EXCLUDED.incarnation IS NOT NULL
                                       AND EXCLUDED.incarnation IS DISTINCT FROM cluster_nodes.incarnation
                                      THEN now() ELSE cluster_nodes.started_at END,
                    feed_position = coalesce(EXCLUDED.feed_position, cluster_nodes.feed_position),
                    incarnation = coalesce(EXCLUDED.incarnation, cluster_nodes.incarnation)
                """, logger: logger)
            var membership = ClusterMembership(live: 1, settled: 1, sincePrevious: sincePrevious)
            for try await (live, settled) in try await connection.query(
                """
                SELECT count(*), count(*) FILTER (WHERE started_at <= now() - make_interval(secs => \(seconds)))
                FROM cluster_nodes WHERE seen_at > now() - make_interval(secs => \(seconds)) AND accepting
                """, logger: logger
            ).decode((Int64, Int64).self) {
                membership = ClusterMembership(
                    live: max(1, Int(live)), settled: max(1, Int(settled)), sincePrevious: sincePrevious)
            }
            return membership
        }
    }

    /// Takes up to `limit` leases that expired (or were never held), raising their epochs; each runs for
    /// `duration` from the database's now. Shards in `excluding` are left for other nodes.
    public func acquireLeases(
        node: String, limit: Int, duration: Duration, excluding: Set<Int> = []
    ) throws(RegistryError) -> [ShardLease] {
        guard limit > 0 else { return [] }
        let seconds = Self.seconds(duration)
        let excluded = excluding.map { Int32($0) }
        return try inTransaction("taking shard leases for \(node)") { connection, logger -> [ShardLease] in
            var taken: [ShardLease] = []
            for try await (shard, epoch) in try await connection.query(
                """
                UPDATE shard_leases SET node = \(node), epoch = epoch + 1, expires_at = now() + make_interval(secs =>
                    \(seconds))
                WHERE shard IN (
                    SELECT shard FROM shard_leases
                    WHERE expires_at <= now() AND shard <> ALL(\(excluded)::integer[])
                    ORDER BY shard LIMIT \(Int64(limit))
                    FOR UPDATE SKIP LOCKED)
                RETURNING shard, epoch
                """, logger: logger
            ).decode((Int32, Int64).self) {
                taken.append(ShardLease(shard: Int(shard), epoch: epoch))
            }
            return taken.sorted { $0.shard < $1.shard }
        }
    }

    /// Renews the leases this node holds at these epochs for `duration` from the database's now; returns the
    /// ones still held (a lease missing from the answer went to another node).
    public func renewLeases(
        node: String, _ leases: [ShardLease], duration: Duration
    ) throws(RegistryError) -> [ShardLease] {
        guard !leases.isEmpty else { return [] }
        let seconds = Self.seconds(duration)
        let shards = leases.map { Int32($0.shard) }
        let epochs = leases.map(\.epoch)
        return try inTransaction("renewing \(leases.count) shard leases of \(node)") {
            connection, logger -> [ShardLease] in
            var kept: [ShardLease] = []
            for try await (shard, epoch) in try await connection.query(
                """
                UPDATE shard_leases AS l SET expires_at = now() + make_interval(secs => \(seconds))
                FROM unnest(\(shards)::integer[], \(epochs)::bigint[]) AS mine (shard, epoch)
                WHERE l.shard = mine.shard AND l.epoch = mine.epoch AND l.node = \(node)
                RETURNING l.shard, l.epoch
                """, logger: logger
            ).decode((Int32, Int64).self) {
                kept.append(ShardLease(shard: Int(shard), epoch: epoch))
            }
            return kept.sorted { $0.shard < $1.shard }
        }
    }

    /// Ends these leases now: other nodes take the shards at their next look. `leaving`: the node stops (its
    /// row goes too, so the others' fair share counts it out at once); false: a hand-over while it runs on.
    public func releaseLeases(node: String, _ leases: [ShardLease], leaving: Bool = true) throws(RegistryError) {
        guard !leases.isEmpty else { return }
        let shards = leases.map { Int32($0.shard) }
        let epochs = leases.map(\.epoch)
        try inTransaction("releasing \(leases.count) shard leases of \(node)") { connection, logger in
            try await connection.query(
                """
                UPDATE shard_leases AS l SET expires_at = now()
                FROM unnest(\(shards)::integer[], \(epochs)::bigint[]) AS mine (shard, epoch)
                WHERE l.shard = mine.shard AND l.epoch = mine.epoch AND l.node = \(node)
                """, logger: logger)
            if leaving { try await connection.query("DELETE FROM cluster_nodes WHERE node = \(node)", logger: logger) }
        }
    }

    /// Every shard's lease as the database has it now (operators, tests): shard → (node, epoch, expired).
    public func leaseTable() throws(RegistryError) -> [(shard: Int, node: String?, epoch: Int64, expired: Bool)] {
        try inTransaction("reading the shard leases", begin: Self.beginSnapshotRead) { connection, logger in
            var rows: [(shard: Int, node: String?, epoch: Int64, expired: Bool)] = []
            for try await (shard, node, epoch, expired) in try await connection.query(
                "SELECT shard, node, epoch, expires_at <= now() FROM shard_leases ORDER BY shard", logger: logger
            ).decode((Int32, String?, Int64, Bool).self) {
                rows.append((Int(shard), node, epoch, expired))
            }
            return rows
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

import FanfareStorage
import Logging
import PostgresNIO

/// A node incarnation whose sessions a live node ended: its heartbeat was older than a lease, so its leases had
/// expired too and it was fenced from its shards already; ending its sessions frees the locks it held.
public struct FencedNode: Sendable, Equatable {
    public var node: String
    /// As `cluster_nodes` has it (a `NodeIncarnation`'s hex).
    public var incarnation: String
    /// Sessions ended now.
    public var sessionsEnded: Int
    /// Sessions this database role may not end (another role's without `pg_signal_backend`, or a superuser's):
    /// they keep their locks until the node resumes or dies. Run every node as the same role.
    public var sessionsRefused: Int

    public init(node: String, incarnation: String, sessionsEnded: Int, sessionsRefused: Int) {
        self.node = node
        self.incarnation = incarnation
        self.sessionsEnded = sessionsEnded
        self.sessionsRefused = sessionsRefused
    }
}

/// Fencing by lease (issue 22): a node stopped inside a transaction (SIGSTOP, a frozen VM) keeps its row and
/// advisory locks, and the other nodes' checkpoints, completions and API calls wait behind them. A live node ends
/// the sessions of such a node once its heartbeat is older than a lease. A client that is merely slow keeps its
/// session: a node that still heartbeats, and every client that is no node (`fanfare import`, plain stores).
extension PostgresTokenStore {
    /// Ends the sessions in this database of every node incarnation whose heartbeat (`cluster_nodes.seen_at`, on
    /// the database's clock) is older than `silence`, except `own`'s; returns those that had sessions. A session
    /// names its incarnation in `application_name` (`NodeIncarnation.sessionName`); `pg_terminate_backend`
    /// ends it (allowed on the sessions of one's own role, docs/deployment.md), rolling back its transaction.
    public func fenceStalledNodes(
        sparing own: NodeIncarnation, silentLongerThan silence: Duration
    )
        throws(RegistryError) -> [FencedNode]
    {
        let seconds = Self.seconds(silence)
        let prefix = NodeIncarnation.sessionNamePrefix
        return try inTransaction("ending the sessions of stalled nodes") { connection, logger -> [FencedNode] in
            var fenced: [FencedNode] = []
            // A session this role may not signal (PostgreSQL's own rule) is counted, not signalled: signalling it
            // would fail the whole statement, and with it the fencing of every other node.
            for try await (node, incarnation, ended, refused) in try await connection.query(
                """
                WITH stale AS (
                    SELECT node, incarnation FROM cluster_nodes
                    WHERE incarnation IS NOT NULL AND incarnation <> \(own.hex)
                      AND seen_at < now() - make_interval(secs => \(seconds))
                ), sessions AS (
                    SELECT s.node, s.incarnation, a.pid,
                           (NOT r.rolsuper OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))
                           AND (pg_has_role(a.usesysid, 'USAGE') OR pg_has_role('pg_signal_backend', 'USAGE')) AS
                               allowed
                    FROM stale AS s
                    JOIN pg_stat_activity AS a ON a.application_name = \(prefix) || s.incarnation
                    JOIN pg_roles AS r ON r.oid = a.usesysid
                    WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
                )
                SELECT node, incarnation,
                       count(*) FILTER (WHERE CASE WHEN allowed THEN pg_terminate_backend(pid) ELSE false END),
                       count(*) FILTER (WHERE NOT allowed)
                FROM sessions GROUP BY node, incarnation ORDER BY node, incarnation
                """, logger: logger
            ).decode((String, String, Int64, Int64).self) {
                fenced.append(
                    FencedNode(
                        node: node, incarnation: incarnation, sessionsEnded: Int(ended), sessionsRefused: Int(refused)))
            }
            return fenced
        }
    }
}

import FanfareCore
import FanfareStorage
import Logging
import PostgresNIO

/// What changed in the registry after a feed position (`token_changes`, written by triggers in the same
/// transaction as the change): registrations as they are now, and tokens no longer registered.
public struct TokenChangePage: Sendable {
    public var registered: [TokenRegistration] = []
    public var removed: [DeviceToken] = []
    /// The feed position after this page.
    public var last: Int64
    /// False when the page was full: read again from `last`.
    public var isComplete: Bool
}

extension PostgresTokenStore {
    /// The channel the change-feed triggers notify on (payload empty).
    public static let tokenChannel = "fanfare_tokens"

    /// The newest feed position (0: nothing logged yet): a node that loads its shards after reading it, then
    /// follows the feed from it, misses nothing (what it reads twice, it applies twice: the same outcome).
    public func lastTokenChange() throws(RegistryError) -> Int64 {
        try inTransaction("reading the registry's change feed position", begin: Self.beginSnapshotRead) {
            connection, logger in
            var last: Int64 = 0
            for try await value in try await connection.query(
                "SELECT coalesce(max(seq), 0) FROM token_changes", logger: logger
            )
            .decode(Int64.self) {
                last = value
            }
            return last
        }
    }

    /// Changes of one app after `position`, oldest first, at most `limit` log rows. A token changed several
    /// times appears once, as it is now (registered with its current row, or removed). With `shards`, only the
    /// changes of those shards (of `shardCount`); the page's end still moves past the others.
    public func tokenChanges(
        after position: Int64, bundleID: String, environment: APNsEnvironment, limit: Int,
        shards: Set<Int>? = nil, of shardCount: Int = 1
    ) throws(RegistryError) -> TokenChangePage {
        let wanted: [Int64]? = shards.map { $0.sorted().map(Int64.init) }
        let count = Int64(max(1, shardCount))
        return try inTransaction("reading the registry's changes after \(position)", begin: Self.beginSnapshotRead) {
            connection, logger in
            var page = TokenChangePage(last: position, isComplete: true)
            var rows = 0
            var seen = Set<ByteBuffer>()
            // One pass: each logged token with its row as it is now (NULLs: no longer registered in this app).
            for try await (
                seq, token, kind, activityID, deviceID, attributesType, frequent, supportsBroadcast, channels,
                createdAt, lastSeenAt
            ) in try await connection.query(
                """
                SELECT c.seq, c.token, t.kind, t.activity_id, t.device_id, t.attributes_type, t.frequent,
                       t.supports_broadcast, t.channels, t.created_at, t.last_seen_at
                FROM token_changes AS c JOIN apps AS a ON a.id = c.app_id
                     LEFT JOIN tokens AS t ON t.token = c.token AND t.app_id = c.app_id
                WHERE c.seq > \(position) AND a.bundle_id = \(bundleID) AND a.environment =
                    \(Int16(environment.rawValue))
                  AND (\(wanted)::bigint[] IS NULL OR c.shard_hash IS NULL OR
                       ((c.shard_hash::numeric + CASE WHEN c.shard_hash < 0 THEN 18446744073709551616 ELSE 0 END)
                         % \(count))::bigint = ANY(\(wanted)::bigint[]))
                ORDER BY c.seq LIMIT \(Int64(limit))
                """, logger: logger
            ).decode(
                (Int64, ByteBuffer, Int16?, String?, String?, String?, Bool?, Bool?, [String]?, Int64?, Int64?).self)
            {
                rows += 1
                page.last = seq
                guard seen.insert(token).inserted else { continue }
                guard let kind, let frequent, let supportsBroadcast, let channels, let createdAt, let lastSeenAt else {
                    page.removed.append(try Self.token(token))
                    continue
                }
                guard let kindValue = UInt8(exactly: kind), let tokenKind = TokenKind(rawValue: kindValue) else {
                    throw RegistryError.storage("the database holds a token of unknown kind \(kind)")
                }
                page.registered.append(
                    TokenRegistration(
                        token: try Self.token(token), kind: tokenKind, activityID: activityID, deviceID: deviceID,
                        attributesType: attributesType, bundleID: bundleID, environment: environment,
                        frequentUpdates: frequent, supportsBroadcast: supportsBroadcast, channels: channels,
                        createdAt: createdAt, lastSeenAt: lastSeenAt))
            }
            page.isComplete = rows < limit
            if page.isComplete && wanted != nil {
                // Past the other shards' changes too. Sequence numbers become visible in commit order (the log's
                // lock), so this snapshot's newest is a position nothing will later appear before.
                for try await newest in try await connection.query(
                    "SELECT coalesce(max(seq), \(position)) FROM token_changes WHERE seq > \(position)", logger: logger
                ).decode(Int64.self) {
                    page.last = max(page.last, newest)
                }
            }
            return page
        }
    }

    /// Forgets feed rows older than `age`, except those a node seen within `liveWithin` has not read yet (its
    /// heartbeat's `feedPosition`): a node whose feed thread fell behind while its leases stayed renewed must
    /// still find every change it has not applied. A node that was away longer has lost its leases, and loads
    /// its shards afresh when it takes them again. Returns how many rows went.
    @discardableResult
    public func pruneTokenChanges(olderThan age: Duration, liveWithin: Duration? = nil) throws(RegistryError) -> Int {
        let seconds = Self.seconds(age)
        let liveSeconds = liveWithin.map(Self.seconds)
        return try inTransaction("pruning the registry's change feed") { connection, logger in
            var deleted = 0
            for try await count in try await connection.query(
                """
                WITH gone AS (
                    DELETE FROM token_changes
                    WHERE logged_at < now() - make_interval(secs => \(seconds))
                      AND (\(liveSeconds)::float8 IS NULL OR seq <= coalesce(
                          (SELECT min(feed_position) FROM cluster_nodes
                           WHERE seen_at > now() - make_interval(secs => \(liveSeconds)::float8) AND feed_position IS
                               NOT NULL),
                          9223372036854775807))
                    RETURNING 1)
                SELECT count(*) FROM gone
                """, logger: logger
            ).decode(Int64.self) {
                deleted = Int(count)
            }
            return deleted
        }
    }
}

extension PostgresTokenStore {
    /// The registrations of some shards, filtered by the database (`shard_hash`, written at registration);
    /// rows without one (registered before migration 4) are read and filtered here.
    public func forEachRegistration(
        bundleID: String, environment: APNsEnvironment, shards: Set<Int>, of shardCount: Int,
        _ body: (TokenRegistration) throws -> Void
    ) throws(RegistryError) {
        let count = UInt64(max(1, shardCount))
        let wanted = shards.sorted().map { Int64($0) }
        var after: ByteBuffer? = nil
        var callbackError: (any Error)?
        scan: while true {
            let cursor = after
            let page = try inTransaction(
                "loading shards \(wanted) of \(bundleID) (\(environment))", begin: Self.beginSnapshotRead
            ) {
                connection, logger -> [TokenRegistration] in
                var page: [TokenRegistration] = []
                // The unsigned hash modulo the shard count, from its signed bit pattern.
                for try await row in try await connection.query(
                    """
                    SELECT t.token, t.kind, t.activity_id, t.device_id, t.attributes_type, t.frequent,
                           t.supports_broadcast, t.channels, t.created_at, t.last_seen_at
                    FROM tokens t JOIN apps a ON a.id = t.app_id
                    WHERE a.bundle_id = \(bundleID) AND a.environment = \(Int16(environment.rawValue))
                      AND (t.shard_hash IS NULL OR
                           ((t.shard_hash::numeric + CASE WHEN t.shard_hash < 0 THEN 18446744073709551616 ELSE 0 END)
                             % \(Int64(count)))::bigint = ANY(\(wanted)))
                      AND (\(cursor)::bytea IS NULL OR t.token > \(cursor)::bytea)
                    ORDER BY t.token LIMIT \(Self.readPageRows)
                    """, logger: logger)
                {
                    page.append(try Self.registration(row, bundleID: bundleID, environment: environment))
                }
                return page
            }
            for registration in page where shards.contains(Int(registration.token.shardHash % count)) {
                do { try body(registration) } catch {
                    callbackError = error
                    break scan
                }
            }
            guard page.count == Self.readPageRows, let last = page.last else { break }
            after = Self.bytes(last.token)
        }
        if let callbackError {
            if let registryError = callbackError as? RegistryError { throw registryError }
            throw .storage("loading shards \(wanted) stopped: the callback threw \(callbackError)")
        }
    }
}

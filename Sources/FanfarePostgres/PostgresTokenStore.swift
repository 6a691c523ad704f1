import FanfareCore
import FanfareStorage
import Foundation
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// The registry on PostgreSQL, so several `fanfare serve` nodes share one (issue 14). The same `TokenStore`
/// contract as `SQLiteTokenStore`, with its replacement rules.
///
/// Threads: calls block the calling thread while the work runs on the connection's event loop; call it from the
/// engine's registry thread or checkpoint writer, never from an event loop. One connection, calls serialised.
/// Durability: every mutating call commits before it returns (PostgreSQL's synchronous commit).
///
/// Also the `WaveStore` (PostgresTokenStore+WaveStore.swift), the `BroadcastLinkStore` and the ledger
/// (Broadcast/, Ledger/).
public final class PostgresTokenStore: TokenStore, @unchecked Sendable {
    /// Registrations per COPY data message (the server takes it in pieces; ours stay a few MiB).
    static let copyChunkRows = 4_096
    /// Rows per page when streaming an app's registrations.
    static let readPageRows = 10_000
    /// The schema version this Fanfare migrates a database to (`schema_version`).
    public static var schemaVersion: Int { PostgresSchema.latestVersion }

    /// The connection calls use; replaced by a new one when it was lost (see `serialised`). Guarded by `lock`.
    private var current: PostgresConnection?
    /// Opens this store's connections (TLS, password, TCP keepalive: Connection/).
    private let connector: PostgresConnector
    private let url: String
    private let executor: EventLoopTaskExecutor
    let logger: Logger
    /// Serialises calls: one connection runs one transaction at a time. Also guards `current`, `appIDs`,
    /// `connectionLost` and `isClosed`.
    private let lock = NSLock()
    /// (bundle id, environment) → apps.id; rows are never deleted, so a cached id stays right.
    var appIDs: [AppKey: Int64] = [:]
    /// Set by `run` when a call failed because the connection went (the server closed it, restarted, or the
    /// network failed): the next call starts on a new connection.
    private var connectionLost = false
    private var isClosed = false
    /// Several nodes: the leases this node's checkpoints are fenced by (`CheckpointFence`); nil: unfenced.
    public var checkpointFence: CheckpointFence? {
        get { fenceStorage.withLock { $0 } }
        set { fenceStorage.withLock { $0 = newValue } }
    }
    private let fenceStorage = Mutex<CheckpointFence?>(nil)
    /// Connections opened so far (the first included); tests read it.
    public private(set) var connectionsOpened = 0
    /// Registrations may run on this many connections at once (this store's and, opened when first needed,
    /// the connections of `lanes`): PostgreSQL writes one batch on one core, so two batches on two connections
    /// take two.
    public let registrationConnections: Int
    /// Stores of their own (each one connection) that take registrations while this one is busy.
    private let lanes = Mutex<[PostgresTokenStore]>([])
    /// The cluster node run whose sessions these are (its lanes' too); nil: a client that is no node (`fanfare
    /// import`), whose sessions no node ever ends.
    public let incarnation: NodeIncarnation?
    /// Registrations running on this store's connection or waiting for it.
    private let registering = Atomic<Int>(0)
    /// The longest a call may wait for PostgreSQL's answer before it fails `.unavailable` and its connection is
    /// replaced: without it a frozen server or a silent network loss holds the caller, and every caller queued
    /// behind this store's lock, for as long as TCP keeps trying (many minutes). Each call is bounded work (a
    /// page, a batch, a transaction); migrations at open are not limited.
    public let callTimeout: Duration
    /// How long the ledger keeps the history of ended registrations (ms); pruned by `retire(createdBefore:)`.
    public let historyRetentionMilliseconds: Int64
    /// The wall clock (UNIX ms) that stamps ledger history (tests pass their own).
    let clock: @Sendable () -> Int64

    struct AppKey: Hashable {
        var bundleID: String
        var environment: APNsEnvironment
    }

    /// Connects to `url` (`postgres://user[:password]@host[:port]/database[?sslmode=…&sslrootcert=…]`, the password
    /// from the URL, else as libpq finds it in `environment`: `PostgresPassword`), creating or migrating the tables.
    /// A cluster node passes its `incarnation`: every session of the store names it, so that a live node can end
    /// them if this one stalls (`fenceStalledNodes`).
    public init(
        url: String, registrationConnections: Int = 2, incarnation: NodeIncarnation? = nil,
        callTimeout: Duration = .seconds(60), environment: PostgresEnvironment = .current,
        historyRetention: Duration = LedgerRetention.default,
        clock: @escaping @Sendable () -> Int64 = PostgresTokenStore.wallClockMilliseconds,
        logger: Logger = Logger(label: "fanfare.postgres")
    ) throws(RegistryError) {
        self.logger = logger
        self.callTimeout = callTimeout
        historyRetentionMilliseconds = LedgerRetention.milliseconds(historyRetention)
        self.clock = clock
        self.url = url
        self.registrationConnections = max(1, registrationConnections)
        self.incarnation = incarnation
        connector = try Self.connector(url, incarnation: incarnation, environment: environment)
        executor = EventLoopTaskExecutor(PostgresConnection.defaultEventLoopGroup.any())
        let connection = try connect()
        do {
            try executor.run { try await PostgresSchema.migrate(connection, logger: logger) }
        } catch {
            // Closed and waited for: PostgresConnection asserts in its deinit that it was closed.
            isClosed = true
            try? connection.close().wait()
            throw .storage("preparing the registry tables in \(Self.redacted(url)): \(Self.describe(error))")
        }
        current = connection
    }

    deinit {
        // Waited for (PostgresConnection asserts in its deinit that it was closed), unless released on its own
        // event loop, where waiting would deadlock.
        guard !isClosed, let current else { return }
        let closed: EventLoopFuture<Void> = current.close()
        if !current.eventLoop.inEventLoop { try? closed.wait() }
    }

    /// Closes the connection. Later calls fail with `.storage`.
    public func close() throws(RegistryError) {
        for lane in lanes.withLock({ lanes in
            defer { lanes = [] }
            return lanes
        }) { try? lane.close() }
        lock.lock()
        defer { lock.unlock() }
        guard !isClosed else { return }
        isClosed = true
        guard let current else { return }
        do { try current.close().wait() } catch { throw .storage("closing the connection: \(Self.describe(error))") }
    }

    /// A new connection with this session's temporary table (the tables themselves exist: `init` migrated them).
    private func connect() throws(RegistryError) -> PostgresConnection {
        let (connector, logger, eventLoop) = (self.connector, self.logger, executor.eventLoop)
        connectionsOpened += 1
        let id = connectionsOpened
        let connection: PostgresConnection
        do {
            // Bounded like every call: a server that accepts and then says nothing must not hold the caller (a
            // node's lease thread) for ever.
            connection = try executor.run(timeout: callTimeAmount) {
                try await connector.connect(on: eventLoop, id: id, logger: logger)
            }
        } catch {
            throw .unavailable(
                "cannot connect to PostgreSQL at \(Self.redacted(url)) (check that the server runs, listens there and "
                    + "lets this user in): \(Self.describe(error))")
        }
        do {
            _ = try executor.run(failingWhen: connection.closeFuture, timeout: callTimeAmount) {
                // The batch being registered: filled by COPY, emptied by the commit. Temporary tables belong to
                // the session, so every new connection makes its own.
                try await connection.query(
                    """
                    CREATE TEMPORARY TABLE IF NOT EXISTS incoming (
                        ordinal integer NOT NULL, token bytea NOT NULL, kind smallint NOT NULL, activity_id text,
                        device_id text, attributes_type text, app_id bigint NOT NULL, frequent boolean NOT NULL,
                        supports_broadcast boolean NOT NULL, channels text[] NOT NULL, created_at bigint NOT NULL,
                        last_seen_at bigint NOT NULL, shard_hash bigint NOT NULL
                    ) ON COMMIT DELETE ROWS
                    """, logger: logger)
                // No idle-in-transaction timeout: a client slow between two statements (a loaded machine, a big
                // import) must keep its transaction. A stalled node's sessions, and the locks they hold, are
                // ended by a live node once its heartbeat is older than a lease (`fenceStalledNodes`).
            }
        } catch {
            try? connection.close().wait()
            throw .storage("preparing a new connection to \(Self.redacted(url)): \(Self.describe(error))")
        }
        return connection
    }

    /// The connection to use, a new one if the last one was lost. Call with `lock` held.
    private func liveConnection() throws(RegistryError) -> PostgresConnection {
        if let current, !connectionLost, !current.isClosed { return current }
        if let current {
            // Already closed by the server, or in a state no later call can trust: closed from our side too.
            try? current.close().wait()
        }
        current = nil
        connectionLost = false
        let connection = try connect()
        current = connection
        return connection
    }

    // MARK: - Writes

    public func register(
        _ registrations: [TokenRegistration], subscriptions: [BroadcastSubscription]
    )
        throws(RegistryError) -> RegistrationResult
    {
        for (index, registration) in registrations.enumerated() {
            if let reason = registration.validationFailure { throw .invalidRegistration(index: index, reason: reason) }
        }
        for (index, subscription) in subscriptions.enumerated() {
            if let reason = subscription.validationFailure {
                throw .invalidRegistration(index: registrations.count + index, reason: reason)
            }
        }
        guard !registrations.isEmpty || !subscriptions.isEmpty else { return RegistrationResult() }
        return try registrationLane().registerOnOwnConnection(registrations, subscriptions: subscriptions)
    }

    /// The store whose connection takes the next registration: this one when idle, else an idle lane, else a
    /// new lane while there may be more, else this one (waiting its turn).
    private func registrationLane() -> PostgresTokenStore {
        if registering.load(ordering: .relaxed) == 0 || registrationConnections == 1 { return self }
        return lanes.withLock { lanes -> PostgresTokenStore in
            if let idle = lanes.first(where: { $0.registering.load(ordering: .relaxed) == 0 }) { return idle }
            guard lanes.count < registrationConnections - 1 else {
                return lanes.min { $0.registering.load(ordering: .relaxed) < $1.registering.load(ordering: .relaxed) }
                    ?? self
            }
            do {
                let lane = try PostgresTokenStore(
                    url: url, registrationConnections: 1, incarnation: incarnation, callTimeout: callTimeout,
                    environment: connector.environment, historyRetention: .milliseconds(historyRetentionMilliseconds),
                    clock: clock, logger: logger)
                lanes.append(lane)
                return lane
            } catch {
                logger.warning("registering on the store's own connection: another one failed to open: \(error)")
                return self
            }
        }
    }

    /// One batch in one transaction on this store's connection. Each row locks its token: rows go in token order,
    /// so two batches (on two connections or two nodes) sharing tokens wait for each other instead of deadlocking.
    private func registerOnOwnConnection(
        _ registrations: [TokenRegistration], subscriptions: [BroadcastSubscription]
    ) throws(RegistryError) -> RegistrationResult {
        registering.add(1, ordering: .relaxed)
        defer { registering.subtract(1, ordering: .relaxed) }
        let logger = self.logger
        let now = clock()
        let operation = "registering \(registrations.count) tokens and \(subscriptions.count) broadcast subscriptions"
        return try serialised(operation) { connection throws(RegistryError) in
            let keys = Set(
                registrations.map { AppKey(bundleID: $0.bundleID, environment: $0.environment) }
                    + subscriptions.map { AppKey(bundleID: $0.bundleID, environment: $0.environment) })
            let known = appIDs
            let missing = keys.filter { known[$0] == nil }
            let hasPushToStart = registrations.contains { $0.kind == .pushToStart }
            // Most batches name each token once: then the rows go in as they came, with no sort.
            var seen = Set<DeviceToken>(minimumCapacity: registrations.count)
            let hasDuplicates = registrations.contains { !seen.insert($0.token).inserted }
            let batch = Batch(
                registrations: registrations, subscriptions: subscriptions, knownAppIDs: known, missingApps: missing,
                hasPushToStart: hasPushToStart, hasDuplicates: hasDuplicates, now: now)
            let (newIDs, result) = try run { () async throws -> ([AppKey: Int64], RegistrationResult) in
                try await Self.transaction(connection, logger) {
                    try await Self.writeBatch(batch, on: connection, logger: logger)
                }
            }
            appIDs.merge(newIDs) { old, _ in old }
            return result
        }
    }

    /// One `register` call's input, as its transaction needs it.
    private struct Batch: Sendable {
        var registrations: [TokenRegistration]
        var subscriptions: [BroadcastSubscription]
        var knownAppIDs: [AppKey: Int64]
        var missingApps: Set<AppKey>
        var hasPushToStart: Bool
        var hasDuplicates: Bool
        /// UNIX ms, for history rows.
        var now: Int64
    }

    /// A registration batch's statements, inside its transaction: the apps it names that have no id yet, the
    /// rows through `incoming` into `tokens`, the replacement rules, then the broadcast subscriptions. Returns
    /// the app ids it created and what it replaced.
    private static func writeBatch(
        _ batch: Batch, on connection: PostgresConnection, logger: Logger
    ) async throws -> (created: [AppKey: Int64], result: RegistrationResult) {
        let registrations = batch.registrations
        // A batch of 100,000 is about 15 MB to sort or hash: in memory, not in files (the default is 4 MB).
        try await connection.query("SET LOCAL work_mem = '64MB'", logger: logger)
        if batch.hasPushToStart {
            // The replacement rule reads the other push-to-start tokens of each device: batches with
            // such tokens, on any connection or node, run one at a time.
            try await connection.query(
                "SELECT pg_advisory_xact_lock(\(PostgresSchema.changeLockSpace), \(Self.pushToStartLockKey))",
                logger: logger)
        }
        var ids = batch.knownAppIDs
        var created: [AppKey: Int64] = [:]
        for key in batch.missingApps {
            let id = try await Self.appID(key, connection, logger)
            ids[key] = id
            created[key] = id
        }
        var result = RegistrationResult()
        if !registrations.isEmpty {
            try await copyIncoming(registrations, appIDs: ids, on: connection, logger: logger)
            try await connection.query(
                PostgresQuery(unsafeSQL: batch.hasDuplicates ? Self.upsertDeduplicated : Self.upsertDistinct),
                logger: logger)
            if batch.hasPushToStart {
                var replaced = try await replaceOtherPushToStartTokens(now: batch.now, on: connection, logger: logger)
                replaced.sort { $0.winner < $1.winner }
                result.replacedTokens = replaced.map(\.token)
            }
            if registrations.contains(where: { $0.kind == .update }) {
                try await SubscriptionWrites.replaceSubscriptionsOfUpdateTokens(
                    now: batch.now, result: &result, on: connection, logger: logger)
            }
        }
        try await SubscriptionWrites.write(
            batch.subscriptions, appIDs: ids, now: batch.now, result: &result, on: connection, logger: logger)
        return (created, result)
    }

    /// The batch into the transaction's `incoming` table, by COPY in chunks of `copyChunkRows` rows.
    private static func copyIncoming(
        _ registrations: [TokenRegistration], appIDs ids: [AppKey: Int64], on connection: PostgresConnection,
        logger: Logger
    ) async throws {
        try await connection.copyFrom(
            table: "incoming",
            columns: [
                "ordinal", "token", "kind", "activity_id", "device_id", "attributes_type", "app_id",
                "frequent", "supports_broadcast", "channels", "created_at", "last_seen_at", "shard_hash",
            ], logger: logger
        ) { writer in
            var buffer = ByteBuffer()
            for (ordinal, registration) in registrations.enumerated() {
                let appID = ids[AppKey(bundleID: registration.bundleID, environment: registration.environment)] ?? 0
                CopyText.write(registration, ordinal: ordinal, appID: appID, to: &buffer)
                if (ordinal + 1) % Self.copyChunkRows == 0 {
                    try await writer.write(buffer)
                    buffer.clear()
                }
            }
            if buffer.readableBytes > 0 { try await writer.write(buffer) }
        }
    }

    /// The last push-to-start token of each (app, device, attributes type) in the batch replaces every other one,
    /// earlier ones of the same batch included. Returns the tokens deleted, with the winner's ordinal.
    private static func replaceOtherPushToStartTokens(
        now: Int64, on connection: PostgresConnection, logger: Logger
    ) async throws -> [(token: DeviceToken, winner: Int32)] {
        let pushToStart = TokenKind.pushToStart.rawValue
        let query = LedgerHistorySQL.deletingTokens(
            """
            DELETE FROM tokens t USING (
                SELECT DISTINCT ON (app_id, device_id, attributes_type)
                       app_id, device_id, attributes_type, token, ordinal
                FROM incoming WHERE kind = \(pushToStart)
                ORDER BY app_id, device_id, attributes_type, ordinal DESC
            ) w
            WHERE t.kind = \(pushToStart) AND t.app_id = w.app_id
              AND t.device_id = w.device_id AND t.attributes_type = w.attributes_type
              AND t.token <> w.token
            """, binds: PostgresBindings(), ending: .init(event: .replaced, at: now),
            extraColumns: ["w.token", "w.ordinal"], replacedBy: "w.token")
        let rows = try await connection.query(query, logger: logger)
        var replaced: [(token: DeviceToken, winner: Int32)] = []
        for try await (bytes, _, winner) in rows.decode((ByteBuffer, ByteBuffer, Int32).self) {
            replaced.append((try Self.token(bytes), winner))
        }
        return replaced
    }

    /// The advisory lock (in `PostgresSchema.changeLockSpace`) that batches with push-to-start tokens take.
    static let pushToStartLockKey: Int32 = -3

    /// Writes the batch in `incoming` into `tokens` when no token occurs twice in it. An existing row keeps
    /// created_at; last_seen_at only moves forward.
    static let upsertDistinct = """
        INSERT INTO tokens (token, kind, activity_id, device_id, attributes_type, app_id, frequent,
                            supports_broadcast, channels, created_at, last_seen_at, shard_hash)
        SELECT token, kind, activity_id, device_id, attributes_type, app_id, frequent, supports_broadcast, channels,
               created_at, last_seen_at, shard_hash
        FROM incoming
        ORDER BY token
        \(upsertConflict)
        """

    /// The same when some token occurs more than once (an upsert may touch a row only once per statement): one
    /// row per token, the batch's last registration of it with the first one's creation time, as if written one
    /// by one. One sort serves the window and DISTINCT ON.
    static let upsertDeduplicated = """
        INSERT INTO tokens (token, kind, activity_id, device_id, attributes_type, app_id, frequent,
                            supports_broadcast, channels, created_at, last_seen_at, shard_hash)
        SELECT DISTINCT ON (token) token, kind, activity_id, device_id, attributes_type, app_id, frequent,
               supports_broadcast, channels, last_value(created_at) OVER batch, max(last_seen_at) OVER batch,
               shard_hash
        FROM incoming
        WINDOW batch AS (PARTITION BY token ORDER BY ordinal DESC
                         ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
        ORDER BY token, ordinal DESC
        \(upsertConflict)
        """

    private static let upsertConflict = """
        ON CONFLICT (token) DO UPDATE SET
            kind = EXCLUDED.kind, activity_id = EXCLUDED.activity_id, device_id = EXCLUDED.device_id,
            attributes_type = EXCLUDED.attributes_type, app_id = EXCLUDED.app_id,
            frequent = EXCLUDED.frequent, supports_broadcast = EXCLUDED.supports_broadcast,
            channels = EXCLUDED.channels,
            last_seen_at = greatest(tokens.last_seen_at, EXCLUDED.last_seen_at)
        """

    public func unregister(_ tokens: [DeviceToken], in scope: RegistryScope) throws(RegistryError) -> Int {
        guard !tokens.isEmpty else { return 0 }
        var binds = PostgresBindings()
        binds.append(tokens.map(Self.bytes))
        let inScope = Self.appCondition(scope, column: "t.app_id", binds: &binds)
        let query = LedgerHistorySQL.deletingTokens(
            "DELETE FROM tokens t WHERE t.token = ANY($1::bytea[])" + inScope, binds: binds,
            ending: .init(event: .unregistered, at: clock()))
        return try inTransaction("unregistering \(tokens.count) tokens") { connection, logger in
            try await LedgerHistorySQL.deletedTokens(query, on: connection, logger: logger).count
        }
    }

    public func invalidate(_ token: DeviceToken, invalidSince: Int64?) throws(RegistryError) -> Bool {
        try invalidate([TokenInvalidation(token: token, invalidSince: invalidSince)])[0]
    }

    /// One transaction; the time condition is part of each DELETE, so a re-registration cannot slip between a
    /// check and the removal.
    public func invalidate(_ batch: [TokenInvalidation]) throws(RegistryError) -> [Bool] {
        guard !batch.isEmpty else { return [] }
        let now = clock()
        let queries = batch.map { item in
            var binds = PostgresBindings()
            binds.append(Self.bytes(item.token))
            binds.append(item.invalidSince)
            return LedgerHistorySQL.deletingTokens(
                "DELETE FROM tokens t WHERE t.token = $1 AND ($2::bigint IS NULL OR t.last_seen_at <= $2::bigint)",
                binds: binds,
                ending: .init(event: .invalidated, at: now, reason: item.reason, invalidSince: item.invalidSince))
        }
        return try inTransaction("invalidating \(batch.count) tokens") { connection, logger in
            var removed: [Bool] = []
            removed.reserveCapacity(queries.count)
            for query in queries {
                removed.append(
                    !(try await LedgerHistorySQL.deletedTokens(query, on: connection, logger: logger)).isEmpty)
            }
            return removed
        }
    }

    /// Update tokens and broadcast subscriptions of `scope` following `channel`.
    public func retire(following channel: String, in scope: RegistryScope) throws(RegistryError) -> RetirementResult {
        var binds = PostgresBindings()
        binds.append(channel)
        let ending = LedgerHistorySQL.Ending(event: .retiredChannelEnded, at: clock(), channel: channel)
        var tokenBinds = binds
        let tokens = LedgerHistorySQL.deletingTokens(
            "DELETE FROM tokens t WHERE t.kind = \(TokenKind.update.rawValue) AND $1 = ANY(t.channels)"
                + Self.appCondition(scope, column: "t.app_id", binds: &tokenBinds),
            binds: tokenBinds, ending: ending)
        let subscriptions = LedgerHistorySQL.deletingSubscriptions(
            """
            DELETE FROM broadcast_subscriptions s USING subscription_channels c
            WHERE c.channel = $1 AND s.app_id = c.app_id AND s.activity_id = c.activity_id
            """ + Self.appCondition(scope, column: "s.app_id", binds: &binds), binds: binds, ending: ending)
        return try retire("retiring what of \(scope) follows channel '\(channel)'", tokens, subscriptions)
    }

    /// Update tokens and broadcast subscriptions created before `createdBefore` (UNIX ms); also prunes the
    /// ledger's history past its retention (the maintenance sweep).
    public func retire(createdBefore: Int64, in scope: RegistryScope) throws(RegistryError) -> RetirementResult {
        var binds = PostgresBindings()
        binds.append(createdBefore)
        let now = clock()
        let ending = LedgerHistorySQL.Ending(event: .retiredLifetime, at: now)
        var tokenBinds = binds
        let tokens = LedgerHistorySQL.deletingTokens(
            "DELETE FROM tokens t WHERE t.kind = \(TokenKind.update.rawValue) AND t.created_at < $1"
                + Self.appCondition(scope, column: "t.app_id", binds: &tokenBinds),
            binds: tokenBinds, ending: ending)
        let subscriptions = LedgerHistorySQL.deletingSubscriptions(
            "DELETE FROM broadcast_subscriptions s WHERE s.created_at < $1"
                + Self.appCondition(scope, column: "s.app_id", binds: &binds), binds: binds, ending: ending)
        return try retire(
            "retiring what of \(scope) was created before \(createdBefore)", tokens, subscriptions,
            pruneHistoryBefore: now - historyRetentionMilliseconds)
    }

    /// A condition on `column` for `scope`, its values appended to `binds` (empty for every app).
    static func appCondition(_ scope: RegistryScope, column: String, binds: inout PostgresBindings) -> String {
        guard !scope.isEverything else { return "" }
        var conditions: [String] = []
        if let bundleID = scope.bundleID {
            binds.append(bundleID)
            conditions.append("bundle_id = $\(binds.count)")
        }
        if let environment = scope.environment {
            binds.append(Int16(environment.rawValue))
            conditions.append("environment = $\(binds.count)")
        }
        return " AND \(column) IN (SELECT id FROM apps WHERE \(conditions.joined(separator: " AND ")))"
    }

    private func retire(
        _ operation: String, _ tokens: PostgresQuery, _ subscriptions: PostgresQuery, pruneHistoryBefore: Int64? = nil
    ) throws(RegistryError) -> RetirementResult {
        try inTransaction(operation) { connection, logger in
            var result = RetirementResult()
            result.tokens = try await LedgerHistorySQL.deletedTokens(tokens, on: connection, logger: logger)
            result.subscriptions = try await LedgerHistorySQL.deletedSubscriptions(
                subscriptions, deltas: &result.subscriptionDeltas, on: connection, logger: logger
            ).sorted()
            if let pruneHistoryBefore {
                try await connection.query("DELETE FROM token_history WHERE at < \(pruneHistoryBefore)", logger: logger)
            }
            return result
        }
    }

    // MARK: - Reads

    /// Streams the app's registrations in pages (token order) from one repeatable-read transaction, so the scan
    /// sees one snapshot; `body` runs on the calling thread. An error thrown by `body` ends the scan; a
    /// `RegistryError` is rethrown as is, others become `.storage`.
    public func forEachRegistration(
        bundleID: String, environment: APNsEnvironment, _ body: (TokenRegistration) throws -> Void
    ) throws(RegistryError) {
        let logger = self.logger
        let operation = "loading tokens of \(bundleID) (\(environment))"
        try serialised(operation) { connection throws(RegistryError) in
            try run {
                try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
            }
            var callbackError: (any Error)?
            do throws(RegistryError) {
                var after: ByteBuffer? = nil
                scan: while true {
                    let cursor = after
                    let page = try run { () async throws -> [TokenRegistration] in
                        let rows = try await connection.query(
                            """
                            SELECT t.token, t.kind, t.activity_id, t.device_id, t.attributes_type, t.frequent,
                                   t.supports_broadcast, t.channels, t.created_at, t.last_seen_at
                            FROM tokens t JOIN apps a ON a.id = t.app_id
                            WHERE a.bundle_id = \(bundleID) AND a.environment = \(Int16(environment.rawValue))
                              AND (\(cursor)::bytea IS NULL OR t.token > \(cursor)::bytea)
                            ORDER BY t.token LIMIT \(Self.readPageRows)
                            """, logger: logger)
                        var page: [TokenRegistration] = []
                        for try await row in rows {
                            page.append(try Self.registration(row, bundleID: bundleID, environment: environment))
                        }
                        return page
                    }
                    for registration in page {
                        do { try body(registration) } catch {
                            callbackError = error
                            break scan
                        }
                    }
                    guard page.count == Self.readPageRows, let last = page.last else { break }
                    after = Self.bytes(last.token)
                }
            } catch {
                _ = try? run { try await connection.query("ROLLBACK", logger: logger) }
                throw error
            }
            _ = try? run { try await connection.query("ROLLBACK", logger: logger) }
            if let callbackError {
                if let registryError = callbackError as? RegistryError { throw registryError }
                throw .storage("\(operation) stopped: the callback threw \(callbackError)")
            }
        }
    }

    public func count() throws(RegistryError) -> Int {
        let logger = self.logger
        return try serialised("counting tokens", retry: true) { connection throws(RegistryError) in
            try run {
                var count = 0
                for try await value in try await connection.query("SELECT count(*) FROM tokens", logger: logger)
                    .decode(Int64.self)
                { count = Int(value) }
                return count
            }
        }
    }

    // MARK: - Plumbing

    /// UNIX ms now.
    public static let wallClockMilliseconds: @Sendable () -> Int64 = {
        Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// Holds the store for one call (a closed store refuses it) and hands it the connection, a new one when the
    /// last was lost: a dropped connection fails only the call that met the drop. `retry`: the call changes
    /// nothing (read-only), so when the drop fails it, it runs once more on a new connection. Errors come out as
    /// `.storage`, with `operation`.
    func serialised<T>(
        _ operation: String, retry: Bool = false, _ body: (PostgresConnection) throws(RegistryError) -> T
    ) throws(RegistryError) -> T {
        lock.lock()
        defer { lock.unlock() }
        guard !isClosed else { throw .storage("\(operation): the store is closed") }
        do {
            do {
                return try body(try liveConnection())
            } catch  where retry && (connectionLost || current?.isClosed == true) {
                return try body(try liveConnection())
            }
        } catch {
            switch error {
            case .storage(let message): throw .storage("\(operation): \(message)")
            case .unavailable(let message): throw .unavailable("\(operation): \(message)")
            default: throw error
            }
        }
    }

    /// `callTimeout` for the event loop.
    var callTimeAmount: TimeAmount {
        let (seconds, attoseconds) = callTimeout.components
        return .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    /// Runs async work on the connection's event loop and waits for it; fails at once if the connection closes
    /// meanwhile. Call with `lock` held.
    func run<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) throws(RegistryError) -> T {
        do {
            return try executor.run(failingWhen: current?.closeFuture, timeout: callTimeAmount, work)
        } catch let error as RegistryError {
            throw error
        } catch let error as CallTimedOut {
            connectionLost = true  // the next call closes it (which ends the abandoned work) and opens another
            throw .unavailable(error.description)
        } catch {
            if Self.losesTheConnection(error) {
                connectionLost = true
                throw .unavailable(Self.describe(error))
            }
            throw .storage(Self.describe(error))
        }
    }

    /// Whether `error` means the connection cannot be used any more: it closed, failed, or the server ended
    /// the session (SQLSTATE class 57P: operator intervention, e.g. pg_terminate_backend or a shutdown; class
    /// 08: connection exception).
    static func losesTheConnection(_ error: any Error) -> Bool {
        if error is ConnectionClosedDuringCall { return true }
        guard let error = error as? PSQLError else { return false }
        switch error.code {
        case .serverClosedConnection, .connectionError, .uncleanShutdown, .clientClosedConnection:
            return true
        case .server:
            let state = error.serverInfo?[.sqlState] ?? ""
            return state.hasPrefix("57P") || state.hasPrefix("08")
        default:
            return false
        }
    }

    static func transaction<T: Sendable>(
        _ connection: PostgresConnection, _ logger: Logger, begin: String = "BEGIN", _ body: () async throws -> T
    ) async throws -> T {
        try await connection.query(PostgresQuery(unsafeSQL: begin), logger: logger)
        do {
            let result = try await body()
            try await connection.query("COMMIT", logger: logger)
            return result
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    static func appID(_ key: AppKey, _ connection: PostgresConnection, _ logger: Logger) async throws -> Int64 {
        // DO UPDATE (a no-op change) so RETURNING yields the row when it exists already.
        let rows = try await connection.query(
            """
            INSERT INTO apps (bundle_id, environment) VALUES (\(key.bundleID), \(Int16(key.environment.rawValue)))
            ON CONFLICT (bundle_id, environment) DO UPDATE SET bundle_id = EXCLUDED.bundle_id
            RETURNING id
            """, logger: logger)
        for try await id in rows.decode(Int64.self) { return id }
        throw PostgresStoreError("no id returned for app \(key.bundleID)")
    }

    static func bytes(_ token: DeviceToken) -> ByteBuffer {
        token.withUnsafeBytes { ByteBuffer(bytes: $0) }
    }

    static func token(_ bytes: ByteBuffer) throws -> DeviceToken {
        do { return try DeviceToken(bytes: bytes.readableBytesView) } catch {
            throw RegistryError.storage("the database holds a token it cannot read back: \(error)")
        }
    }

    static func registration(
        _ row: PostgresRow, bundleID: String, environment: APNsEnvironment
    ) throws -> TokenRegistration {
        let (
            bytes, kind, activityID, deviceID, attributesType, frequent, supportsBroadcast, channels, createdAt,
            lastSeenAt
        ) =
            try row.decode((ByteBuffer, Int16, String?, String?, String?, Bool, Bool, [String], Int64, Int64).self)
        guard let kindValue = UInt8(exactly: kind), let tokenKind = TokenKind(rawValue: kindValue) else {
            throw RegistryError.storage("the database holds a token of unknown kind \(kind)")
        }
        return TokenRegistration(
            token: try token(bytes), kind: tokenKind, activityID: activityID, deviceID: deviceID,
            attributesType: attributesType, bundleID: bundleID, environment: environment, frequentUpdates: frequent,
            supportsBroadcast: supportsBroadcast, channels: channels, createdAt: createdAt, lastSeenAt: lastSeenAt)
    }

    /// The `application_name` of the sessions of clients that are no cluster node: never fenced.
    static let plainSessionName = "fanfare"

    /// How to connect to the database of a `postgres://` (or `postgresql://`) URL, its sessions named after
    /// `incarnation` (`plainSessionName` without one).
    static func connector(
        _ url: String, incarnation: NodeIncarnation? = nil, environment: PostgresEnvironment = .current
    ) throws(RegistryError) -> PostgresConnector {
        try PostgresConnector(
            url: url, applicationName: incarnation?.sessionName ?? plainSessionName, environment: environment)
    }

    /// What is wrong with a `postgres://` URL (nil if it can be used); never contains the password.
    public static func urlProblem(_ url: String) -> String? {
        do throws(RegistryError) {
            _ = try connector(url)
            return nil
        } catch {
            if case .storage(let message) = error { return message }
            return "\(error)"
        }
    }

    /// The URL without its password, for messages, also when it does not parse (`PostgresURL.redacted`).
    public static func redacted(_ url: String) -> String { PostgresURL.redacted(url) }

    /// PSQLError's description hides the server's message; its reflection keeps it.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return "PostgreSQL: \(message)" }
            if error.code == .connectionError, let underlying = error.underlying { return "\(underlying)" }
            return String(reflecting: error)
        }
        return "\(error)"
    }
}

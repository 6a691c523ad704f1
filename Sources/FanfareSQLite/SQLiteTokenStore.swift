import FanfareCore
import FanfareStorage
import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// The embedded `TokenStore`: one SQLite file through GRDB.
///
/// Durability: WAL journal with `synchronous = FULL`, so every commit is fsynced before the call returns.
/// Concurrency: one `DatabaseQueue` connection serialises every call, from any thread. Calls are not reentrant:
/// the `forEachRegistration` callback must not call back into the same store.
/// Exclusivity: the store finds tokens through an in-memory index (see `TokenIndex`), so it locks the file for as
/// long as it is open; another store or process (including the sqlite3 shell) cannot open it meanwhile.
public final class SQLiteTokenStore: TokenStore {
    /// The database file.
    public let path: String
    private let database: DatabaseQueue
    /// Token index and name → id caches, always equal to what the file holds. Locked for each whole write
    /// transaction (which the queue serialises anyway) and rolled back with it.
    let memory: Mutex<RegistryMemoryState>

    /// SQLite page cache for the connection, in KiB (64 MiB).
    static let cacheSizeKiB = 65_536
    /// WAL pages between automatic checkpoints (4 KiB pages: 64 MiB). SQLite's default (4 MiB) is smaller than
    /// one 10k batch, so it checkpointed after every commit and rewrote the same pages each time. Durability does
    /// not depend on it: every commit is synced in the WAL.
    static let walCheckpointPages = 16_384
    /// After a checkpoint, a WAL that grew past this is truncated back (bytes).
    static let walSizeLimitBytes = 128 << 20
    /// DELETE ... RETURNING needs SQLite 3.35.
    static let minimumSQLiteVersion: CInt = 3_035_000

    /// How long the ledger keeps the history of ended registrations (ms).
    public let historyRetentionMilliseconds: Int64
    /// The wall clock (UNIX ms) that stamps ledger history.
    let clock: @Sendable () -> Int64

    /// The ledger's default history retention: 30 days.
    public static let defaultHistoryRetention: Duration = LedgerRetention.default

    /// Opens the registry at `path`, creating the file and its tables if needed, and loads the token index
    /// (about half a second per million tokens). `historyRetention`: how long the ledger keeps what happened to
    /// registrations that ended (pruned by the `retire(createdBefore:)` sweep). `clock`: UNIX ms for history
    /// rows (tests pass their own).
    public init(
        path: String, historyRetention: Duration = SQLiteTokenStore.defaultHistoryRetention,
        clock: @escaping @Sendable () -> Int64 = SQLiteTokenStore.wallClockMilliseconds
    ) throws(RegistryError) {
        self.path = path
        historyRetentionMilliseconds = LedgerRetention.milliseconds(historyRetention)
        self.clock = clock
        guard Database.sqliteLibVersionNumber >= Self.minimumSQLiteVersion else {
            throw .storage("SQLite \(Database.sqliteLibVersionNumber) is too old; the registry needs 3.35.0 or newer")
        }
        var configuration = Configuration()
        configuration.label = "FanfareSQLite"
        // The file is locked for the store's lifetime; waiting for another holder would only delay the error.
        configuration.busyMode = .immediateError
        configuration.prepareDatabase { db in
            // Before WAL is on, so SQLite keeps the WAL index in process memory and never shares the file.
            try db.execute(sql: "PRAGMA locking_mode = EXCLUSIVE")
            // WAL is set here rather than with `configuration.journalMode = .wal`: GRDB's WAL set-up runs after
            // this closure and lowers `synchronous` to NORMAL, which can lose the last commits on power failure.
            let journalMode = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            guard journalMode == "wal" else {
                throw RegistryError.storage(
                    "cannot switch '\(path)' to WAL (journal mode is \(journalMode ?? "unknown"))")
            }
            try db.execute(sql: "PRAGMA synchronous = FULL")
            try db.execute(sql: "PRAGMA cache_size = -\(SQLiteTokenStore.cacheSizeKiB)")
            // Statement journals, RETURNING buffers and IN-list tables stay in memory; on disk they spill into a
            // temp file past 64 KiB, two write syscalls per page.
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
            try db.execute(sql: "PRAGMA wal_autocheckpoint = \(SQLiteTokenStore.walCheckpointPages)")
            try db.execute(sql: "PRAGMA journal_size_limit = \(SQLiteTokenStore.walSizeLimitBytes)")
        }
        Self.createPrivately(path)
        do {
            database = try DatabaseQueue(path: path, configuration: configuration)
        } catch {
            throw Self.openError(path: path, error)
        }
        do {
            // Take the file's lock now (kept until close), so a second opener fails here and not later.
            try database.writeWithoutTransaction { db in
                try db.execute(sql: "BEGIN EXCLUSIVE")
                try db.execute(sql: "COMMIT")
            }
        } catch {
            throw Self.openError(path: path, error, operation: "locking '\(path)'")
        }
        do {
            let migrator = RegistrySchema.migrator
            try database.read { db in
                if try migrator.hasBeenSuperseded(db) {
                    throw RegistryError.storage(
                        "'\(path)' was written by a newer Fanfare (unknown schema migrations); refusing to open it")
                }
            }
            try migrator.migrate(database)
        } catch {
            throw Self.openError(path: path, error, operation: "creating the registry tables in '\(path)'")
        }
        do {
            memory = Mutex(try database.read { db in try Self.loadMemoryState(db) })
        } catch {
            throw Self.openError(path: path, error, operation: "loading the token index of '\(path)'")
        }
    }

    /// Closes the database and releases the file. Later calls fail with `.storage`. Dropping the last reference
    /// closes it too.
    public func close() throws(RegistryError) {
        do {
            // Flag first, on the queue: GRDB crashes (rather than throws) on some accesses to a closed connection.
            database.writeWithoutTransaction { _ in memory.withLock { $0.isClosed = true } }
            try database.close()
        } catch {
            throw Self.storageError("closing '\(path)'", error)
        }
    }

    // MARK: - Writes

    public func register(
        _ registrations: [TokenRegistration], subscriptions: [BroadcastSubscription]
    )
        throws(RegistryError) -> RegistrationResult
    {
        try TokenRegistration.validate(registrations)
        try BroadcastSubscription.validate(subscriptions, firstIndex: registrations.count)
        guard !registrations.isEmpty || !subscriptions.isEmpty else { return RegistrationResult() }
        let now = clock()
        let operation =
            subscriptions.isEmpty
            ? "registering \(registrations.count) tokens"
            : "registering \(registrations.count) tokens and \(subscriptions.count) broadcast subscriptions"
        return try transaction(operation) { db, memory in
            var writer = try RegistrationWriter(db)
            var channelIDs: [Int64] = []  // reused for every registration
            var lastApp: (key: AppKey, id: Int64)?  // batches are usually all one app
            var appIDs: [Int64] = []
            appIDs.reserveCapacity(registrations.count)
            for registration in registrations {
                let appKey = AppKey(registration.bundleID, registration.environment)
                let appID: Int64
                if let lastApp, lastApp.key == appKey {
                    appID = lastApp.id
                } else {
                    appID = try Self.appID(appKey, db, &memory)
                    lastApp = (appKey, appID)
                }
                appIDs.append(appID)
                channelIDs.removeAll(keepingCapacity: true)
                for channel in registration.channels {
                    channelIDs.append(try Self.channelID(channel, db, &memory))
                }
                try writer.add(registration, appID: appID, channelIDs: channelIDs, state: &memory)
            }
            try writer.finish()
            var replacement = try ReplacementRules(db, history: LedgerHistoryWriter(db, now: now))
            try replacement.apply(registrations, appIDs: appIDs, &memory)
            for subscription in subscriptions {
                let appID = try Self.appID(AppKey(subscription.bundleID, subscription.environment), db, &memory)
                try replacement.apply(subscription, appID: appID, &memory)
            }
            return replacement.result
        }
    }

    public func unregister(_ tokens: [DeviceToken], in scope: RegistryScope) throws(RegistryError) -> Int {
        guard !tokens.isEmpty else { return 0 }
        let now = clock()
        return try transaction("unregistering \(tokens.count) tokens of \(scope)") { db, memory in
            let delete = try RawStatement(
                db,
                sql: "DELETE FROM tokens WHERE id = ? AND token = ?" + memory.appCondition(scope) + " "
                    + EndedRegistration.returningTokenColumns)
            let history = try LedgerHistoryWriter(db, now: now)
            var removed = 0
            for token in tokens {
                guard let ended = try Self.delete(token, with: delete, &memory) else { continue }
                try history.record(ended, .unregistered)
                removed += 1
            }
            return removed
        }
    }

    /// Removes broadcast subscriptions (by activity id) of one app. Unknown ones are ignored.
    public func unregisterSubscriptions(
        activityIDs: [String], bundleID: String, environment: APNsEnvironment
    )
        throws(RegistryError) -> RetirementResult
    {
        guard !activityIDs.isEmpty else { return RetirementResult() }
        let now = clock()
        return try transaction("unregistering \(activityIDs.count) broadcast subscriptions") { db, memory in
            var result = RetirementResult()
            guard let appID = memory.appIDs[AppKey(bundleID, environment)] else { return result }
            var subscriptions = try SubscriptionTable(db)
            let history = try LedgerHistoryWriter(db, now: now)
            for activityID in activityIDs {
                guard
                    let ended = try subscriptions.remove(
                        appID: appID, activityID: activityID, &result.subscriptionDeltas)
                else { continue }
                try history.record(ended, .unregistered)
                result.subscriptions.append(activityID)
            }
            return result
        }
    }

    public func invalidate(_ token: DeviceToken, invalidSince: Int64?) throws(RegistryError) -> Bool {
        try invalidate([TokenInvalidation(token: token, invalidSince: invalidSince)])[0]
    }

    public func invalidate(_ batch: [TokenInvalidation]) throws(RegistryError) -> [Bool] {
        guard !batch.isEmpty else { return [] }
        let now = clock()
        return try transaction("invalidating \(batch.count) tokens") { db, memory in
            // The time condition is part of each DELETE, so the check and the removal cannot be split by anything.
            let unconditional = try RawStatement(
                db, sql: "DELETE FROM tokens WHERE id = ? AND token = ? " + EndedRegistration.returningTokenColumns)
            let conditional = try RawStatement(
                db,
                sql: "DELETE FROM tokens WHERE id = ? AND token = ? AND last_seen_at <= ? "
                    + EndedRegistration.returningTokenColumns)
            let history = try LedgerHistoryWriter(db, now: now)
            var removed: [Bool] = []
            removed.reserveCapacity(batch.count)
            for item in batch {
                let ended: EndedRegistration?
                if let invalidSince = item.invalidSince {
                    conditional.bind(3, invalidSince)
                    ended = try Self.delete(item.token, with: conditional, &memory)
                } else {
                    ended = try Self.delete(item.token, with: unconditional, &memory)
                }
                if let ended {
                    try history.record(ended, .invalidated, reason: item.reason, invalidSince: item.invalidSince)
                }
                removed.append(ended != nil)
            }
            return removed
        }
    }

    public func retire(following channel: String, in scope: RegistryScope) throws(RegistryError) -> RetirementResult {
        let now = clock()
        return try transaction("retiring update tokens of \(scope) following channel '\(channel)'") { db, memory in
            let history = try LedgerHistoryWriter(db, now: now)
            var result = RetirementResult()
            var subscriptions = try SubscriptionTable(db)
            let apps = memory.appIDs(in: scope).map(Set.init)
            for (appID, activityID) in try subscriptions.following(channel) where apps?.contains(appID) ?? true {
                guard
                    let ended = try subscriptions.remove(
                        appID: appID, activityID: activityID, &result.subscriptionDeltas)
                else { continue }
                try history.record(ended, .retiredChannelEnded, channel: channel)
                result.subscriptions.append(activityID)
            }
            guard let channelID = memory.channelIDs[channel] else { return result }
            // `+kind` keeps SQLite from walking the whole kind index instead of the channel's memberships.
            result.tokens = try Self.deleteReturningTokens(
                db, &memory,
                sql: """
                    DELETE FROM tokens
                    WHERE id IN (SELECT token_id FROM token_channels WHERE channel_id = ?)
                      AND +kind = \(TokenKind.update.rawValue)\(memory.appCondition(scope))
                    """, binding: channelID
            ) { ended in try history.record(ended, .retiredChannelEnded, channel: channel) }
            // Forget the channel once nothing follows it (push-to-start tokens may still do).
            try db.execute(
                sql:
                    "DELETE FROM channels WHERE id = ? AND NOT EXISTS (SELECT 1 FROM token_channels WHERE channel_id = ?)",
                arguments: [channelID, channelID])
            if db.changesCount > 0 { memory.removeChannel(channel) }
            return result
        }
    }

    public func retire(createdBefore: Int64, in scope: RegistryScope) throws(RegistryError) -> RetirementResult {
        let now = clock()
        return try transaction("retiring update tokens of \(scope) created before \(createdBefore)") { db, memory in
            let history = try LedgerHistoryWriter(db, now: now)
            var result = RetirementResult()
            result.tokens = try Self.deleteReturningTokens(
                db, &memory,
                sql: "DELETE FROM tokens WHERE kind = \(TokenKind.update.rawValue) AND created_at < ?"
                    + memory.appCondition(scope),
                binding: createdBefore
            ) { ended in try history.record(ended, .retiredLifetime) }
            var subscriptions = try SubscriptionTable(db)
            let apps = memory.appIDs(in: scope).map(Set.init)
            for (appID, activityID) in try subscriptions.created(before: createdBefore)
            where apps?.contains(appID) ?? true {
                guard
                    let ended = try subscriptions.remove(
                        appID: appID, activityID: activityID, &result.subscriptionDeltas)
                else { continue }
                try history.record(ended, .retiredLifetime)
                result.subscriptions.append(activityID)
            }
            // The periodic sweep also drops channels that nothing follows any more (left by age retirement,
            // unregister or invalidate), so the channel table does not grow with every event ever held.
            let unused = try String.fetchAll(
                db,
                sql: """
                    DELETE FROM channels
                    WHERE NOT EXISTS (SELECT 1 FROM token_channels WHERE channel_id = channels.id)
                    RETURNING name
                    """)
            for name in unused { memory.removeChannel(name) }
            // And the ledger's history past its retention.
            try db.execute(
                sql: "DELETE FROM token_history WHERE at < ?", arguments: [now - historyRetentionMilliseconds])
            return result
        }
    }

    // MARK: - Reads

    /// Streams the app's registrations in token id order (registration order for new tokens), holding the
    /// store's queue for the whole scan: `body` must not call this store (GRDB stops the process on reentry).
    /// An error thrown by `body` ends the scan; a `RegistryError` is rethrown as is, others become `.storage`.
    public func forEachRegistration(
        bundleID: String, environment: APNsEnvironment, _ body: (TokenRegistration) throws -> Void
    ) throws(RegistryError) {
        do {
            // On the queue for the whole scan, so no write interleaves: a consistent snapshot.
            try database.writeWithoutTransaction { db in
                try checkOpen()
                try RegistrationReader.forEach(bundleID, environment, db, body)
            }
        } catch let error as RegistrationReader.CallbackError {
            if let registryError = error.underlying as? RegistryError { throw registryError }
            throw .storage(
                "loading tokens of \(bundleID) (\(environment)) stopped: the callback threw \(error.underlying)")
        } catch {
            throw Self.storageError("loading tokens of \(bundleID) (\(environment))", error)
        }
    }

    /// Number of registered tokens, from the in-memory index (equal to the table's row count).
    public func count() throws(RegistryError) -> Int {
        // Through the queue, so it waits for a running write.
        try access("counting tokens") { _ in memory.withLock { $0.tokens.count } }
    }

    /// The table's row count (tests check it against `count()`).
    func rowCount() throws(RegistryError) -> Int {
        try access("counting token rows") { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM tokens") ?? 0 }
    }

    /// The value of a PRAGMA on the store's connection (tests check the durability settings with it).
    func pragma(_ name: String) throws(RegistryError) -> String? {
        try access("reading PRAGMA \(name)") { db in try String.fetchOne(db, sql: "PRAGMA \(name)") }
    }

    /// Runs raw SQL on the store's connection (tests corrupt rows with it, the file being locked to others).
    func execute(sql: String) throws(RegistryError) {
        try access("executing \(sql)") { db in try db.execute(sql: sql) }
    }

    /// Lowers SQLite's limit on the length of one value (tests make it refuse long values with it).
    func limitValueLength(toBytes bytes: Int32) throws(RegistryError) {
        try access("limiting value length") { db in _ = sqlite3_limit(db.sqliteConnection, SQLITE_LIMIT_LENGTH, bytes) }
    }

    /// The integer a query returns (tests count rows with it).
    func scalar(sql: String) throws(RegistryError) -> Int64? {
        try access("querying \(sql)") { db in try Int64.fetchOne(db, sql: sql) }
    }

    // MARK: - Helpers

    /// The system's wall clock in UNIX milliseconds.
    @Sendable public static func wallClockMilliseconds() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }

    /// Runs `body` on the database queue (every call goes through it, so none overlap); `memory` may be read
    /// (not changed) inside it. Every failure becomes
    /// `.storage("<operation> failed: ...")`.
    func access<T>(
        _ operation: @autoclosure () -> String, _ body: (Database) throws -> T
    )
        throws(RegistryError) -> T
    {
        do {
            return try database.writeWithoutTransaction { db in
                try checkOpen()
                return try body(db)
            }
        } catch {
            throw Self.storageError(operation(), error)
        }
    }

    /// Throws once `close()` has run.
    private func checkOpen() throws {
        if memory.withLock({ $0.isClosed }) { throw ClosedError(path: path) }
    }

    private struct ClosedError: Error, CustomStringConvertible {
        var path: String
        var description: String { "the registry at '\(path)' is closed" }
    }

    /// Runs `body` in an IMMEDIATE transaction with the in-memory state; what `body` changed in memory is undone
    /// if the transaction does not commit. Every failure becomes `.storage("<operation> failed: ...")`.
    func transaction<T: Sendable>(
        _ operation: @autoclosure () -> String, _ body: (Database, inout RegistryMemoryState) throws -> T
    ) throws(RegistryError) -> T {
        do {
            return try database.writeWithoutTransaction { db in
                try checkOpen()
                return try memory.withLock { memory in
                    do {
                        var result: T?
                        try db.inTransaction(.immediate) {
                            result = try body(db, &memory)
                            return .commit
                        }
                        memory.commit()
                        return result!
                    } catch {
                        memory.rollBack()
                        throw error
                    }
                }
            }
        } catch {
            throw Self.storageError(operation(), error)
        }
    }

    /// The token index and the channel and app ids, from the tables.
    private static func loadMemoryState(_ db: Database) throws -> RegistryMemoryState {
        var state = RegistryMemoryState()
        state.tokens.reserveCapacity(try Int.fetchOne(db, sql: "SELECT count(*) FROM tokens") ?? 0)
        let tokens = try RawStatement(db, sql: "SELECT id, token FROM tokens")
        defer { tokens.reset() }
        while try tokens.step() {
            let id = tokens.int64(0)
            let token = try RegistrationReader.token(tokens.blob(1), id: id)
            state.tokens.insert(hash: TokenIndex.hash(token), id: id)
        }
        let channels = try Row.fetchCursor(db, sql: "SELECT id, name FROM channels")
        while let row = try channels.next() { state.addChannel(row[1], id: row[0]) }
        let apps = try Row.fetchCursor(db, sql: "SELECT id, bundle_id, environment FROM apps")
        while let row = try apps.next() {
            let environmentValue: Int64 = row[2]
            guard let environment = APNsEnvironment(rawValue: UInt8(truncatingIfNeeded: environmentValue)) else {
                throw RegistryError.storage("app row \(row[0] as Int64) has unknown environment \(environmentValue)")
            }
            state.addApp(AppKey(row[1], environment), id: row[0])
        }
        state.commit()
        return state
    }

    /// Deletes `token` with `delete` (`DELETE ... WHERE id = ?1 AND token = ?2 ... RETURNING <the ended
    /// registration>`) if a candidate row holds it; returns what the row held.
    private static func delete(
        _ token: DeviceToken, with delete: RawStatement, _ memory: inout RegistryMemoryState
    )
        throws -> EndedRegistration?
    {
        let hash = TokenIndex.hash(token)
        var ended: EndedRegistration?
        let removedID = try memory.tokens.firstID(hash: hash) { id in
            delete.bind(1, id)
            token.withUnsafeBytes { delete.bind(2, blob: $0) }
            defer { delete.reset() }
            // RETURNING: the row is deleted during the first step.
            guard try delete.step() else { return false }
            ended = try EndedRegistration(tokenRow: delete)
            return true
        }
        guard let removedID else { return nil }
        memory.removeToken(hash: hash, id: removedID)
        return ended
    }

    /// Runs a token `DELETE` (without its RETURNING clause, which this adds) and returns the deleted tokens,
    /// removing them from the index and handing each ended registration to `ended`.
    static func deleteReturningTokens(
        _ db: Database, _ memory: inout RegistryMemoryState, sql: String, binding value: Int64,
        ended: (EndedRegistration) throws -> Void
    ) throws -> [DeviceToken] {
        let delete = try RawStatement(db, sql: sql + " " + EndedRegistration.returningTokenColumns)
        delete.bind(1, value)
        return try Self.drain(delete, &memory, ended: ended)
    }

    /// Steps a bound token `DELETE ... RETURNING` to its end (see `deleteReturningTokens`).
    static func drain(
        _ delete: RawStatement, _ memory: inout RegistryMemoryState, ended: (EndedRegistration) throws -> Void
    ) throws -> [DeviceToken] {
        defer { delete.reset() }
        var tokens: [DeviceToken] = []
        while try delete.step() {
            let registration = try EndedRegistration(tokenRow: delete)
            guard let token = registration.token else { continue }  // always set for a token row
            memory.removeToken(hash: TokenIndex.hash(token), id: delete.int64(0))
            try ended(registration)
            tokens.append(token)
        }
        return tokens
    }

    /// The id of a channel name, adding the channel if it is new.
    private static func channelID(_ name: String, _ db: Database, _ memory: inout RegistryMemoryState) throws -> Int64 {
        if let id = memory.channelIDs[name] { return id }
        try db.execute(sql: "INSERT INTO channels (name) VALUES (?)", arguments: [name])
        let id = db.lastInsertedRowID
        memory.addChannel(name, id: id)
        return id
    }

    /// The id of an app (bundle id, environment), adding the app if it is new.
    static func appID(_ key: AppKey, _ db: Database, _ memory: inout RegistryMemoryState) throws -> Int64 {
        if let id = memory.appIDs[key] { return id }
        try db.execute(
            sql: "INSERT INTO apps (bundle_id, environment) VALUES (?, ?)",
            arguments: [key.bundleID, key.environment.rawValue])
        let id = db.lastInsertedRowID
        memory.addApp(key, id: id)
        return id
    }

    /// Names an open failure: a missing directory, a file that is not SQLite and a file in use get their own
    /// wording.
    /// Creates a registry file that does not exist yet with mode 0600 before SQLite opens it: it holds device
    /// tokens, payloads and idempotency answers, and SQLite gives the -wal and -shm files the database file's
    /// mode (review L4). An existing file keeps its mode; a file that cannot be made is left to SQLite, whose
    /// open then says why.
    static func createPrivately(_ path: String) {
        guard !path.isEmpty, path != ":memory:", !path.hasPrefix("file:") else { return }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if descriptor >= 0 { closeDescriptor(descriptor) }
    }

    private static func openError(path: String, _ error: any Error, operation: String? = nil) -> RegistryError {
        if let error = error as? RegistryError { return error }
        if let error = error as? DatabaseError {
            let detail = "\(error.message ?? "\(error.resultCode)") (SQLite error \(error.extendedResultCode.rawValue))"
            switch error.resultCode {
            case .SQLITE_CANTOPEN:
                let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
                var isDirectory: ObjCBool = false
                if !FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory)
                    || !isDirectory.boolValue
                {
                    return .storage("cannot open database '\(path)': directory '\(directory)' does not exist")
                }
                return .storage(
                    "cannot open database '\(path)': \(detail); check that it is a writable file in a writable directory"
                )
            case .SQLITE_NOTADB:
                return .storage("cannot open database '\(path)': the file is not an SQLite database: \(detail)")
            case .SQLITE_BUSY, .SQLITE_LOCKED:
                return .storage(
                    "cannot open database '\(path)': it is in use by another registry store or process "
                        + "(the registry keeps its file locked while open): \(detail)")
            default:
                break
            }
        }
        return storageError(operation ?? "opening database '\(path)'", error)
    }

    /// `<operation> failed: <SQLite message> (SQLite error <code>)`.
    static func storageError(_ operation: String, _ error: any Error) -> RegistryError {
        if let error = error as? RegistryError { return error }
        if let error = error as? DatabaseError {
            return .storage(
                "\(operation) failed: \(error.message ?? "\(error.resultCode)") "
                    + "(SQLite error \(error.extendedResultCode.rawValue))")
        }
        return .storage("\(operation) failed: \(error)")
    }
}

/// `close(2)`: inside `SQLiteTokenStore` the name means the store's own `close()`.
private func closeDescriptor(_ descriptor: Int32) {
    close(descriptor)
}

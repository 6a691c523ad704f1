import FanfareCore
import FanfareStorage
import GRDB

/// Writes `register`'s batch inside its transaction, in batch order (a token given twice is stored once, then
/// updated, exactly as two registrations in a row).
///
/// A new token (the usual case) is queued and written with multi-row INSERTs, `chunkSize` tokens at a time, so
/// SQLite's per-statement work (cursor set-up, halting, allocations) is paid once per chunk, not three times
/// per token; being new, its rows only append. A token that is already stored is read by id and only what
/// changed is written: an app re-registering on launch usually changes nothing but `last_seen_at`.
struct RegistrationWriter {
    static let chunkSize = 32
    /// Columns of one row in the multi-row token INSERT.
    private static let insertColumns: Int32 = 11

    private let db: Database
    /// The last id assigned. Ids are assigned here (the transaction is the only writer), so memberships of a
    /// queued token can be written without reading its id back.
    private var lastID: Int64
    /// Ids up to this one are in the table; the ones after it are queued in `queued`, in order.
    private var writtenThroughID: Int64

    private let read: RawStatement
    private let touch: RawStatement
    private let replace: RawStatement
    private let memberships: RawStatement
    private let clearMemberships: RawStatement
    private let addMembership: RawStatement
    /// Multi-row INSERTs by row count, prepared on first use (GRDB caches them per connection).
    private var tokenInserts: [Int: RawStatement] = [:]
    private var membershipInserts: [Int: RawStatement] = [:]

    /// New tokens not written yet; buffers are reused from chunk to chunk.
    private var queued: [Queued] = []
    /// Channel ids of the queued tokens; each queued token owns a range.
    private var queuedChannelIDs: [Int64] = []
    private var channelIDs: [Int64] = []
    private var storedChannelIDs: [Int64] = []

    private struct Queued {
        var registration: TokenRegistration
        var id: Int64
        var appID: Int64
        var channels: Range<Int>
    }

    init(_ db: Database) throws {
        self.db = db
        lastID = try Int64.fetchOne(db, sql: "SELECT max(id) FROM tokens") ?? 0
        writtenThroughID = lastID
        read = try RawStatement(
            db,
            sql: """
                SELECT token, kind, activity_id, device_id, attributes_type, app_id, frequent, last_seen_at,
                    supports_broadcast
                FROM tokens WHERE id = ?
                """)
        touch = try RawStatement(db, sql: "UPDATE tokens SET last_seen_at = ? WHERE id = ?")
        // Keeps `created_at`; `last_seen_at` only moves forward, so a late, older registration cannot make a
        // token look older than a 410 that came after a newer registration.
        replace = try RawStatement(
            db,
            sql: """
                UPDATE tokens
                SET kind = ?, activity_id = ?, device_id = ?, attributes_type = ?, app_id = ?, frequent = ?,
                    last_seen_at = max(last_seen_at, ?), supports_broadcast = ?
                WHERE id = ?
                """)
        memberships = try RawStatement(
            db, sql: "SELECT channel_id FROM token_channels WHERE token_id = ? ORDER BY channel_id")
        clearMemberships = try RawStatement(db, sql: "DELETE FROM token_channels WHERE token_id = ?")
        addMembership = try RawStatement(db, sql: "INSERT INTO token_channels (token_id, channel_id) VALUES (?, ?)")
        queued.reserveCapacity(Self.chunkSize)
    }

    /// Registers one token: queues it if new, updates it if stored. `channelIDs` may be unsorted and repeat.
    mutating func add(
        _ registration: TokenRegistration, appID: Int64, channelIDs unsortedChannelIDs: [Int64],
        state: inout RegistryMemoryState
    ) throws {
        // Sorted and unique, the form memberships are read back in for comparison.
        channelIDs.removeAll(keepingCapacity: true)
        channelIDs.append(contentsOf: unsortedChannelIDs)
        channelIDs.sort()
        channelIDs.removeAdjacentDuplicates()

        let hash = TokenIndex.hash(registration.token)
        var queuedMatch: Int?
        var storedMatch: StoredRow?
        _ = try state.tokens.firstID(hash: hash) { id in
            if id > writtenThroughID {
                let position = Int(id - writtenThroughID - 1)
                guard queued[position].registration.token == registration.token else { return false }
                queuedMatch = position
                return true
            }
            storedMatch = try readStoredRow(id: id, token: registration.token)
            return storedMatch != nil
        }

        if let queuedMatch {
            requeue(queuedMatch, with: registration, appID: appID)
        } else if let storedMatch {
            try update(storedMatch, with: registration, appID: appID)
        } else {
            guard lastID < Int64.max else { throw DatabaseError(message: "token ids are exhausted") }
            lastID += 1
            state.insertToken(hash: hash, id: lastID)
            let start = queuedChannelIDs.count
            queuedChannelIDs.append(contentsOf: channelIDs)
            queued.append(
                Queued(registration: registration, id: lastID, appID: appID, channels: start..<queuedChannelIDs.count))
            if queued.count == Self.chunkSize { try writeQueued() }
        }
    }

    /// Writes the tokens still queued.
    mutating func finish() throws {
        if !queued.isEmpty { try writeQueued() }
    }

    // MARK: - New tokens

    /// A queued token given again: the later fields and channels win, `createdAt` stays, `lastSeenAt` only moves
    /// forward (what two registrations in a row store).
    private mutating func requeue(_ position: Int, with registration: TokenRegistration, appID: Int64) {
        let earlier = queued[position].registration
        var merged = registration
        merged.createdAt = earlier.createdAt
        merged.lastSeenAt = max(earlier.lastSeenAt, registration.lastSeenAt)
        queued[position].registration = merged
        queued[position].appID = appID
        let start = queuedChannelIDs.count
        queuedChannelIDs.append(contentsOf: channelIDs)
        queued[position].channels = start..<queuedChannelIDs.count
    }

    private mutating func writeQueued() throws {
        let insert = try statement(&tokenInserts, queued.count) { count in
            let row = "(" + Array(repeating: "?", count: Int(Self.insertColumns)).joined(separator: ", ") + ")"
            // OR IGNORE: with the default ABORT, SQLite saves every page a multi-row statement touches in a
            // statement journal so it can undo just that statement (a third of the cost). Nothing can conflict
            // here (ids are new), and `runInserting` checks that every row went in.
            return """
                INSERT OR IGNORE INTO tokens (id, token, kind, activity_id, device_id, attributes_type, app_id,
                                              frequent, created_at, last_seen_at, supports_broadcast)
                VALUES \(Array(repeating: row, count: count).joined(separator: ", "))
                """
        }
        for (position, entry) in queued.enumerated() {
            let registration = entry.registration
            let base = Int32(position) * Self.insertColumns
            insert.bind(base + 1, entry.id)
            registration.token.withUnsafeBytes { insert.bind(base + 2, blob: $0) }
            insert.bind(base + 3, Int64(registration.kind.rawValue))
            insert.bind(base + 4, registration.activityID)
            insert.bind(base + 5, registration.deviceID)
            insert.bind(base + 6, registration.attributesType)
            insert.bind(base + 7, entry.appID)
            insert.bind(base + 8, registration.frequentUpdates)
            insert.bind(base + 9, registration.createdAt)
            insert.bind(base + 10, registration.lastSeenAt)
            insert.bind(base + 11, registration.supportsBroadcast)
        }
        try insert.runInserting(rows: queued.count)
        try writeQueuedMemberships()
        writtenThroughID = lastID
        queued.removeAll(keepingCapacity: true)
        queuedChannelIDs.removeAll(keepingCapacity: true)
    }

    /// Up to `chunkSize` (token, channel) pairs per statement.
    private mutating func writeQueuedMemberships() throws {
        var total = 0
        for entry in queued { total += entry.channels.count }
        var written = 0
        var bound = 0
        var insert = try membershipInsert(min(Self.chunkSize, total))
        for entry in queued {
            for channelID in queuedChannelIDs[entry.channels] {
                insert.bind(Int32(2 * bound + 1), entry.id)
                insert.bind(Int32(2 * bound + 2), channelID)
                bound += 1
                if bound == min(Self.chunkSize, total - written) {
                    try insert.runInserting(rows: bound)
                    written += bound
                    bound = 0
                    if written < total { insert = try membershipInsert(min(Self.chunkSize, total - written)) }
                }
            }
        }
        assert(written == total && bound == 0)
    }

    private mutating func membershipInsert(_ count: Int) throws -> RawStatement {
        try statement(&membershipInserts, count) { count in
            // OR IGNORE for the same reason as the token INSERT; pairs are unique (new token, distinct channels).
            "INSERT OR IGNORE INTO token_channels (token_id, channel_id) VALUES "
                + Array(repeating: "(?, ?)", count: count).joined(separator: ", ")
        }
    }

    // MARK: - Stored tokens

    /// The fields of a stored row that decide what an update must write.
    private struct StoredRow {
        var id: Int64
        var kind: Int64
        var activityID: String?
        var deviceID: String?
        var attributesType: String?
        var appID: Int64
        var frequentUpdates: Bool
        var lastSeenAt: Int64
        var supportsBroadcast: Bool
    }

    /// The row `id` if it holds `token` (a hash candidate may be another token).
    private func readStoredRow(id: Int64, token: DeviceToken) throws -> StoredRow? {
        read.bind(1, id)
        defer { read.reset() }
        guard try read.step() else { return nil }
        let stored = read.blob(0)
        guard token.withUnsafeBytes({ $0.elementsEqual(stored) }) else { return nil }
        return StoredRow(
            id: id, kind: read.int64(1), activityID: read.string(2), deviceID: read.string(3),
            attributesType: read.string(4), appID: read.int64(5), frequentUpdates: read.int64(6) != 0,
            lastSeenAt: read.int64(7), supportsBroadcast: read.int64(8) != 0)
    }

    /// Updates a stored token: only what changed.
    private mutating func update(_ stored: StoredRow, with registration: TokenRegistration, appID: Int64) throws {
        let kind = Int64(registration.kind.rawValue)
        let unchanged =
            stored.kind == kind && stored.activityID == registration.activityID
            && stored.deviceID == registration.deviceID && stored.attributesType == registration.attributesType
            && stored.appID == appID && stored.frequentUpdates == registration.frequentUpdates
            && stored.supportsBroadcast == registration.supportsBroadcast
        if !unchanged {
            replace.bind(1, kind)
            replace.bind(2, registration.activityID)
            replace.bind(3, registration.deviceID)
            replace.bind(4, registration.attributesType)
            replace.bind(5, appID)
            replace.bind(6, registration.frequentUpdates)
            replace.bind(7, registration.lastSeenAt)
            replace.bind(8, registration.supportsBroadcast)
            replace.bind(9, stored.id)
            try replace.run()
        } else if registration.lastSeenAt > stored.lastSeenAt {
            touch.bind(1, registration.lastSeenAt)
            touch.bind(2, stored.id)
            try touch.run()
        }

        storedChannelIDs.removeAll(keepingCapacity: true)
        memberships.bind(1, stored.id)
        do {
            defer { memberships.reset() }
            while try memberships.step() { storedChannelIDs.append(memberships.int64(0)) }
        }
        if storedChannelIDs != channelIDs {
            clearMemberships.bind(1, stored.id)
            try clearMemberships.run()
            for channelID in channelIDs {
                addMembership.bind(1, stored.id)
                addMembership.bind(2, channelID)
                try addMembership.run()
            }
        }
    }

    // MARK: - Helpers

    private func statement(
        _ cache: inout [Int: RawStatement], _ count: Int, sql: (Int) -> String
    ) throws
        -> RawStatement
    {
        if let statement = cache[count] { return statement }
        let statement = try RawStatement(db, sql: sql(count))
        cache[count] = statement
        return statement
    }
}

extension Array where Element: Equatable {
    /// Removes adjacent duplicates (all duplicates, once sorted).
    fileprivate mutating func removeAdjacentDuplicates() {
        guard count > 1 else { return }
        var kept = 1
        for index in 1..<count where self[index] != self[kept - 1] {
            self[kept] = self[index]
            kept += 1
        }
        removeLast(count - kept)
    }
}

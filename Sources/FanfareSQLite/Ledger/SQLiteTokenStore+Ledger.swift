import FanfareCore
import FanfareStorage
import GRDB
import GRDBSQLite

/// The token lifecycle ledger (docs/fanout.md, "Registry: the ledger") and the subscription reads.
extension SQLiteTokenStore: SubscriptionLedgerStore {
    public func ledger(
        token: DeviceToken, bundleID: String, environment: APNsEnvironment, activityLifetime: Duration
    ) throws(RegistryError) -> TokenLedgerEntry? {
        let lifetime = Self.milliseconds(activityLifetime)
        return try access("reading the ledger of token \(token.hexString)") { db in
            guard let appID = memory.withLock({ $0.appIDs[AppKey(bundleID, environment)] }) else { return nil }
            var entry = TokenLedgerEntry(token: token, bundleID: bundleID, environment: environment)
            if let found = try Self.registration(of: token, db, memory.withLock { $0.tokens }),
                found.registration.bundleID == bundleID, found.registration.environment == environment
            {
                let registration = found.registration
                entry.registration = registration
                entry.history.append(
                    TokenLedgerEvent(
                        kind: .registered, at: registration.createdAt, registrationKind: .init(registration.kind),
                        activityID: registration.activityID))
                try Self.addLinks(to: &entry, registration, appID: appID, db)
                if registration.kind == .update {
                    let (sum, overflow) = registration.createdAt.addingReportingOverflow(lifetime)
                    entry.retiresByLifetimeAt = overflow ? Int64.max : sum
                    entry.pendingRetirements = try Self.pendingRetirements(of: registration.channels, appID: appID, db)
                }
            }
            let history = try RawStatement(
                db,
                sql: """
                    SELECT kind, activity_id, registered_at, event, at, channel, reason, invalid_since, replaced_by
                    FROM token_history WHERE token = ? AND app_id = ? ORDER BY id DESC
                    """)
            token.withUnsafeBytes { history.bind(1, blob: $0) }
            history.bind(2, appID)
            try Self.readHistory(history, into: &entry.history)
            guard entry.registration != nil || !entry.history.isEmpty else { return nil }
            // Newest first; the sort is stable, so an ending stays before the registration it ended at the same ms.
            entry.history.sort { $0.at > $1.at }
            return entry
        }
    }

    /// What the registry knows about one activity of one app: its update tokens or broadcast subscription, and
    /// the history of registrations of that activity that ended. Nil when it knows nothing.
    public func ledger(
        activityID: String, bundleID: String, environment: APNsEnvironment
    )
        throws(RegistryError) -> ActivityLedgerEntry?
    {
        try access("reading the ledger of activity \(activityID)") { db in
            guard let appID = memory.withLock({ $0.appIDs[AppKey(bundleID, environment)] }) else { return nil }
            var entry = ActivityLedgerEntry(activityID: activityID)
            let tokens = try RawStatement(
                db,
                sql: """
                    SELECT id, token FROM tokens
                    WHERE app_id = ? AND activity_id = ? AND kind = \(TokenKind.update.rawValue) ORDER BY id
                    """)
            tokens.bind(1, appID)
            tokens.bind(2, activityID)
            do {
                defer { tokens.reset() }
                while try tokens.step() {
                    entry.updateTokens.append(try RegistrationReader.token(tokens.blob(1), id: tokens.int64(0)))
                }
            }
            entry.subscription = try Self.subscription(activityID: activityID, appID: appID, bundleID, environment, db)
            let history = try RawStatement(
                db,
                sql: """
                    SELECT kind, activity_id, registered_at, event, at, channel, reason, invalid_since, replaced_by,
                        token
                    FROM token_history WHERE app_id = ? AND activity_id = ? ORDER BY id DESC
                    """)
            history.bind(1, appID)
            history.bind(2, activityID)
            try Self.readHistory(history, into: &entry.history)
            guard !entry.updateTokens.isEmpty || entry.subscription != nil || !entry.history.isEmpty else { return nil }
            entry.history.sort { $0.at > $1.at }
            return entry
        }
    }

    /// One broadcast subscription, or nil.
    public func subscription(
        activityID: String, bundleID: String, environment: APNsEnvironment
    )
        throws(RegistryError) -> BroadcastSubscription?
    {
        try access("reading broadcast subscription \(activityID)") { db in
            guard let appID = memory.withLock({ $0.appIDs[AppKey(bundleID, environment)] }) else { return nil }
            return try Self.subscription(activityID: activityID, appID: appID, bundleID, environment, db)
        }
    }

    public func subscriptionCounts(
        bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError)
        -> [String: Int]
    {
        try access("counting the broadcast subscriptions of \(bundleID) (\(environment))") { db in
            guard let appID = memory.withLock({ $0.appIDs[AppKey(bundleID, environment)] }) else { return [:] }
            var counts: [String: Int] = [:]
            let rows = try Row.fetchCursor(
                db, sql: "SELECT channel, count(*) FROM subscription_channels WHERE app_id = ? GROUP BY channel",
                arguments: [appID])
            while let row = try rows.next() { counts[row[0]] = row[1] }
            return counts
        }
    }

    public func subscriptionCount(
        channel: String, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> Int {
        try access("counting the broadcast subscriptions of \(channel)") { db in
            guard let appID = memory.withLock({ $0.appIDs[AppKey(bundleID, environment)] }) else { return 0 }
            return try Int.fetchOne(
                db, sql: "SELECT count(*) FROM subscription_channels WHERE channel = ? AND app_id = ?",
                arguments: [channel, appID]) ?? 0
        }
    }

    /// Deletes ledger history older than `before` (UNIX ms); returns how many rows went. The maintenance sweep
    /// (`retire(createdBefore:)`) does this with the store's retention.
    @discardableResult
    public func pruneLedgerHistory(before: Int64) throws(RegistryError) -> Int {
        try transaction("pruning the ledger history") { db, _ in
            try db.execute(sql: "DELETE FROM token_history WHERE at < ?", arguments: [before])
            return db.changesCount
        }
    }

    // MARK: - Helpers

    private static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        let (milliseconds, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        return overflow ? (seconds < 0 ? 0 : Int64.max / 2) : max(0, milliseconds + attoseconds / 1_000_000_000_000_000)
    }

    /// Links: an update token -> the push-to-start token of its device and type; a push-to-start token -> the
    /// activities (update tokens and subscriptions) of its device and type.
    private static func addLinks(
        to entry: inout TokenLedgerEntry, _ registration: TokenRegistration, appID: Int64, _ db: Database
    ) throws {
        guard let deviceID = registration.deviceID, let attributesType = registration.attributesType else { return }
        switch registration.kind {
        case .update:
            let select = try RawStatement(
                db,
                sql: """
                    SELECT id, token FROM tokens
                    WHERE app_id = ? AND device_id = ? AND attributes_type = ? AND kind =
                        \(TokenKind.pushToStart.rawValue)
                    ORDER BY id DESC LIMIT 1
                    """)
            select.bind(1, appID)
            select.bind(2, deviceID)
            select.bind(3, attributesType)
            defer { select.reset() }
            if try select.step() { entry.startedBy = try RegistrationReader.token(select.blob(1), id: select.int64(0)) }
        case .pushToStart:
            let tokens = try RawStatement(
                db,
                sql: """
                    SELECT t.id, t.token, t.activity_id, t.created_at,
                           (SELECT group_concat(c.name, char(10)) FROM token_channels AS m JOIN channels AS c
                            ON c.id = m.channel_id WHERE m.token_id = t.id)
                    FROM tokens AS t
                    WHERE t.app_id = ? AND t.device_id = ? AND t.attributes_type = ? AND t.kind =
                        \(TokenKind.update.rawValue)
                    ORDER BY t.id
                    """)
            tokens.bind(1, appID)
            tokens.bind(2, deviceID)
            tokens.bind(3, attributesType)
            do {
                defer { tokens.reset() }
                while try tokens.step() {
                    entry.activities.append(
                        LedgerActivity(
                            activityID: tokens.string(2) ?? "",
                            token: try RegistrationReader.token(tokens.blob(1), id: tokens.int64(0)),
                            channels: channelList(tokens.string(4)), createdAt: tokens.int64(3)))
                }
            }
            let subscriptions = try RawStatement(
                db,
                sql: """
                    SELECT s.activity_id, s.created_at,
                           (SELECT group_concat(m.channel, char(10)) FROM subscription_channels AS m
                            WHERE m.app_id = s.app_id AND m.activity_id = s.activity_id)
                    FROM broadcast_subscriptions AS s
                    WHERE s.app_id = ? AND s.device_id = ? AND s.attributes_type = ?
                    ORDER BY s.created_at
                    """)
            subscriptions.bind(1, appID)
            subscriptions.bind(2, deviceID)
            subscriptions.bind(3, attributesType)
            defer { subscriptions.reset() }
            while try subscriptions.step() {
                entry.activities.append(
                    LedgerActivity(
                        activityID: subscriptions.string(0) ?? "", token: nil,
                        channels: channelList(subscriptions.string(2)), createdAt: subscriptions.int64(1)))
            }
        }
    }

    /// A `group_concat(..., char(10))` of channel names, sorted.
    private static func channelList(_ text: String?) -> [String] {
        guard let text, !text.isEmpty else { return [] }
        return text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init).sorted()
    }

    private static func pendingRetirements(
        of channels: [String], appID: Int64, _ db: Database
    ) throws
        -> [String: Int64]
    {
        let select = try RawStatement(
            db, sql: "SELECT due_at FROM pending_retirements WHERE app_id = ? AND channel = ?")
        var due: [String: Int64] = [:]
        for channel in channels {
            select.bind(1, appID)
            select.bind(2, channel)
            defer { select.reset() }
            if try select.step() { due[channel] = select.int64(0) }
        }
        return due
    }

    /// Reads history rows (kind, activity_id, registered_at, event, at, channel, reason, invalid_since,
    /// replaced_by): each gives its ending and the registration it ended.
    private static func readHistory(_ rows: RawStatement, into events: inout [TokenLedgerEvent]) throws {
        defer { rows.reset() }
        while try rows.step() {
            let columns = StoredWaveColumns(row: rows, name: "a row of token_history")
            let kindValue = try columns.integer(0, "kind")
            let eventValue = try columns.integer(3, "event")
            guard let registrationKind = LedgerRegistrationKind(rawValue: Int(truncatingIfNeeded: kindValue)) else {
                throw columns.corrupt("kind", "is unknown (\(kindValue))")
            }
            guard let eventKind = TokenLedgerEvent.Kind(rawValue: Int(truncatingIfNeeded: eventValue)),
                eventKind != .registered
            else { throw columns.corrupt("event", "is unknown (\(eventValue))") }
            let activityID = try columns.optionalText(1, "activity_id")
            var replacedBy: DeviceToken?
            if rows.type(8) == SQLITE_BLOB { replacedBy = try RegistrationReader.token(rows.blob(8), id: 0) }
            events.append(
                TokenLedgerEvent(
                    kind: eventKind, at: try columns.integer(4, "at"), registrationKind: registrationKind,
                    activityID: activityID, replacedBy: replacedBy, channel: try columns.optionalText(5, "channel"),
                    reason: try columns.optionalText(6, "reason"),
                    invalidSince: try columns.optionalInteger(7, "invalid_since")))
            events.append(
                TokenLedgerEvent(
                    kind: .registered, at: try columns.integer(2, "registered_at"), registrationKind: registrationKind,
                    activityID: activityID))
        }
    }

    private static func subscription(
        activityID: String, appID: Int64, _ bundleID: String, _ environment: APNsEnvironment, _ db: Database
    ) throws -> BroadcastSubscription? {
        guard
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT device_id, attributes_type, frequent, created_at, last_seen_at
                    FROM broadcast_subscriptions WHERE app_id = ? AND activity_id = ?
                    """, arguments: [appID, activityID])
        else { return nil }
        let channels = try String.fetchAll(
            db, sql: "SELECT channel FROM subscription_channels WHERE app_id = ? AND activity_id = ? ORDER BY channel",
            arguments: [appID, activityID])
        return BroadcastSubscription(
            activityID: activityID, deviceID: row[0], attributesType: row[1], bundleID: bundleID,
            environment: environment, frequentUpdates: (row[2] as Int64) != 0, channels: channels,
            createdAt: row[3], lastSeenAt: row[4])
    }
}

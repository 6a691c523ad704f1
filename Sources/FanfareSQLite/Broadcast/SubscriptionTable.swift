import FanfareCore
import FanfareStorage
import GRDB

/// The broadcast subscription tables (`broadcast_subscriptions`, `subscription_channels`), inside one of the
/// store's transactions. Every change adjusts the caller's per-channel count deltas.
struct SubscriptionTable {
    private let selectChannels: RawStatement
    private let deleteChannel: RawStatement
    private let insertChannel: RawStatement
    private let deleteChannels: RawStatement
    private let deleteSubscription: RawStatement
    private let upsertSubscription: RawStatement
    private let db: Database
    private var channels: [String] = []

    init(_ db: Database) throws {
        self.db = db
        selectChannels = try RawStatement(
            db, sql: "SELECT channel FROM subscription_channels WHERE app_id = ? AND activity_id = ?")
        deleteChannel = try RawStatement(
            db, sql: "DELETE FROM subscription_channels WHERE channel = ? AND app_id = ? AND activity_id = ?")
        insertChannel = try RawStatement(
            db, sql: "INSERT OR IGNORE INTO subscription_channels (channel, app_id, activity_id) VALUES (?, ?, ?)")
        deleteChannels = try RawStatement(
            db, sql: "DELETE FROM subscription_channels WHERE app_id = ? AND activity_id = ?")
        deleteSubscription = try RawStatement(
            db,
            sql: """
                DELETE FROM broadcast_subscriptions WHERE app_id = ? AND activity_id = ?
                RETURNING device_id, attributes_type, created_at
                """)
        // Registering again keeps `created_at`; `last_seen_at` only moves forward (as for tokens).
        upsertSubscription = try RawStatement(
            db,
            sql: """
                INSERT INTO broadcast_subscriptions (app_id, activity_id, device_id, attributes_type, frequent,
                    created_at,
                                                     last_seen_at)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (app_id, activity_id) DO UPDATE
                SET device_id = excluded.device_id, attributes_type = excluded.attributes_type,
                    frequent = excluded.frequent, last_seen_at = max(last_seen_at, excluded.last_seen_at)
                """)
    }

    /// Whether the app has any subscription (so registering update tokens can skip the one-path check).
    func exist(appID: Int64) throws -> Bool {
        try Bool.fetchOne(
            db, sql: "SELECT EXISTS (SELECT 1 FROM broadcast_subscriptions WHERE app_id = ?)", arguments: [appID])
            ?? false
    }

    /// (app id, activity id) of the subscriptions following `channel`, any app.
    func following(_ channel: String) throws -> [(Int64, String)] {
        try Row.fetchAll(
            db, sql: "SELECT app_id, activity_id FROM subscription_channels WHERE channel = ?", arguments: [channel]
        ).map { ($0[0], $0[1]) }
    }

    /// (app id, activity id) of the subscriptions created before `time` (UNIX ms), any app.
    func created(before time: Int64) throws -> [(Int64, String)] {
        try Row.fetchAll(
            db, sql: "SELECT app_id, activity_id FROM broadcast_subscriptions WHERE created_at < ?", arguments: [time]
        ).map { ($0[0], $0[1]) }
    }

    /// The channels of one subscription, in no particular order.
    mutating func channels(appID: Int64, activityID: String) throws -> [String] {
        selectChannels.bind(1, appID)
        selectChannels.bind(2, activityID)
        defer { selectChannels.reset() }
        var result: [String] = []
        while try selectChannels.step() { result.append(selectChannels.string(0) ?? "") }
        return result
    }

    /// Removes a subscription and its channels; returns what it was, or nil if there was none.
    mutating func remove(appID: Int64, activityID: String, _ deltas: inout [String: Int]) throws -> EndedRegistration? {
        deleteSubscription.bind(1, appID)
        deleteSubscription.bind(2, activityID)
        let ended: EndedRegistration
        do {
            defer { deleteSubscription.reset() }
            guard try deleteSubscription.step() else { return nil }
            ended = EndedRegistration(
                appID: appID, token: nil, kind: .broadcastSubscription, activityID: activityID,
                deviceID: deleteSubscription.string(0), attributesType: deleteSubscription.string(1),
                createdAt: deleteSubscription.int64(2))
        }
        for channel in try channels(appID: appID, activityID: activityID) { deltas.add(-1, to: channel) }
        deleteChannels.bind(1, appID)
        deleteChannels.bind(2, activityID)
        try deleteChannels.run()
        return ended
    }

    /// Inserts or updates a subscription and sets its channels to `subscription.channels`.
    mutating func upsert(_ subscription: BroadcastSubscription, appID: Int64, _ deltas: inout [String: Int]) throws {
        upsertSubscription.bind(1, appID)
        upsertSubscription.bind(2, subscription.activityID)
        upsertSubscription.bind(3, subscription.deviceID)
        upsertSubscription.bind(4, subscription.attributesType)
        upsertSubscription.bind(5, subscription.frequentUpdates)
        upsertSubscription.bind(6, subscription.createdAt)
        upsertSubscription.bind(7, subscription.lastSeenAt)
        try upsertSubscription.run()

        let stored = Set(try channels(appID: appID, activityID: subscription.activityID))
        let wanted = Set(subscription.channels)
        for channel in stored.subtracting(wanted) {
            deleteChannel.bind(1, channel)
            deleteChannel.bind(2, appID)
            deleteChannel.bind(3, subscription.activityID)
            try deleteChannel.run()
            deltas.add(-1, to: channel)
        }
        for channel in wanted.subtracting(stored) {
            insertChannel.bind(1, channel)
            insertChannel.bind(2, appID)
            insertChannel.bind(3, subscription.activityID)
            try insertChannel.run()
            deltas.add(1, to: channel)
        }
    }
}

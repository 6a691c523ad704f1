import FanfareCore
import FanfareStorage
import GRDB

/// `register`'s replacement rules (docs/fanout.md, "Registry"), applied in its transaction after the batch's
/// tokens are written:
/// - a push-to-start token replaces every other push-to-start token of its (app, device id, attributes type);
/// - an update token replaces the broadcast subscription of its activity;
/// - a broadcast subscription replaces the update tokens of its activity.
/// Each replaced registration gets a `replaced` history row; `result` collects what went.
struct ReplacementRules {
    private(set) var result = RegistrationResult()
    private let history: LedgerHistoryWriter
    private var subscriptions: SubscriptionTable
    private let deleteOtherPushToStart: RawStatement
    private let deleteActivityTokens: RawStatement

    init(_ db: Database, history: LedgerHistoryWriter) throws {
        self.history = history
        subscriptions = try SubscriptionTable(db)
        deleteOtherPushToStart = try RawStatement(
            db,
            sql: """
                DELETE FROM tokens
                WHERE app_id = ? AND device_id = ? AND attributes_type = ? AND kind = \(TokenKind.pushToStart.rawValue)
                  AND token != ?
                """ + " " + EndedRegistration.returningTokenColumns)
        deleteActivityTokens = try RawStatement(
            db,
            sql: "DELETE FROM tokens WHERE app_id = ? AND activity_id = ? AND kind = \(TokenKind.update.rawValue) "
                + EndedRegistration.returningTokenColumns)
    }

    private struct DeviceKey: Hashable {
        var appID: Int64
        var deviceID: String
        var attributesType: String
    }

    /// The rules for the batch's tokens (`appIDs[i]` is registration i's app).
    mutating func apply(
        _ registrations: [TokenRegistration], appIDs: [Int64], _ memory: inout RegistryMemoryState
    )
        throws
    {
        // The last push-to-start token of each device and type wins (earlier ones in the batch are replaced too).
        var latest: [DeviceKey: Int] = [:]
        for (index, registration) in registrations.enumerated() where registration.kind == .pushToStart {
            guard let deviceID = registration.deviceID, let attributesType = registration.attributesType else {
                continue
            }
            latest[DeviceKey(appID: appIDs[index], deviceID: deviceID, attributesType: attributesType)] = index
        }
        for (key, index) in latest.sorted(by: { $0.value < $1.value }) {
            let winner = registrations[index].token
            deleteOtherPushToStart.bind(1, key.appID)
            deleteOtherPushToStart.bind(2, key.deviceID)
            deleteOtherPushToStart.bind(3, key.attributesType)
            winner.withUnsafeBytes { deleteOtherPushToStart.bind(4, blob: $0) }
            result.replacedTokens += try SQLiteTokenStore.drain(deleteOtherPushToStart, &memory) { ended in
                try history.record(ended, .replaced, replacedBy: winner)
            }
        }

        var appsWithSubscriptions: [Int64: Bool] = [:]
        for (index, registration) in registrations.enumerated() where registration.kind == .update {
            guard let activityID = registration.activityID else { continue }
            let appID = appIDs[index]
            if appsWithSubscriptions[appID] == nil {
                appsWithSubscriptions[appID] = try subscriptions.exist(appID: appID)
            }
            guard appsWithSubscriptions[appID] == true else { continue }
            guard let ended = try subscriptions.remove(appID: appID, activityID: activityID, &result.subscriptionDeltas)
            else { continue }
            try history.record(ended, .replaced, replacedBy: registration.token)
            result.replacedSubscriptions.append(activityID)
        }
    }

    /// The rules for one subscription, then the subscription itself.
    mutating func apply(
        _ subscription: BroadcastSubscription, appID: Int64, _ memory: inout RegistryMemoryState
    )
        throws
    {
        deleteActivityTokens.bind(1, appID)
        deleteActivityTokens.bind(2, subscription.activityID)
        result.replacedTokens += try SQLiteTokenStore.drain(deleteActivityTokens, &memory) { ended in
            try history.record(ended, .replaced)
        }
        try subscriptions.upsert(subscription, appID: appID, &result.subscriptionDeltas)
    }
}

import FanfareCore
import FanfareStorage
import GRDB

/// Streams one app's registrations out of the tables (`forEachRegistration`), for start-up loading.
enum RegistrationReader {
    /// Wraps an error thrown by the caller's callback, so it is not reported as a storage fault.
    struct CallbackError: Error {
        var underlying: any Error
    }

    /// Calls `body` for every registration of (bundle id, environment), in token id order.
    static func forEach(
        _ bundleID: String, _ environment: APNsEnvironment, _ db: Database, _ body: (TokenRegistration) throws -> Void
    ) throws {
        guard
            let appID = try Int64.fetchOne(
                db, sql: "SELECT id FROM apps WHERE bundle_id = ? AND environment = ?",
                arguments: [bundleID, environment.rawValue])
        else { return }
        // Channel names once, so each membership row carries only an integer.
        var channelNames: [Int64: String] = [:]
        let channelRows = try Row.fetchCursor(db, sql: "SELECT id, name FROM channels")
        while let row = try channelRows.next() { channelNames[row[0]] = row[1] }

        // Tokens and their memberships in token id order: both tables are keyed by it, so SQLite walks them side
        // by side without sorting, and consecutive rows of one token form one registration.
        let rows = try RawStatement(
            db,
            sql: """
                SELECT t.id, t.token, t.kind, t.activity_id, t.device_id, t.attributes_type, t.frequent, t.created_at,
                       t.last_seen_at, m.channel_id, t.supports_broadcast
                FROM tokens AS t CROSS JOIN token_channels AS m ON m.token_id = t.id
                WHERE t.app_id = ?
                ORDER BY t.id
                """)
        rows.bind(1, appID)
        defer { rows.reset() }
        var pending: TokenRegistration?
        var pendingID: Int64 = 0
        while try rows.step() {
            let id = rows.int64(0)
            let channelID = rows.int64(9)
            guard let channel = channelNames[channelID] else {
                throw RegistryError.storage("token row \(id) follows unknown channel id \(channelID)")
            }
            if pending != nil && pendingID == id {
                pending!.channels.append(channel)
                continue
            }
            if let finished = pending { try deliver(finished, to: body) }
            let kindValue = rows.int64(2)
            guard let kind = TokenKind(rawValue: UInt8(truncatingIfNeeded: kindValue)) else {
                throw RegistryError.storage("token row \(id) has unknown kind \(kindValue)")
            }
            pendingID = id
            pending = TokenRegistration(
                token: try token(rows.blob(1), id: id), kind: kind, activityID: rows.string(3),
                deviceID: rows.string(4), attributesType: rows.string(5), bundleID: bundleID,
                environment: environment, frequentUpdates: rows.int64(6) != 0,
                supportsBroadcast: rows.int64(10) != 0, channels: [channel],
                createdAt: rows.int64(7), lastSeenAt: rows.int64(8))
        }
        if let finished = pending { try deliver(finished, to: body) }
    }

    /// A stored token's bytes as a `DeviceToken`; a malformed one is a storage error naming its row.
    static func token(_ bytes: UnsafeRawBufferPointer, id: Int64) throws -> DeviceToken {
        do {
            return try DeviceToken(bytes: bytes)
        } catch {
            throw RegistryError.storage("token row \(id) holds a malformed token: \(error)")
        }
    }

    private static func deliver(_ registration: TokenRegistration, to body: (TokenRegistration) throws -> Void) throws {
        do { try body(registration) } catch { throw CallbackError(underlying: error) }
    }
}

import FanfareCore
import FanfareStorage
import GRDB

extension SQLiteTokenStore {
    /// One token's registration (any app), or nil if it is not registered. Found through the in-memory index,
    /// so this costs a few row reads whatever the registry's size.
    public func registration(of token: DeviceToken) throws(RegistryError) -> TokenRegistration? {
        try access("looking up token \(token.hexString)") { db in
            try Self.registration(of: token, db, memory.withLock { $0.tokens })?.registration
        }
    }

    /// The registration of `token` and its row id, inside an access.
    static func registration(
        of token: DeviceToken, _ db: Database, _ index: TokenIndex
    ) throws
        -> (registration: TokenRegistration, id: Int64)?
    {
        let hash = TokenIndex.hash(token)
        let select = try RawStatement(
            db,
            sql: """
                SELECT t.kind, t.activity_id, t.device_id, t.attributes_type, t.frequent, t.created_at,
                       t.last_seen_at, a.bundle_id, a.environment, t.supports_broadcast
                FROM tokens AS t JOIN apps AS a ON a.id = t.app_id
                WHERE t.id = ? AND t.token = ?
                """)
        defer { select.reset() }
        var found: TokenRegistration?
        var foundID: Int64 = 0
        _ = try index.firstID(hash: hash) { id in
            select.reset()
            select.bind(1, id)
            token.withUnsafeBytes { select.bind(2, blob: $0) }
            guard try select.step() else { return false }
            let kindValue = select.int64(0)
            let environmentValue = select.int64(8)
            guard let kind = TokenKind(rawValue: UInt8(truncatingIfNeeded: kindValue)),
                let environment = APNsEnvironment(rawValue: UInt8(truncatingIfNeeded: environmentValue))
            else {
                throw RegistryError.storage(
                    "token row \(id) has unknown kind \(kindValue) or environment \(environmentValue)")
            }
            found = TokenRegistration(
                token: token, kind: kind, activityID: select.string(1), deviceID: select.string(2),
                attributesType: select.string(3), bundleID: select.string(7) ?? "", environment: environment,
                frequentUpdates: select.int64(4) != 0, supportsBroadcast: select.int64(9) != 0, channels: [],
                createdAt: select.int64(5),
                lastSeenAt: select.int64(6))
            foundID = id
            return true
        }
        guard var registration = found else { return nil }
        registration.channels = try String.fetchAll(
            db,
            sql: """
                SELECT c.name FROM token_channels AS m JOIN channels AS c ON c.id = m.channel_id
                WHERE m.token_id = ? ORDER BY c.name
                """, arguments: [foundID])
        return (registration, foundID)
    }
}

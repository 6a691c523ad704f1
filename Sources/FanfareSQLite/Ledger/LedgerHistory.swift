import FanfareCore
import FanfareStorage
import GRDB

/// A registration as it was when it ended (read from a DELETE's RETURNING), for its history row.
struct EndedRegistration {
    var appID: Int64
    /// Nil for a broadcast subscription.
    var token: DeviceToken?
    var kind: LedgerRegistrationKind
    var activityID: String?
    var deviceID: String?
    var attributesType: String?
    var createdAt: Int64

    /// The RETURNING clause of every token DELETE; `init(row:)` reads it.
    static let returningTokenColumns =
        "RETURNING id, token, app_id, kind, activity_id, device_id, attributes_type, created_at"

    /// Columns 0-7 of `returningTokenColumns` (column 0, the row id, is the caller's).
    init(tokenRow row: RawStatement) throws {
        let id = row.int64(0)
        let token = try RegistrationReader.token(row.blob(1), id: id)
        let kindValue = row.int64(3)
        guard let tokenKind = TokenKind(rawValue: UInt8(truncatingIfNeeded: kindValue)) else {
            throw RegistryError.storage("token row \(id) has unknown kind \(kindValue)")
        }
        self.init(
            appID: row.int64(2), token: token, kind: LedgerRegistrationKind(tokenKind), activityID: row.string(4),
            deviceID: row.string(5), attributesType: row.string(6), createdAt: row.int64(7))
    }

    init(
        appID: Int64, token: DeviceToken?, kind: LedgerRegistrationKind, activityID: String?, deviceID: String?,
        attributesType: String?, createdAt: Int64
    ) {
        self.appID = appID
        self.token = token
        self.kind = kind
        self.activityID = activityID
        self.deviceID = deviceID
        self.attributesType = attributesType
        self.createdAt = createdAt
    }
}

/// Appends the ledger's history rows (table `token_history`) inside the transaction that ended a registration.
struct LedgerHistoryWriter {
    private let insert: RawStatement
    /// The event time (UNIX ms) of every row this writer adds: one transaction, one instant.
    let now: Int64

    init(_ db: Database, now: Int64) throws {
        insert = try RawStatement(
            db,
            sql: """
                INSERT INTO token_history (app_id, token, kind, activity_id, device_id, attributes_type, registered_at,
                                           event, at, channel, reason, invalid_since, replaced_by)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        self.now = now
    }

    func record(
        _ ended: EndedRegistration, _ event: TokenLedgerEvent.Kind, channel: String? = nil, reason: String? = nil,
        invalidSince: Int64? = nil, replacedBy: DeviceToken? = nil
    ) throws {
        insert.bind(1, ended.appID)
        if let token = ended.token {
            token.withUnsafeBytes { insert.bind(2, blob: $0) }
        } else {
            insert.bind(2, nil as Int64?)
        }
        insert.bind(3, Int64(ended.kind.rawValue))
        insert.bind(4, ended.activityID)
        insert.bind(5, ended.deviceID)
        insert.bind(6, ended.attributesType)
        insert.bind(7, ended.createdAt)
        insert.bind(8, Int64(event.rawValue))
        insert.bind(9, now)
        insert.bind(10, channel)
        insert.bind(11, reason)
        insert.bind(12, invalidSince)
        if let replacedBy {
            replacedBy.withUnsafeBytes { insert.bind(13, blob: $0) }
        } else {
            insert.bind(13, nil as Int64?)
        }
        try insert.run()
    }
}

import FanfareStorage
import Foundation
import GRDB

extension SQLiteTokenStore: ServiceStorage {
    /// The stored response for (scope, key) created at or after `notBefore` (UNIX ms); older ones count as gone.
    public func storedResponse(scope: String, key: String, notBefore: Int64) throws(RegistryError) -> StoredResponse? {
        try access("reading idempotency key") { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT fingerprint, status, headers, body, created_at FROM idempotency_keys
                        WHERE scope = ? AND key = ? AND created_at >= ?
                        """, arguments: [scope, key, notBefore])
            else { return nil }
            let fingerprint: [UInt8] = [UInt8](row[0] as Data)
            let body: [UInt8] = [UInt8](row[3] as Data)
            return StoredResponse(
                scope: scope, key: key, fingerprint: fingerprint, status: row[1],
                headers: StoredResponse.decodeHeaders(row[2]),
                body: body, createdAt: row[4])
        }
    }

    /// Stores (or replaces) a response; durable when this returns.
    public func store(_ response: StoredResponse) throws(RegistryError) {
        try access("storing idempotency key") { db in
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO idempotency_keys (scope, key, fingerprint, status, headers, body, created_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    response.scope, response.key, Data(response.fingerprint), response.status,
                    StoredResponse.encodeHeaders(response.headers), Data(response.body), response.createdAt,
                ])
        }
    }

    /// Deletes stored responses created before `createdBefore` (UNIX ms); returns how many.
    @discardableResult
    public func deleteStoredResponses(createdBefore: Int64) throws(RegistryError) -> Int {
        try access("expiring idempotency keys") { db in
            try db.execute(sql: "DELETE FROM idempotency_keys WHERE created_at < ?", arguments: [createdBefore])
            return db.changesCount
        }
    }
}

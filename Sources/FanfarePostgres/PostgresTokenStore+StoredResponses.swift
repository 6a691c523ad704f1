import FanfareStorage
import NIOCore
import PostgresNIO

/// Idempotency answers (migration 3), as SQLiteTokenStore keeps them; with `close()` the store is all that
/// `fanfare serve` needs (`ServiceStorage`).
extension PostgresTokenStore: ServiceStorage {
    public func storedResponse(scope: String, key: String, notBefore: Int64) throws(RegistryError) -> StoredResponse? {
        try inTransaction("reading idempotency key") { connection, logger in
            for try await (fingerprint, status, headers, body, createdAt) in try await connection.query(
                """
                SELECT fingerprint, status, headers, body, created_at FROM idempotency_keys
                WHERE scope = \(scope) AND key = \(key) AND created_at >= \(notBefore)
                """, logger: logger
            ).decode((ByteBuffer, Int32, String, ByteBuffer, Int64).self) {
                return StoredResponse(
                    scope: scope, key: key, fingerprint: Array(fingerprint.readableBytesView), status: Int(status),
                    headers: StoredResponse.decodeHeaders(headers), body: Array(body.readableBytesView),
                    createdAt: createdAt)
            }
            return nil
        }
    }

    public func store(_ response: StoredResponse) throws(RegistryError) {
        guard let status = Int32(exactly: response.status) else {
            throw .storage("storing idempotency key: status \(response.status) is out of range")
        }
        let fingerprint = ByteBuffer(bytes: response.fingerprint)
        let body = ByteBuffer(bytes: response.body)
        let headers = StoredResponse.encodeHeaders(response.headers)
        try inTransaction("storing idempotency key") { connection, logger in
            try await connection.query(
                """
                INSERT INTO idempotency_keys (scope, key, fingerprint, status, headers, body, created_at)
                VALUES (\(response.scope), \(response.key), \(fingerprint), \(status), \(headers), \(body),
                        \(response.createdAt))
                ON CONFLICT (scope, key) DO UPDATE SET
                    fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status, headers = EXCLUDED.headers,
                    body = EXCLUDED.body, created_at = EXCLUDED.created_at
                """, logger: logger)
        }
    }

    @discardableResult
    public func deleteStoredResponses(createdBefore: Int64) throws(RegistryError) -> Int {
        try inTransaction("expiring idempotency keys") { connection, logger in
            try await connection.query(
                "DELETE FROM idempotency_keys WHERE created_at < \(createdBefore)", logger: logger
            ).get().metadata.rows ?? 0
        }
    }
}

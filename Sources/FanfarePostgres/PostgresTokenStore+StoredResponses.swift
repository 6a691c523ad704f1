import FanfareStorage
import NIOCore
import PostgresNIO

/// Idempotency answers (migration 3), as SQLiteTokenStore keeps them; with `close()` the store is all that
/// `fanfare serve` needs (`ServiceStorage`).
extension PostgresTokenStore: ServiceStorage, StoredResponseClaims {
    /// A claim is a row with status 0 (no answer has that status); answers replace it.
    static let claimStatus: Int32 = 0

    public func storedResponse(scope: String, key: String, notBefore: Int64) throws(RegistryError) -> StoredResponse? {
        try inTransaction("reading idempotency key") { connection, logger in
            for try await (fingerprint, status, headers, body, createdAt) in try await connection.query(
                """
                SELECT fingerprint, status, headers, body, created_at FROM idempotency_keys
                WHERE scope = \(scope) AND key = \(key) AND created_at >= \(notBefore)
                  AND status <> \(Self.claimStatus)
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

    public func claimResponse(
        scope: String, key: String, fingerprint: [UInt8], now: Int64, notBefore: Int64, claimFor: Int64
    ) throws(RegistryError) -> ResponseClaim {
        let print = ByteBuffer(bytes: fingerprint)
        return try inTransaction("claiming idempotency key") { connection, logger -> ResponseClaim in
            // Taken when there is no row, or its answer expired, or it is a claim older than `claimFor` (its node
            // died mid-request).
            let taken =
                try await connection.query(
                    """
                    INSERT INTO idempotency_keys (scope, key, fingerprint, status, headers, body, created_at)
                    VALUES (\(scope), \(key), \(print), \(Self.claimStatus), '', '', \(now))
                    ON CONFLICT (scope, key) DO UPDATE SET
                        fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status, headers = '', body = '',
                        created_at = EXCLUDED.created_at
                    WHERE (idempotency_keys.status <> \(Self.claimStatus)
                           AND idempotency_keys.created_at < \(notBefore))
                       OR (idempotency_keys.status = \(Self.claimStatus)
                           AND idempotency_keys.created_at < \(now - claimFor))
                    """, logger: logger
                ).get().metadata.rows ?? 0
            if taken > 0 { return .claimed }
            for try await (stored, status, headers, body, createdAt) in try await connection.query(
                """
                SELECT fingerprint, status, headers, body, created_at FROM idempotency_keys
                WHERE scope = \(scope) AND key = \(key)
                """, logger: logger
            ).decode((ByteBuffer, Int32, String, ByteBuffer, Int64).self) {
                let storedPrint = Array(stored.readableBytesView)
                if status == Self.claimStatus { return .inProgress(fingerprint: storedPrint) }
                return .answered(
                    StoredResponse(
                        scope: scope, key: key, fingerprint: storedPrint, status: Int(status),
                        headers: StoredResponse.decodeHeaders(headers), body: Array(body.readableBytesView),
                        createdAt: createdAt))
            }
            throw PostgresStoreError("idempotency key (\(scope), \(key)) neither claimed nor found")
        }
    }

    public func releaseClaim(scope: String, key: String) throws(RegistryError) {
        try inTransaction("releasing idempotency key") { connection, logger in
            try await connection.query(
                """
                DELETE FROM idempotency_keys
                WHERE scope = \(scope) AND key = \(key) AND status = \(Self.claimStatus)
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

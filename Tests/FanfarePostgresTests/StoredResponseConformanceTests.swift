import FanfareStorage
import Foundation
import Testing

/// Idempotency answers (`StoredResponseStore`) against SQLiteTokenStore and PostgresTokenStore.
extension PostgresSuites {
    @Suite("StoredResponseStore conformance: SQLite and PostgreSQL", .serialized)
    struct StoredResponseConformanceTests {
        static func response(
            _ key: String, status: Int = 201, createdAt: Int64 = 1_000, body: String = "{}"
        ) -> StoredResponse {
            StoredResponse(
                scope: "caller-1", key: key, fingerprint: [0, 1, 2, 255], status: status,
                headers: [
                    .init(name: "content-type", value: "application/json"),
                    .init(name: "location", value: "/v1/waves/7"),
                ],
                body: Array(body.utf8), createdAt: createdAt)
        }

        @Test(arguments: StoreKind.allCases)
        func storesReplacesReadsAndExpires(_ kind: StoreKind) throws {
            try withDatabase(kind) { database in
                do {
                    let store = try database.open()
                    defer { try? store.close() }
                    try store.store(Self.response("a"))
                    try store.store(Self.response("b", createdAt: 2_000))
                    #expect(try store.storedResponse(scope: "caller-1", key: "a", notBefore: 0) == Self.response("a"))
                    #expect(try store.storedResponse(scope: "caller-2", key: "a", notBefore: 0) == nil)
                    #expect(try store.storedResponse(scope: "caller-1", key: "a", notBefore: 1_001) == nil)  // too old
                    // The same key again replaces the answer.
                    try store.store(Self.response("a", status: 422, createdAt: 1_500, body: "{\"problem\":1}"))
                    #expect(try store.storedResponse(scope: "caller-1", key: "a", notBefore: 0)?.status == 422)
                    #expect(try store.deleteStoredResponses(createdBefore: 1_600) == 1)
                    #expect(try store.storedResponse(scope: "caller-1", key: "a", notBefore: 0) == nil)
                }
                // Durable: a reopened store still has it.
                let store = try database.open()
                defer { try? store.close() }
                #expect(
                    try store.storedResponse(scope: "caller-1", key: "b", notBefore: 0)
                        == Self.response("b", createdAt: 2_000))
            }
        }
    }
}

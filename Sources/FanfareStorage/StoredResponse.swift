/// The answer an API gave to a request that carried an `Idempotency-Key`, kept so that a retry of the same
/// request gets the same answer (`fanfare serve`). Lives in the registry file (`idempotency_keys`), so a
/// restarted service still has it.
public struct StoredResponse: Sendable, Equatable {
    /// Who sent it (e.g. a fingerprint of the API key): keys of different callers never meet.
    public var scope: String
    public var key: String
    /// A hash of the request (method, path, body): the same key with another request is a mistake.
    public var fingerprint: [UInt8]
    public var status: Int
    /// Response header fields to repeat (content type, location, ...), in order.
    public var headers: [Header]
    public var body: [UInt8]
    /// UNIX milliseconds.
    public var createdAt: Int64

    public struct Header: Sendable, Equatable {
        public var name: String
        public var value: String
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    public init(
        scope: String, key: String, fingerprint: [UInt8], status: Int, headers: [Header], body: [UInt8],
        createdAt: Int64
    ) {
        self.scope = scope
        self.key = key
        self.fingerprint = fingerprint
        self.status = status
        self.headers = headers
        self.body = body
        self.createdAt = createdAt
    }
}

/// Where `fanfare serve` keeps the answers to requests that carried an `Idempotency-Key`.
public protocol StoredResponseStore: AnyObject, Sendable {
    /// The stored response for (scope, key) created at or after `notBefore` (UNIX ms); older ones count as gone.
    func storedResponse(scope: String, key: String, notBefore: Int64) throws(RegistryError) -> StoredResponse?
    /// Stores (or replaces) a response; durable when this returns.
    func store(_ response: StoredResponse) throws(RegistryError)
    /// Deletes stored responses created before `createdBefore` (UNIX ms); returns how many.
    @discardableResult func deleteStoredResponses(createdBefore: Int64) throws(RegistryError) -> Int
}

/// Several nodes: a request with an `Idempotency-Key` is claimed in the shared database while it runs, so a
/// retry that lands on another node meanwhile is told it is in progress instead of running it again.
public protocol StoredResponseClaims: StoredResponseStore {
    /// Claims (scope, key) for a request being answered now (UNIX ms), unless an answer created at or after
    /// `notBefore` or another claim younger than `claimFor` (ms) exists. A claim is completed by `store(_:)`
    /// and dropped by `releaseClaim`.
    func claimResponse(
        scope: String, key: String, fingerprint: [UInt8], now: Int64, notBefore: Int64, claimFor: Int64
    ) throws(RegistryError) -> ResponseClaim

    /// Drops an unanswered claim (the request failed, or its answer is not kept).
    func releaseClaim(scope: String, key: String) throws(RegistryError)
}

/// What `claimResponse` found.
public enum ResponseClaim: Sendable, Equatable {
    /// Claimed: run the request.
    case claimed
    /// Answered before (replay it, or refuse a different request under the key).
    case answered(StoredResponse)
    /// Another request holds the key now; its fingerprint says whether it is the same request.
    case inProgress(fingerprint: [UInt8])
}

/// Everything `fanfare serve` keeps in its database: tokens, waves and idempotency answers. SQLite (a file) or
/// PostgreSQL (FanfarePostgres, shared by several nodes).
public protocol ServiceStorage: TokenStore, WaveStore, StoredResponseStore {
    /// Closes the database. Later calls fail with `.storage`.
    func close() throws(RegistryError)
}

extension StoredResponse {
    /// `name: value` lines (header names and values cannot hold a line break).
    package static func encodeHeaders(_ headers: [Header]) -> String {
        headers.map { "\($0.name): \($0.value)" }.joined(separator: "\n")
    }

    package static func decodeHeaders(_ text: String) -> [Header] {
        text.split(separator: "\n").compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let value = line[line.index(after: colon)...].drop { $0 == " " }
            return Header(name: String(line[..<colon]), value: String(value))
        }
    }
}

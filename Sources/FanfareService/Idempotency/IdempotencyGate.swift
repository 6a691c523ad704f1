import FanfareStorage
import FanfareTLS
import Synchronization

/// `Idempotency-Key` handling: a retry of the same request gets the stored response, a reuse of the key for
/// another request is refused, and a retry racing the first is refused until the first is answered.
///
/// Answers live in the registry (`StoredResponseStore.store(_:)`), so a restarted service keeps them for
/// their whole lifetime (24 h). Requests still being answered are tracked in memory (a request cannot outlive
/// its process) and, with several nodes, claimed in the shared database too (`StoredResponseClaims`), so a
/// retry on another node is told it is in progress; a claim whose node died frees after `claimLifetime`.
/// One gap remains by construction: if the process dies after the operation took effect
/// and before its answer was stored, a retry runs the operation again (registrations and deletions are
/// idempotent anyway; a publish starts a second wave of the same state, which latest-state-wins makes harmless).
package final class IdempotencyGate: Sendable {
    private let store: any StoredResponseStore
    /// How long an answer is kept (ms).
    private let lifetime: Int64
    private let claimed = Mutex<Set<String>>([])
    /// Several nodes: the database's claims (nil: one process, memory is enough).
    private let claims: (any StoredResponseClaims)?
    /// How long a claim in the database holds when its node does not finish it (ms): longer than any request.
    package static let claimLifetimeMilliseconds: Int64 = 120_000
    private let wallClockMilliseconds: @Sendable () -> Int64

    package static let maximumKeyLength = 255

    package init(
        store: any StoredResponseStore, lifetime: Duration, wallClockMilliseconds: @escaping @Sendable () -> Int64
    ) {
        self.store = store
        claims = store as? any StoredResponseClaims
        let (seconds, attoseconds) = lifetime.components
        self.lifetime = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        self.wallClockMilliseconds = wallClockMilliseconds
    }

    /// A claimed key: the caller must `finish` or `abandon` it.
    package struct Claim: Sendable {
        fileprivate let slot: String
        package let scope: String
        package let key: String
        package let fingerprint: [UInt8]
    }

    package enum Decision: Sendable {
        /// First time: run the request, then `finish`.
        case proceed(Claim)
        /// Answered before: send this again.
        case replay(StoredResponse)
        /// The same key is being answered right now.
        case inProgress
        /// The key was used for a different request.
        case reused
    }

    /// Whether a header value can be a key: 1 to 255 visible ASCII characters.
    package static func isValidKey(_ key: String) -> Bool {
        let bytes = key.utf8
        return !bytes.isEmpty && bytes.count <= maximumKeyLength && bytes.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    /// The request's fingerprint: SHA-256 over method, path (with query) and body.
    package static func fingerprint(method: String, path: String, body: some Collection<UInt8>) -> [UInt8] {
        var bytes = Array("\(method) \(path)\n".utf8)
        bytes.append(contentsOf: body)
        return Digest.sha256(bytes)
    }

    /// Blocking (reads the registry file): call off the concurrency pool.
    package func begin(scope: String, key: String, fingerprint: [UInt8]) throws(RegistryError) -> Decision {
        let slot = scope + "\u{0}" + key
        let isNew = claimed.withLock { $0.insert(slot).inserted }
        guard isNew else { return .inProgress }
        let stored: StoredResponse?
        do {
            let now = wallClockMilliseconds()
            if let claims {
                switch try claims.claimResponse(
                    scope: scope, key: key, fingerprint: fingerprint, now: now, notBefore: now - lifetime,
                    claimFor: Self.claimLifetimeMilliseconds)
                {
                case .claimed: return .proceed(Claim(slot: slot, scope: scope, key: key, fingerprint: fingerprint))
                case .answered(let answer): stored = answer
                case .inProgress(let other):
                    release(slot)
                    return Digest.constantTimeEqual(other, fingerprint) ? .inProgress : .reused
                }
            } else {
                stored = try store.storedResponse(scope: scope, key: key, notBefore: now - lifetime)
            }
        } catch {
            release(slot)
            throw error
        }
        if let stored {
            release(slot)
            return Digest.constantTimeEqual(stored.fingerprint, fingerprint) ? .replay(stored) : .reused
        }
        return .proceed(Claim(slot: slot, scope: scope, key: key, fingerprint: fingerprint))
    }

    /// Stores the answer (unless it is a 5xx: those may be retried with the same key) and releases the key.
    /// Blocking (writes the registry file).
    package func finish(
        _ claim: Claim, status: Int, headers: [StoredResponse.Header], body: [UInt8]
    ) throws(RegistryError) {
        defer { release(claim.slot) }
        guard status < 500 else {
            try claims?.releaseClaim(scope: claim.scope, key: claim.key)
            return
        }
        try store.store(
            StoredResponse(
                scope: claim.scope, key: claim.key, fingerprint: claim.fingerprint, status: status, headers: headers,
                body: body, createdAt: wallClockMilliseconds()))
    }

    /// Releases the key without storing an answer (the request failed before it had one).
    package func abandon(_ claim: Claim) {
        release(claim.slot)
        // Best effort: a claim left behind frees itself after `claimLifetimeMilliseconds`.
        try? claims?.releaseClaim(scope: claim.scope, key: claim.key)
    }

    /// Deletes answers past their lifetime. Blocking.
    @discardableResult
    package func purgeExpired() throws(RegistryError) -> Int {
        try store.deleteStoredResponses(createdBefore: wallClockMilliseconds() - lifetime)
    }

    private func release(_ slot: String) { _ = claimed.withLock { $0.remove(slot) } }
}

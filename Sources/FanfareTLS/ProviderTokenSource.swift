// The one provider token per (team, key), shared by every connection and worker, re-minted on a
// schedule rather than per request (APNs answers 429 TooManyProviderTokenUpdates otherwise).
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Hands out the current provider token and replaces it once it is `refreshInterval` old.
///
/// Use: connections remember the `generation` whose token they put in their HPACK table; on the
/// hot path they compare it with `generation` (one atomic load, no lock) and only call
/// `snapshot()` when it changed (`snapshot()` returns the token and its generation read together,
/// so a re-mint between two separate reads cannot pair a token with the wrong generation). Someone must still ask for
/// the token now and then
/// (the control plane, or each worker once per tick) so that an old token gets re-minted.
public final class ProviderTokenSource: Sendable {
    /// The allowed refresh range: APNs rejects tokens older than 60 minutes and rate-limits
    /// token changes to one per 20 minutes per connection (apns-spec.md §6.1).
    public static let allowedRefreshIntervals: ClosedRange<Int64> = 20 * 60...60 * 60

    public let refreshInterval: Int64
    private let clock: @Sendable () -> Int64
    private let state: Mutex<State>
    /// Starts at 1 with the first token; 0 is free for "no token cached yet" in callers.
    private let currentGeneration = Atomic<UInt64>(0)

    private struct State {
        var signer: ProviderTokenSigner
        var token: ProviderToken
        var lastMintFailure: ProviderKeyError?
    }

    /// Mints the first token immediately. `clock` returns UNIX seconds; inject one in tests.
    public init(
        signer: ProviderTokenSigner,
        refreshInterval: Int64 = 40 * 60,
        clock: @escaping @Sendable () -> Int64 = ProviderTokenSource.wallClockSeconds
    ) {
        precondition(
            Self.allowedRefreshIntervals.contains(refreshInterval),
            "refreshInterval must be 20...60 minutes (APNs rules), got \(refreshInterval) s"
        )
        self.refreshInterval = refreshInterval
        self.clock = clock
        let token: ProviderToken
        do {
            token = try signer.mint(issuedAt: clock())
        } catch {
            // The signer already produced a signature when it loaded the key, so only a broken
            // OpenSSL (or exhausted memory) gets here; there is no token to fall back on.
            preconditionFailure("minting the first provider token failed: \(error)")
        }
        state = Mutex(State(signer: signer, token: token, lastMintFailure: nil))
        currentGeneration.store(1, ordering: .releasing)
    }

    @Sendable public static func wallClockSeconds() -> Int64 {
        Int64(time(nil))
    }

    /// Bumps each time a new token is minted. Cheap: read it per push, call `current()` on change.
    public var generation: UInt64 {
        currentGeneration.load(ordering: .acquiring)
    }

    /// The token to send now, re-minted first if it is `refreshInterval` old. If re-minting fails
    /// (it should not: the key signed at load time), the old token is kept and the failure is
    /// kept in `lastMintFailure`.
    public func current() -> ProviderToken {
        snapshot().token
    }

    /// `current()` together with the generation it belongs to, read under one lock.
    public func snapshot() -> (token: ProviderToken, generation: UInt64) {
        let now = clock()
        return state.withLock { state in
            if now - state.token.issuedAt >= refreshInterval {
                remint(&state, at: now)
            }
            return (state.token, currentGeneration.load(ordering: .relaxed))
        }
    }

    /// Switches to a new key without a restart and mints its first token immediately. On
    /// failure the old signer and token stay in use.
    public func replaceSigner(_ signer: ProviderTokenSigner) throws(ProviderKeyError) {
        let now = clock()
        let token = try signer.mint(issuedAt: now)
        state.withLock { state in
            state.signer = signer
            state.token = token
            state.lastMintFailure = nil
            currentGeneration.add(1, ordering: .releasing)
        }
    }

    /// Mints a new token now (after APNs answered 403 ExpiredProviderToken). Pass the generation
    /// of the rejected token as `ifGeneration` so that many connections reporting the same
    /// rejection cause one re-mint, not one each; nil forces it. Returns whether a new token was
    /// minted.
    @discardableResult
    public func forceRefresh(ifGeneration rejectedGeneration: UInt64? = nil) -> Bool {
        let now = clock()
        return state.withLock { state in
            if let rejectedGeneration, rejectedGeneration != currentGeneration.load(ordering: .relaxed) {
                return false  // already replaced since that token was sent
            }
            return remint(&state, at: now)
        }
    }

    /// Why the last scheduled or forced re-mint failed, if it did.
    public var lastMintFailure: ProviderKeyError? {
        state.withLock { $0.lastMintFailure }
    }

    @discardableResult
    private func remint(_ state: inout State, at now: Int64) -> Bool {
        do {
            state.token = try state.signer.mint(issuedAt: now)
            state.lastMintFailure = nil
            currentGeneration.add(1, ordering: .releasing)
            return true
        } catch {
            state.lastMintFailure = error
            return false
        }
    }
}

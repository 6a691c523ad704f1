import FanfareTLS
import Synchronization

/// The provider key new connections sign with, replaceable while the client runs (a key rotated in the apps
/// file). APNs binds a connection to the key of its first request and allows one provider-token change per 20
/// minutes on it (apns-spec.md §6.1), so a new key never goes on a connection that has one: every worker opens
/// new connections with it and drains the old ones, whose pushes in flight finish. A new key APNs refuses on a
/// connection's first request (403) is set aside for the one before it, if there was one: the refused push is
/// sent again on a connection of the previous key, and the refusal is kept for the operator (`lastRefusal`).
public final class ProviderKeyRotation: Sendable {
    /// A key APNs refused and the client set aside.
    public struct Refusal: Sendable, Equatable {
        public var keyID: String
        /// APNs' reason (e.g. `InvalidProviderToken`).
        public var reason: String
    }

    private struct State {
        var current: ProviderTokenSource?
        /// The key before `current`, while `current` has not proved itself (a connection's first request
        /// answered with anything but 403).
        var previous: ProviderTokenSource?
        var lastRefusal: Refusal?
    }

    private let state: Mutex<State>
    /// Bumped at each change: workers compare it once per loop iteration (never per push).
    let generation = Atomic<UInt64>(0)

    /// Starts with `initial` (the key a client configuration names). A client and its channel manager share one.
    public init(_ initial: ProviderTokenSource?) {
        state = Mutex(State(current: initial))
    }

    /// The key new connections use.
    public var current: ProviderTokenSource? { state.withLock { $0.current } }

    /// The last key set aside because APNs refused it (nil once another rotation starts).
    public var lastRefusal: Refusal? { state.withLock { $0.lastRefusal } }

    /// New connections use `source` from now on; the current key stays as the fallback until `source` proves
    /// itself. Workers notice at their next loop iteration (`APNsClient.rotateProviderKey` also wakes them).
    public func rotate(to source: ProviderTokenSource) {
        state.withLock { state in
            guard state.current !== source else { return }
            state.previous = state.current
            state.current = source
            state.lastRefusal = nil
        }
        generation.add(1, ordering: .releasing)
    }

    /// A connection's first request with `source` got past APNs' token check: no fallback is needed any more.
    func proved(_ source: ProviderTokenSource) {
        state.withLock { state in
            if state.current === source { state.previous = nil }
        }
    }

    /// APNs refused `source` on a connection's first request. True when it was the newest key and an older one
    /// takes over (the refused push should be sent again); false when there is nothing to fall back on.
    func refused(_ source: ProviderTokenSource, reason: String) -> Bool {
        let fellBack = state.withLock { state -> Bool in
            guard state.current === source, let previous = state.previous else { return false }
            state.lastRefusal = Refusal(keyID: source.current().keyID, reason: reason)
            state.current = previous
            state.previous = nil
            return true
        }
        if fellBack { generation.add(1, ordering: .releasing) }
        return fellBack
    }
}

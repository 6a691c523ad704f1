import FanfareFanout
import Synchronization

/// The apps the service sends for, by id, and the default one (today's routes). A reload of the apps file
/// replaces entries while requests run: a request works with the `ServedApp` it looked up.
package final class ServedApps: Sendable {
    private struct State {
        var byID: [String: ServedApp]
        var order: [String]
        var defaultID: String
    }
    private let state: Mutex<State>

    init(_ apps: [ServedApp]) {
        precondition(!apps.isEmpty, "a service sends for at least one app")
        let defaultID = (apps.first { $0.app.isDefault } ?? apps[0]).id
        state = Mutex(
            State(
                byID: Dictionary(uniqueKeysWithValues: apps.map { ($0.id, $0) }), order: apps.map(\.id),
                defaultID: defaultID))
    }

    package func app(id: String) -> ServedApp? { state.withLock { $0.byID[id] } }

    package var defaultApp: ServedApp {
        state.withLock { state in
            guard let app = state.byID[state.defaultID] else { preconditionFailure("the default app is served") }
            return app
        }
    }

    /// In the order they were configured.
    package var all: [ServedApp] { state.withLock { state in state.order.compactMap { state.byID[$0] } } }

    /// Every app's engines.
    package var engines: [FanoutEngine] { all.flatMap(\.engines) }

    /// Serves `apps` from now on (a reload): requests that looked up an app before keep the one they have.
    func replace(with apps: [ServedApp]) {
        precondition(!apps.isEmpty, "a service sends for at least one app")
        let defaultID = (apps.first { $0.app.isDefault } ?? apps[0]).id
        state.withLock { state in
            state = State(
                byID: Dictionary(uniqueKeysWithValues: apps.map { ($0.id, $0) }), order: apps.map(\.id),
                defaultID: defaultID)
        }
    }
}

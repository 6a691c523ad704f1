import FanfareFanout
import FanfareStorage
import Logging
import Synchronization

/// Applies a new list of apps to the running service (`POST /v1/apps/reload`, SIGHUP): apps added start, apps
/// removed stop (their waves checkpointed, to resume if they come back), an app whose environments changed has
/// those engines replaced. One reload at a time; a list that cannot work changes nothing.
package final class AppReloader: Sendable {
    private let apps: ServedApps
    private let configuration: ServiceConfiguration
    private let store: any ServiceStorage
    private let metrics: ServiceMetrics
    private let numbering: WaveNumbering
    private let running = Mutex<Void>(())

    init(
        apps: ServedApps, configuration: ServiceConfiguration, store: any ServiceStorage, metrics: ServiceMetrics,
        numbering: WaveNumbering
    ) {
        self.apps = apps
        self.configuration = configuration
        self.store = store
        self.metrics = metrics
        self.numbering = numbering
    }

    /// Why a reload changed nothing.
    package enum Refusal: Error, CustomStringConvertible {
        /// The service was started without an apps file.
        case noAppsFile
        /// The file, a key or the list as a whole cannot be used (the message says what and where).
        case invalid(String)
        /// An engine could not start (the apps that were running go on).
        case startFailed(String)

        package var description: String {
            switch self {
            case .noAppsFile: "the service was started without --apps: there is no apps file to read again"
            case .invalid(let message): message
            case .startFailed(let message): message
            }
        }
    }

    /// Reads the apps again and applies them; returns what changed, one line each. Blocks (engines stop and
    /// start): call it off the request threads.
    package func reload() throws(Refusal) -> [String] {
        guard let load = configuration.reloadApps else { throw .noAppsFile }
        let wanted: [ServiceApp]
        do { wanted = try load() } catch { throw .invalid("\(error)") }
        guard !wanted.isEmpty else { throw .invalid("the apps file lists no app: give at least one") }
        var checked = configuration
        checked.apps = wanted
        if let problem = checked.problem() { throw .invalid(problem) }
        return try running.withLock { _ throws(Refusal) -> [String] in try apply(wanted, configuration: checked) }
    }

    private func apply(_ wanted: [ServiceApp], configuration: ServiceConfiguration) throws(Refusal) -> [String] {
        var next: [ServedApp] = []
        var changes: [String] = []
        let current = apps.all
        for app in wanted {
            let old = current.first { $0.id == app.id }
            if let old, Self.sameEngines(old.app, app) {
                // Nothing an engine holds changed (the key list shown may have): the running engines go on.
                next.append(ServedApp(app: app, engines: old.engines, clusters: old.clusters))
                continue
            }
            if let old, Self.sameRoutes(old.app, app) {
                // Only keys changed: each engine's new connections sign with its new key while the old ones drain.
                for (environment, engine) in zip(app.environments, old.engines) {
                    guard let source = environment.client.providerTokens else { continue }
                    engine.rotateProviderKey(to: source)
                }
                next.append(ServedApp(app: app, engines: old.engines, clusters: old.clusters))
                changes.append("app \(app.id): \(Self.difference(old.app, app))")
                continue
            }
            // One engine per (app, environment) on the registry at a time: the old ones stop first (their
            // unfinished waves are checkpointed and the new engines resume them).
            if let old { AppEngines.stop(old) }
            do {
                next.append(
                    try AppEngines.start(
                        app, configuration: configuration, store: store, metrics: metrics, numbering: numbering))
            } catch {
                throw .startFailed("app \(app.id) could not start: \(error)")
            }
            changes.append(old == nil ? "app \(app.id) added" : "app \(app.id): \(Self.difference(old!.app, app))")
        }
        for old in current where !wanted.contains(where: { $0.id == old.id }) {
            AppEngines.stop(old)
            changes.append("app \(old.id) removed")
        }
        apps.replace(with: next)
        return changes
    }

    /// Same bundle id, and in each environment the same endpoint, trust and key.
    private static func sameEngines(_ old: ServiceApp, _ new: ServiceApp) -> Bool {
        old.bundleID == new.bundleID && old.environments.count == new.environments.count
            && zip(old.environments, new.environments).allSatisfy { pair in
                pair.0.environment == pair.1.environment && pair.0.route == pair.1.route
                    && pair.0.keyID == pair.1.keyID && pair.0.keyFingerprint == pair.1.keyFingerprint
            }
    }

    /// Same bundle id, environments and endpoints; keys may differ.
    private static func sameRoutes(_ old: ServiceApp, _ new: ServiceApp) -> Bool {
        old.bundleID == new.bundleID && old.environments.count == new.environments.count
            && zip(old.environments, new.environments).allSatisfy { pair in
                pair.0.environment == pair.1.environment && pair.0.route == pair.1.route
            }
    }

    /// What changed between two versions of an app, for the reload's answer and the log.
    private static func difference(_ old: ServiceApp, _ new: ServiceApp) -> String {
        var parts: [String] = []
        if old.bundleID != new.bundleID { parts.append("bundle id \(old.bundleID) → \(new.bundleID)") }
        for environment in new.environments {
            guard let before = old.environments.first(where: { $0.environment == environment.environment }) else {
                parts.append("sends in \(environment.environment) now")
                continue
            }
            if before.keyID != environment.keyID || before.keyFingerprint != environment.keyFingerprint {
                parts.append(
                    "\(environment.environment): key \(before.keyID ?? "-") → \(environment.keyID ?? "-")"
                        + (before.keyID == environment.keyID ? " (new key material)" : ""))
            }
            if before.route != environment.route { parts.append("\(environment.environment): endpoint changed") }
        }
        for environment in old.environments
        where !new.environments.contains(where: {
            $0.environment == environment.environment
        }) {
            parts.append("no longer sends in \(environment.environment)")
        }
        return parts.isEmpty ? "changed" : parts.joined(separator: "; ")
    }
}

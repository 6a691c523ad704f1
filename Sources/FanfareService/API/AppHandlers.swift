import FanfareFanout
import FanfareStorage

/// `GET /v1/apps` and `POST /v1/apps/reload`: the apps the service sends for, and reading them again.
extension FanfareAPI {
    package func listApps(_ input: Operations.ListApps.Input) async throws -> Operations.ListApps.Output {
        .ok(.init(body: .json(.init(apps: visibleApps()))))
    }

    package func reloadApps(_ input: Operations.ReloadApps.Input) async throws -> Operations.ReloadApps.Output {
        guard !lifecycle.isDraining else {
            throw ServiceProblem.unavailable(
                .shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        }
        let reloader = self.reloader
        let changes: [String]
        do {
            changes = try await offPool { try reloader.reload() }
        } catch let refusal as AppReloader.Refusal {
            switch refusal {
            case .noAppsFile: throw ServiceProblem(.conflict, .noAppsFile, refusal.description)
            case .invalid, .startFailed:
                throw ServiceProblem(.unprocessableContent, .appsFileInvalid, refusal.description)
            }
        }
        census.invalidate()
        return .ok(.init(body: .json(.init(apps: visibleApps(), changes: changes))))
    }

    /// The apps the caller's key reaches, as the API shows them.
    private func visibleApps() -> [Components.Schemas.AppSummary] {
        apps.all.filter { Principal.current.reaches(app: $0.id) }.map(Self.summary)
    }

    static func summary(_ served: ServedApp) -> Components.Schemas.AppSummary {
        let app = served.app
        let environments = zip(app.environments, served.engines).map { environment, engine in
            Components.Schemas.AppEnvironment(
                environment: .init(environment.environment), endpoint: environment.endpoint,
                topic: environment.client.topic, keyId: engine.providerKeyID ?? environment.keyID,
                channelManagement: environment.channelManagement.map { "https://\($0.host):\($0.port)" },
                connectionsOpen: engine.statistics.client.connectionsOpen,
                keyRefused: engine.providerKeyRefusal.map { "\($0.keyID): \($0.reason)" })
        }
        let keys = app.keys.map { key in
            Components.Schemas.ProviderKeySummary(
                keyId: key.keyID, teamId: key.teamID, environments: key.environments.map { .init($0) },
                topics: key.topics, source: key.source, fingerprint: key.fingerprint)
        }
        return .init(
            id: app.id, bundleId: app.bundleID, _default: app.isDefault, environments: environments, keys: keys)
    }
}

extension Components.Schemas.Environment {
    init(_ environment: APNsEnvironment) {
        self = environment == .sandbox ? .sandbox : .production
    }
}

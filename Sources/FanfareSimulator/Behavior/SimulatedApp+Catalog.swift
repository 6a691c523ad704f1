import FanfareApps
import FanfareStorage

extension SimulatedApp {
    /// The apps of an apps file (`fanfare serve --apps FILE`), as the simulator serves them: each key verifies with
    /// the public half of the `.p8` the file names, in the environments and for the topics the file gives it.
    public static func apps(of catalog: AppCatalog) -> [SimulatedApp] {
        catalog.apps.map { app in
            SimulatedApp(bundleID: app.bundleID, teamID: app.teamID, keys: app.keys.map(SimulatedProviderKey.init))
        }
    }
}

extension SimulatedProviderKey {
    public init(_ key: ProviderKeyDefinition) {
        // A key for both environments is an older key, unrestricted (nil).
        let environment: SimulatorConfiguration.Environment? =
            key.environments.count == 1 ? (key.environments.contains(.sandbox) ? .sandbox : .production) : nil
        self.init(
            keyID: key.keyID, teamID: key.teamID,
            scope: ProviderKeyScope(environment: environment, topics: key.topics.map { Set($0) }),
            publicKeyPEM: key.signer.publicKeyPEM)
    }
}

/// Where an apps file says the simulator is: per environment, the push and channel-management endpoint its apps
/// name. One simulator listens on one address per environment, so the apps that name one must agree.
public struct SimulatedEndpoints: Sendable, Equatable {
    public var push: [SimulatorConfiguration.Environment: AppEndpoint] = [:]
    public var management: [SimulatorConfiguration.Environment: AppEndpoint] = [:]

    public init(_ catalog: AppCatalog) throws(SimulatorConfigurationError) {
        for environment in APNsEnvironment.allCases {
            let simulated: SimulatorConfiguration.Environment = environment == .sandbox ? .sandbox : .production
            push[simulated] = try Self.agreed(catalog, environment, kind: "endpoints", \.endpoints)
            management[simulated] = try Self.agreed(
                catalog, environment, kind: "channel_management", \.channelManagementEndpoints)
        }
    }

    private static func agreed(
        _ catalog: AppCatalog, _ environment: APNsEnvironment, kind: String,
        _ endpoints: KeyPath<AppDefinition, [APNsEnvironment: AppEndpoint]>
    ) throws(SimulatorConfigurationError) -> AppEndpoint? {
        var found: (app: String, endpoint: AppEndpoint)?
        for app in catalog.apps {
            guard let endpoint = app[keyPath: endpoints][environment] else { continue }
            if let found, found.endpoint != endpoint {
                throw .invalid(
                    field: "\(catalog.source): \(kind).\(environment)",
                    problem:
                        "app \(found.app) names \(found.endpoint), app \(app.id) \(endpoint); one simulator listens "
                        + "on one address per environment")
            }
            found = (app.id, endpoint)
        }
        return found?.endpoint
    }
}

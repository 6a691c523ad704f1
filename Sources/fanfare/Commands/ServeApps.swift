import FanfareApps
import FanfareClient
import FanfareCore
import FanfareIO
import FanfareService
import FanfareSimulator
import FanfareStorage
import FanfareTLS

/// `fanfare serve --apps FILE`: the service's apps from the apps file, each environment's client built from the
/// app's endpoint, trust and signing key, and the serve flags' workers, connections and timeouts (`template`).
enum ServeApps {
    /// What every environment's client shares: the serve flags' timeout, address families, workers,
    /// connections and streams.
    struct Template: Sendable {
        var requestTimeout: Duration
        var addressFamilies: AddressFamilyPreference
        var workerCount: Int
        var streams: Int
        /// nil: the engine's default (autoscaled connections).
        var connections: ConnectionCount?
        /// `--proxy`: every app's push and channel-management connections go through it.
        var proxy: HTTPProxy?

        enum ConnectionCount: Sendable {
            case fixed(Int)
            case autoscaled(ConnectionAutoscaling?)
        }

        /// The template's data plane on `client`.
        func apply(to client: inout ClientConfiguration) {
            client.requestTimeout = requestTimeout
            client.addressFamilies = addressFamilies
            client.workerCount = workerCount
            client.maxConcurrentStreamsPerConnection = streams
            client.proxy = proxy
            switch connections {
            case .fixed(let count): client.connectionsPerWorker = count
            case .autoscaled(let settings): client.autoscaling = settings
            case nil: break
            }
        }

        /// The data plane a configured client has (the serve flags applied to it).
        static func from(_ client: ClientConfiguration) -> Template {
            Template(
                requestTimeout: client.requestTimeout, addressFamilies: client.addressFamilies,
                workerCount: client.workerCount, streams: client.maxConcurrentStreamsPerConnection,
                connections: !client.connectionCountChosen
                    ? nil
                    : client.autoscaling == nil ? .fixed(client.connectionsPerWorker) : .autoscaled(client.autoscaling),
                proxy: client.proxy)
        }
    }

    /// Where every app's pushes go instead of the file's endpoints: `serve --simulator --apps`'s simulator.
    struct Endpoints: Sendable {
        var production: AppEndpoint
        var sandbox: AppEndpoint?
        var management: [APNsEnvironment: AppEndpoint]
        var caFile: String

        init(simulator: APNsSimulator, caFile: String) {
            production = AppEndpoint(host: "127.0.0.1", port: Int(simulator.boundAddress.port))
            sandbox = simulator.sandboxAddress.map { AppEndpoint(host: "127.0.0.1", port: Int($0.port)) }
            var management: [APNsEnvironment: AppEndpoint] = [:]
            if let address = simulator.managementAddress {
                management[.production] = AppEndpoint(host: "127.0.0.1", port: Int(address.port))
            }
            if let address = simulator.sandboxManagementAddress {
                management[.sandbox] = AppEndpoint(host: "127.0.0.1", port: Int(address.port))
            }
            self.management = management
            self.caFile = caFile
        }

        /// `app` sending to the simulator: its endpoints and trust replaced.
        func applied(to app: AppDefinition) -> AppDefinition {
            var app = app
            app.endpoints = [.production: production]
            if let sandbox { app.endpoints[.sandbox] = sandbox }
            app.channelManagementEndpoints = management
            app.caFile = caFile
            return app
        }
    }

    /// The apps file read and turned into the service's apps (any error says what and where); `endpoints`
    /// replaces every app's endpoints and trust (the built-in simulator).
    static func load(path: String, template: Template, endpoints: Endpoints? = nil) throws -> [ServiceApp] {
        let catalog = try AppCatalog.load(path: path)
        return try catalog.apps.map { app in
            try serviceApp(endpoints?.applied(to: app) ?? app, template: template)
        }
    }

    static func serviceApp(_ app: AppDefinition, template: Template) throws -> ServiceApp {
        let tls = try TLSContext.client(caFile: app.caFile)
        var environments: [ServiceApp.Environment] = []
        for environment in app.environments {
            guard let key = app.signingKey(for: environment) else { continue }
            let endpoint = app.endpoint(for: environment)
            let tokens = ProviderTokenSource(signer: key.signer)
            var client = ClientConfiguration(
                host: endpoint.host, port: UInt16(endpoint.port), tls: tls, providerTokens: tokens,
                topic: Topic.liveActivity(bundleID: app.bundleID))
            client.bundleID = app.bundleID
            template.apply(to: &client)
            var channels: ChannelManagementConfiguration?
            if let management = app.channelManagementEndpoint(for: environment) {
                var configuration = ChannelManagementConfiguration(
                    host: management.host, port: UInt16(management.port), tls: tls, providerTokens: tokens,
                    bundleID: app.bundleID)
                configuration.requestTimeout = template.requestTimeout
                configuration.addressFamilies = template.addressFamilies
                configuration.proxy = template.proxy
                channels = configuration
            }
            let route = "\(endpoint) \(app.caFile ?? "system trust") \(channels.map { "\($0.host):\($0.port)" } ?? "-")"
            environments.append(
                ServiceApp.Environment(
                    environment: environment, client: client, channelManagement: channels, keyID: key.keyID,
                    keyFingerprint: key.fingerprint, route: route))
        }
        let keys = app.keys.map { key in
            ServiceApp.KeySummary(
                keyID: key.keyID, teamID: key.teamID,
                environments: APNsEnvironment.allCases.filter(key.environments.contains), topics: key.topics,
                source: key.source.description, fingerprint: key.fingerprint)
        }
        return ServiceApp(
            id: app.id, bundleID: app.bundleID, isDefault: app.isDefault, environments: environments, keys: keys)
    }
}

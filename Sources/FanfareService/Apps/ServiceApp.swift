import FanfareClient
import FanfareStorage

/// One app the service sends for, as configured: a bundle id and, per environment it sends in, the data plane
/// (APNs host, trust, provider key, topic) and channel management. `fanfare serve --apps FILE` builds these from
/// the apps file; without it, the single-app flags describe one app, the default.
public struct ServiceApp: Sendable {
    /// The app's name in routes (`/v1/apps/{id}/...`) and metric labels.
    public var id: String
    public var bundleID: String
    /// Today's routes (`/v1/tokens`, `/v1/channels/...`) serve the default app.
    public var isDefault: Bool
    /// In environment order (production first); at least one.
    public var environments: [Environment]
    /// What `GET /v1/apps` shows of the app's keys (never key material).
    public var keys: [KeySummary]

    public init(id: String, bundleID: String, isDefault: Bool, environments: [Environment], keys: [KeySummary] = []) {
        self.id = id
        self.bundleID = bundleID
        self.isDefault = isDefault
        self.environments = environments.sorted { $0.environment.rawValue < $1.environment.rawValue }
        self.keys = keys
    }

    /// Where and how the app's pushes go in one environment.
    public struct Environment: Sendable {
        public var environment: APNsEnvironment
        /// The whole client: the service's workers, connections and streams with this environment's host, trust,
        /// provider key and topic.
        public var client: ClientConfiguration
        /// The environment's channel-management API (nil: broadcast channels can only be linked, not created).
        public var channelManagement: ChannelManagementConfiguration?
        /// The provider key signing here (for `GET /v1/apps` and logs).
        public var keyID: String?
        /// What identifies the key material (its fingerprint): a reload that changes only this rotates the key.
        public var keyFingerprint: String?
        /// What identifies where pushes go and whom they trust (endpoint, CA file, channel management): a reload
        /// that changes it restarts the environment's engine.
        public var route: String

        public init(
            environment: APNsEnvironment, client: ClientConfiguration,
            channelManagement: ChannelManagementConfiguration? = nil, keyID: String? = nil,
            keyFingerprint: String? = nil, route: String? = nil
        ) {
            self.environment = environment
            self.client = client
            self.channelManagement = channelManagement
            self.keyID = keyID
            self.keyFingerprint = keyFingerprint
            self.route =
                route
                ?? "\(client.host):\(client.port) \(client.topic) "
                + (channelManagement.map { "\($0.host):\($0.port)" } ?? "-")
        }

        /// Where pushes go, as `GET /v1/apps` shows it.
        public var endpoint: String {
            client.host.contains(":")
                ? "https://[\(client.host)]:\(client.port)" : "https://\(client.host):\(client.port)"
        }
    }

    /// A provider key as `GET /v1/apps` lists it.
    public struct KeySummary: Sendable, Equatable {
        public var keyID: String
        public var teamID: String
        public var environments: [APNsEnvironment]
        /// A topic-specific key's topics (nil: a team key).
        public var topics: [String]?
        /// Where the key came from: a file's path or `$VARIABLE`.
        public var source: String
        /// The first 8 bytes of the key material's SHA-256 (tells a rotated key from the one before).
        public var fingerprint: String

        public init(
            keyID: String, teamID: String, environments: [APNsEnvironment], topics: [String]?, source: String,
            fingerprint: String
        ) {
            self.keyID = keyID
            self.teamID = teamID
            self.environments = environments
            self.topics = topics
            self.source = source
            self.fingerprint = fingerprint
        }
    }

    /// The first setting of this app that cannot work.
    func problem() -> String? {
        if id.isEmpty { return "an app has an empty id" }
        if environments.isEmpty { return "app \(id) sends in no environment" }
        if Set(environments.map(\.environment)).count != environments.count {
            return "app \(id) lists an environment twice"
        }
        return nil
    }
}

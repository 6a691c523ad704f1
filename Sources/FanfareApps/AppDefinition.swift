import FanfareStorage

/// One app a deployment sends for: a bundle id with its team id and provider keys, and where its pushes go in
/// each environment (Apple's hosts unless the apps file names others: a private deployment, a simulator).
public struct AppDefinition: Sendable, CustomStringConvertible {
    /// The app's name in the API (`/v1/apps/{id}/...`) and in metrics: `[a-z0-9][a-z0-9_-]{0,62}`.
    public var id: String
    public var bundleID: String
    public var teamID: String
    /// Today's routes (`/v1/tokens`, `/v1/channels/...`) serve the default app.
    public var isDefault: Bool
    /// In the file's order: for an environment the first key allowed there (and for the app's topic) signs.
    public var keys: [ProviderKeyDefinition]
    /// Push endpoints by environment (absent: Apple's).
    public var endpoints: [APNsEnvironment: AppEndpoint]
    /// Broadcast channel management endpoints by environment (absent: Apple's when the push endpoint is Apple's,
    /// none otherwise: broadcast channels can then only be linked, not created).
    public var channelManagementEndpoints: [APNsEnvironment: AppEndpoint]
    /// A CA bundle (PEM) to trust instead of the system's, for private endpoints and tests.
    public var caFile: String?

    public init(
        id: String, bundleID: String, teamID: String, isDefault: Bool = false, keys: [ProviderKeyDefinition],
        endpoints: [APNsEnvironment: AppEndpoint] = [:],
        channelManagementEndpoints: [APNsEnvironment: AppEndpoint] = [:], caFile: String? = nil
    ) {
        self.id = id
        self.bundleID = bundleID
        self.teamID = teamID
        self.isDefault = isDefault
        self.keys = keys
        self.endpoints = endpoints
        self.channelManagementEndpoints = channelManagementEndpoints
        self.caFile = caFile
    }

    /// The key that signs this app's pushes in `environment`: the first listed that may (nil: none may, so the
    /// app does not send there and registrations for it are refused).
    public func signingKey(for environment: APNsEnvironment) -> ProviderKeyDefinition? {
        keys.first { $0.signs(for: bundleID, in: environment) }
    }

    /// The environments some key of this app may sign for, production first.
    public var environments: [APNsEnvironment] { APNsEnvironment.allCases.filter { signingKey(for: $0) != nil } }

    /// Where pushes go in `environment`.
    public func endpoint(for environment: APNsEnvironment) -> AppEndpoint {
        endpoints[environment] ?? .apple(environment)
    }

    /// Where channel-management calls go in `environment` (see `channelManagementEndpoints`).
    public func channelManagementEndpoint(for environment: APNsEnvironment) -> AppEndpoint? {
        if let endpoint = channelManagementEndpoints[environment] { return endpoint }
        return endpoints[environment] == nil ? .appleChannelManagement(environment) : nil
    }

    public var description: String {
        "app \(id) (\(bundleID), team \(teamID), \(environments.map(\.description).joined(separator: "+")))"
    }

    /// Whether `id` can name an app in a URL path and a metric label.
    public static func isValidID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard (1...63).contains(bytes.count) else { return false }
        func isLowerAlphanumeric(_ byte: UInt8) -> Bool { (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte) }
        guard isLowerAlphanumeric(bytes[0]) else { return false }
        return bytes.allSatisfy { isLowerAlphanumeric($0) || $0 == 0x2D || $0 == 0x5F }
    }
}

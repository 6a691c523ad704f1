import FanfareCore

/// One app of the estate a simulator stands in for (`SimulatorConfiguration.apps`, `fanfare simulate --apps FILE`):
/// its bundle id (the topics `<bundle>` and `<bundle>.push-type.liveactivity`, …), its team and the provider keys
/// listed for it.
public struct SimulatedApp: Sendable, Equatable {
    public var bundleID: String
    public var teamID: String
    public var keys: [SimulatedProviderKey]

    public init(bundleID: String, teamID: String, keys: [SimulatedProviderKey]) {
        self.bundleID = bundleID
        self.teamID = teamID
        self.keys = keys
    }
}

/// A provider key as APNs knows it since 2025 (apns-spec.md §6.1): the team it belongs to, the environment a
/// team-scoped key is restricted to and the topics of a topic-specific key (`scope`), and the public key its
/// tokens verify with.
public struct SimulatedProviderKey: Sendable, Equatable {
    public var keyID: String
    /// The team its tokens name (`iss`); a team-scoped key signs for every app of this team.
    public var teamID: String
    public var scope: ProviderKeyScope
    /// `-----BEGIN PUBLIC KEY-----` PEM (a private `.p8` works too); nil: `APNsSimulator.Options.verifier` checks it.
    public var publicKeyPEM: String?

    public init(keyID: String, teamID: String, scope: ProviderKeyScope = ProviderKeyScope(), publicKeyPEM: String?) {
        self.keyID = keyID
        self.teamID = teamID
        self.scope = scope
        self.publicKeyPEM = publicKeyPEM
    }

    /// Why this key may not sign for `app`, or nil when it may. A topic-specific key covers its topics only: another
    /// topic is 403 `UnrelatedKeyIdInToken`, the reason §6.1 gives for a key not associated with the topic (and the
    /// one `--key-topics` has always given); the token is valid, so `InvalidProviderToken` would blame the wrong
    /// thing. A team-scoped key covers its team's apps and the apps that list it; any other app is 403
    /// `InvalidProviderToken`: its token names a team the topic does not belong to, and tokens of several
    /// developer accounts are not supported (§6.1; §7.4: "FIX (key id, team id, …)").
    func rejection(for app: SimulatedApp, listedByApp: Bool) -> APNsReason? {
        if let topics = scope.topics { return topics.contains(app.bundleID) ? nil : .unrelatedKeyIdInToken }
        return listedByApp || app.teamID == teamID ? nil : .invalidProviderToken
    }
}

extension SimulatorConfiguration {
    /// The bundle ids requests are matched against, by app index (the index `ProviderKeyRule.appRejections` uses):
    /// the apps in order, or `bundleID` alone without apps.
    var servedBundleIDs: [String] { apps.isEmpty ? [bundleID] : apps.map(\.bundleID) }

    /// Every key the provider tokens may name, with its rules in `environment`: the apps' keys (each once, in the
    /// order first listed), or without apps `keyID` and `providerKeys` (a topic list without `bundleID` makes the
    /// key unusable for the one app).
    var providerKeyRules: [ProviderKeyRule] {
        func environmentRejection(_ scope: ProviderKeyScope) -> APNsReason? {
            guard let keyEnvironment = scope.environment, keyEnvironment != environment else { return nil }
            return environmentKeyReason
        }
        guard !apps.isEmpty else {
            var rules: [ProviderKeyRule] = []
            if let keyID, providerKeys[keyID] == nil { rules.append(ProviderKeyRule(keyID: keyID)) }
            for (keyID, scope) in providerKeys.sorted(by: { $0.key < $1.key }) {
                var unrelated: APNsReason?
                if let topics = scope.topics, !topics.contains(bundleID) { unrelated = .unrelatedKeyIdInToken }
                rules.append(
                    ProviderKeyRule(keyID: keyID, rejection: environmentRejection(scope), appRejections: [unrelated]))
            }
            return rules
        }
        var rules: [ProviderKeyRule] = []
        for key in distinctAppKeys {
            let appRejections = apps.map { app in
                key.rejection(for: app, listedByApp: app.keys.contains { $0.keyID == key.keyID })
            }
            rules.append(
                ProviderKeyRule(
                    keyID: key.keyID, teamID: key.teamID, rejection: environmentRejection(key.scope),
                    appRejections: appRejections))
        }
        return rules
    }

    /// The apps' keys, each once (a key listed by several apps is one key), in the order first listed.
    var distinctAppKeys: [SimulatedProviderKey] {
        var seen: Set<String> = []
        return apps.flatMap(\.keys).filter { seen.insert($0.keyID).inserted }
    }

    /// The apps: well-formed bundle ids, each once; teams and keys named; a key listed by several apps is the same
    /// key each time. And the sandbox token prefix.
    func validateApps() throws(SimulatorConfigurationError) {
        if let sandboxTokenPrefix, TokenPrefixReply(prefix: sandboxTokenPrefix, reason: .badDeviceToken) == nil {
            throw .invalid(field: "sandboxTokenPrefix", problem: "'\(sandboxTokenPrefix)' must be 1-200 hex digits")
        }
        var bundles: Set<String> = []
        var keys: [String: SimulatedProviderKey] = [:]
        for (index, app) in apps.enumerated() {
            let field = "apps[\(index)]"
            let bundleBytes = Array(app.bundleID.utf8)
            guard bundleBytes.count <= 255, bundleBytes.withUnsafeBytes({ HeaderSyntax.isTopicSyntax($0) }) else {
                throw .invalid(field: "\(field).bundleID", problem: "'\(app.bundleID)' is not a bundle id")
            }
            guard bundles.insert(app.bundleID).inserted else {
                throw .invalid(field: "\(field).bundleID", problem: "\(app.bundleID) is listed twice")
            }
            guard !app.teamID.isEmpty else { throw .invalid(field: "\(field).teamID", problem: "must not be empty") }
            guard !app.keys.isEmpty else { throw .invalid(field: "\(field).keys", problem: "lists no key") }
            for key in app.keys {
                guard !key.keyID.isEmpty, !key.teamID.isEmpty else {
                    throw .invalid(field: "\(field).keys", problem: "a key needs a key id and a team id")
                }
                if key.scope.topics?.isEmpty == true {
                    throw .invalid(
                        field: "\(field).keys", problem: "key \(key.keyID): a topic-specific key needs topics")
                }
                if let other = keys.updateValue(key, forKey: key.keyID), other != key {
                    throw .invalid(
                        field: "\(field).keys",
                        problem: "key \(key.keyID) is listed again with another team, scope or public key")
                }
            }
        }
    }
}

import FanfareStorage
import FanfareTLS

/// One APNs provider key of an app (apns-spec.md §6.1): its key id, the team it belongs to, the environments it
/// may sign for and, for a topic-specific key, the topics it covers. The key material is loaded and checked when
/// the apps file is read (`signer`); its text is never kept or printed.
public struct ProviderKeyDefinition: Sendable, CustomStringConvertible {
    /// Where the `.p8`'s PEM text comes from.
    public enum Source: Sendable, Equatable, CustomStringConvertible {
        /// A file (relative paths are relative to the apps file's directory).
        case file(String)
        /// An environment variable holding the PEM text.
        case environment(String)

        public var description: String {
            switch self {
            case .file(let path): return path
            case .environment(let name): return "$\(name)"
            }
        }
    }

    public var keyID: String
    public var teamID: String
    public var source: Source
    /// Since 2025 a team key may be restricted to one environment; older keys sign for both.
    public var environments: Set<APNsEnvironment>
    /// A topic-specific key covers only these bundle ids (nil: a team-scoped key covers every app of its team).
    public var topics: [String]?
    /// Signs this key's provider tokens (loaded once; signing was checked at load time).
    public var signer: ProviderTokenSigner
    /// A fingerprint of the key material (SHA-256 of the PEM, first 8 bytes in hex): tells a rotated file from an
    /// unchanged one without keeping the key.
    public var fingerprint: String

    public init(
        keyID: String, teamID: String, source: Source, environments: Set<APNsEnvironment>, topics: [String]?,
        signer: ProviderTokenSigner, fingerprint: String
    ) {
        self.keyID = keyID
        self.teamID = teamID
        self.source = source
        self.environments = environments
        self.topics = topics
        self.signer = signer
        self.fingerprint = fingerprint
    }

    /// Whether this key may sign pushes for `bundleID`'s topics in `environment`.
    public func signs(for bundleID: String, in environment: APNsEnvironment) -> Bool {
        guard environments.contains(environment) else { return false }
        guard let topics else { return true }
        return topics.contains(bundleID)
    }

    /// Same key id, team, material, environments and topics.
    public func isSameKey(as other: ProviderKeyDefinition) -> Bool {
        keyID == other.keyID && teamID == other.teamID && fingerprint == other.fingerprint
            && environments == other.environments && topics == other.topics
    }

    public var description: String {
        let environmentList = APNsEnvironment.allCases.filter(environments.contains).map(\.description)
        var text = "key \(keyID) (team \(teamID), \(environmentList.joined(separator: "+"))"
        if let topics { text += ", topics \(topics.joined(separator: ","))" }
        return text + ", from \(source))"
    }
}

// A company's push estate as issue 25 describes it, for the simulator tests: three apps of two teams with their
// provider keys, written as an apps file with the keys' .p8 files beside it.
import FanfareCore
import FanfareSimulator
import FanfareTLS
import Foundation
import Testing

/// scores has a sandbox-only and a production-only team key; league (another team) a topic-specific key; companion
/// (scores' team) an ordinary key for both environments. STRANGER01 is a key no app lists.
final class AppsEstate: @unchecked Sendable {
    static let scores = "com.example.scores"
    static let league = "com.example.league"
    static let companion = "com.example.companion"
    static let bundles = [scores, league, companion]
    static let teams = [
        "SANDBOX001": "TEAM123456", "PROD000001": "TEAM123456", "TOPIC00001": "TEAM999999", "ORDINARY01": "TEAM123456",
        "STRANGER01": "TEAM123456",
    ]
    static let listedKeys = ["SANDBOX001", "PROD000001", "TOPIC00001", "ORDINARY01"]
    /// Tokens starting with this are sandbox tokens (`--sandbox-token-prefix`).
    static let sandboxPrefix = "5a"

    let scratch: ScratchDirectory
    let file: String
    private let signers: [String: ProviderTokenSigner]

    /// `endpoints` and `management` (by environment, "production"/"sandbox") name the simulator's ports in the file,
    /// `caFile` (relative to the scratch directory) each app's CA.
    init(
        _ name: String, endpoints: [String: UInt16] = [:], management: [String: UInt16] = [:], caFile: String? = nil
    ) throws {
        scratch = try ScratchDirectory(name)
        var signers: [String: ProviderTokenSigner] = [:]
        for (keyID, team) in Self.teams {
            let file = scratch.path + "/keys/AuthKey_\(keyID).p8"
            try ProviderKeyGenerator.generate(privateKeyFile: file, publicKeyFile: scratch.path + "/keys/\(keyID).pub")
            signers[keyID] = try ProviderTokenSigner(privateKeyPEMFile: file, keyID: keyID, teamID: team)
        }
        self.signers = signers
        func urls(_ ports: [String: UInt16]) -> String {
            let pairs = ports.sorted { $0.key < $1.key }.map { "\"\($0.key)\": \"https://127.0.0.1:\($0.value)\"" }
            return "{" + pairs.joined(separator: ", ") + "}"
        }
        var places = #", "endpoints": \#(urls(endpoints)), "channel_management": \#(urls(management))"#
        if let caFile { places += #", "ca_file": "\#(caFile)""# }
        let json = """
            {"apps": [
              {"id": "scores", "bundle_id": "\(Self.scores)", "team_id": "TEAM123456", "default": true\(places),
               "keys": [{"key_id": "SANDBOX001", "file": "keys/AuthKey_SANDBOX001.p8", "environments": ["sandbox"]},
                        {"key_id": "PROD000001", "file": "keys/AuthKey_PROD000001.p8", "environments": ["production"]}]},
              {"id": "league", "bundle_id": "\(Self.league)", "team_id": "TEAM999999"\(places),
               "keys": [{"key_id": "TOPIC00001", "file": "keys/AuthKey_TOPIC00001.p8",
                         "environments": ["production", "sandbox"], "topics": ["\(Self.league)"]}]},
              {"id": "companion", "bundle_id": "\(Self.companion)", "team_id": "TEAM123456"\(places),
               "keys": [{"key_id": "ORDINARY01", "file": "keys/AuthKey_ORDINARY01.p8",
                         "environments": ["production", "sandbox"]}]}
            ]}
            """
        file = scratch.path + "/apps.json"
        try json.write(toFile: file, atomically: true, encoding: .utf8)
    }

    /// `authorization` with a fresh token of `keyID` (naming `team` as `iss` when given).
    func bearer(_ keyID: String, team: String? = nil) throws -> (String, String) {
        let signer = try #require(signers[keyID])
        let now = Int64(Date().timeIntervalSince1970)
        if let team {
            let renamed = try ProviderTokenSigner(
                privateKeyPEMFile: scratch.path + "/keys/AuthKey_\(keyID).p8", keyID: keyID, teamID: team)
            return ("authorization", "bearer \(try renamed.mint(issuedAt: now).jwt)")
        }
        return ("authorization", "bearer \(try signer.mint(issuedAt: now).jwt)")
    }

    /// What APNs answers a push for `bundle` signed with `keyID` in `environment`: nil when it is accepted.
    static func expectedRejection(
        keyID: String, bundle: String, environment: SimulatorConfiguration.Environment
    ) -> APNsReason? {
        switch keyID {
        case "SANDBOX001" where environment == .production, "PROD000001" where environment == .sandbox:
            return .badEnvironmentKeyIdInToken
        case "TOPIC00001":
            return bundle == league ? nil : .unrelatedKeyIdInToken
        case "STRANGER01":
            return .invalidProviderToken
        default:
            // A team key of scores' team: its team's apps, not league.
            return bundle == league ? .invalidProviderToken : nil
        }
    }

    /// A 32-byte token of `environment`, different for each `index`.
    static func token(_ index: Int, _ environment: SimulatorConfiguration.Environment) -> String {
        let rest = String(index, radix: 16)
        let prefix = environment == .sandbox ? sandboxPrefix : "ab"
        return prefix + String(repeating: "0", count: 62 - rest.count) + rest
    }

    static let liveActivityBody = #"{"aps":{"timestamp":1750000000,"event":"update","content-state":{"score":1}}}"#

    /// A Live Activity push's headers for `bundle`.
    static func pushHeaders(_ bundle: String, authorization: (String, String)) -> [(String, String)] {
        [authorization, ("apns-topic", bundle + ".push-type.liveactivity"), ("apns-push-type", "liveactivity")]
    }
}

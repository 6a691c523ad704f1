// What every interop test needs: its own temp directory with a fresh CA + localhost server certificate and
// a provider key pair, a JWT signed with that key, and (optionally) our APNs simulator on an ephemeral port.
import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTLS
import Foundation

/// A fresh directory under /tmp, removed when the value is released.
final class TemporaryDirectory: @unchecked Sendable {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "fanfare-interop-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    func file(_ name: String) -> String { path + "/" + name }

    @discardableResult
    func write(_ name: String, _ contents: String) throws -> String {
        try contents.write(toFile: file(name), atomically: true, encoding: .utf8)
        return file(name)
    }
}

/// Values the simulator's default configuration expects.
enum InteropValues {
    static let bundleID = "com.example.fanfare"
    static let teamID = "TEAMID0001"
    static let keyID = "KEYID00001"
    static let liveActivityTopic = Topic.liveActivity(bundleID: bundleID)
    /// A Live Activity update body, as an app server would send it.
    static let liveActivityBody =
        #"{"aps":{"timestamp":1750000000,"event":"update","content-state":{"home":2,"away":1,"minute":63},"stale-date":1750003600}}"#

    /// `byteCount` bytes of token as lowercase hex (160 digits for the 80-byte tokens Live Activities use).
    static func hexToken(byteCount: Int = 80, seed: UInt8 = 0x5A) -> String {
        var text = ""
        var value = seed
        for _ in 0..<byteCount {
            value = value &* 37 &+ 11
            text += String(format: "%02x", value)
        }
        return text
    }

    /// A JSON object with an `aps` object, exactly `byteCount` bytes long.
    static func body(ofSize byteCount: Int) -> String {
        let skeleton = #"{"aps":{"pad":""}}"#
        precondition(byteCount >= skeleton.utf8.count, "body too small for its skeleton")
        return #"{"aps":{"pad":""# + String(repeating: "x", count: byteCount - skeleton.utf8.count) + #""}}"#
    }
}

/// A temp directory holding certificates and a provider key pair, and a signer for that key.
final class InteropFixture: @unchecked Sendable {
    let directory: TemporaryDirectory
    let certificates: GeneratedCertificates
    let providerPrivateKeyFile: String
    let providerPublicKeyFile: String
    let signer: ProviderTokenSigner

    init() throws {
        directory = try TemporaryDirectory()
        certificates = try CertificateAuthority.generateLocalhostChain(in: directory.path)
        providerPrivateKeyFile = directory.file("AuthKey_\(InteropValues.keyID).p8")
        providerPublicKeyFile = directory.file("provider-public.pem")
        try ProviderKeyGenerator.generate(privateKeyFile: providerPrivateKeyFile, publicKeyFile: providerPublicKeyFile)
        signer = try ProviderTokenSigner(
            privateKeyPEMFile: providerPrivateKeyFile, keyID: InteropValues.keyID, teamID: InteropValues.teamID)
    }

    /// `authorization` header value with a JWT issued now (valid for the simulator's hour).
    func authorizationHeaderValue() throws -> String {
        try signer.mint(issuedAt: Int64(Date().timeIntervalSince1970)).authorizationHeaderValue
    }

    /// Starts our simulator on 127.0.0.1 with an ephemeral port, verifying JWTs with the fixture's key.
    func startSimulator(configuration: SimulatorConfiguration = SimulatorConfiguration()) throws -> APNsSimulator {
        let tls = try TLSContext.server(
            certificateFile: certificates.certificateFile, privateKeyFile: certificates.privateKeyFile)
        let verifier = ES256ProviderTokenVerifier(try ProviderTokenVerifier(publicKeyPEMFile: providerPublicKeyFile))
        let options = APNsSimulator.Options(listen: SocketAddress.loopbackIPv4(port: 0), tls: tls, verifier: verifier)
        let simulator = try APNsSimulator(configuration: configuration, options: options)
        precondition(simulator.boundAddress.port != 0, "the simulator must report the port it bound")
        return simulator
    }
}

extension APNsSimulator {
    /// Shuts the simulator down, then reads its counters. Workers publish counters at most every 20 ms and
    /// only when their loop ticks, so a live snapshot may lag the last answers; a stopping worker publishes
    /// before it reports stopped, so after `shutdown()` the numbers are final.
    func finalStatistics() -> SimulatorStats {
        shutdown()
        return statistics()
    }
}

// An in-process `fanfare serve`: a real FanfareServer (Hummingbird on a loopback port, the engine on a real
// SQLite file) sending to a real APNsSimulator over loopback TLS + HTTP/2. Tests talk to it with
// HTTPTestClient, over the socket.
import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareIO
import FanfareService
import FanfareSimulator
import FanfareTLS
import FanfareTestSupport
import Foundation
import Logging
import Testing

/// The CA, server certificate and provider key of every in-process fixture, made once per test process.
final class ServiceKeys: Sendable {
    static let shared: ServiceKeys = {
        do { return try ServiceKeys() } catch { fatalError("cannot create the service test keys: \(error)") }
    }()

    static let bundleID = "com.example.fanfare"
    static let keyID = "KEYID00001"
    static let teamID = "TEAMID0001"

    let directory: String
    /// The CA that signed the simulator's certificate, and the provider key it trusts (PEM files).
    let caFile: String
    let privateKeyFile: String
    let serverTLS: TLSContext
    let clientTLS: TLSContext
    let verifier: ES256ProviderTokenVerifier
    let signer: ProviderTokenSigner

    private init() throws {
        directory = NSTemporaryDirectory() + "fanfare-service-keys-" + UUID().uuidString
        let chain = try CertificateAuthority.generateLocalhostChain(in: directory)
        caFile = chain.caCertificateFile
        privateKeyFile = directory + "/AuthKey_\(Self.keyID).p8"
        let publicKeyFile = directory + "/AuthKey_\(Self.keyID).pub.pem"
        try ProviderKeyGenerator.generate(privateKeyFile: privateKeyFile, publicKeyFile: publicKeyFile)
        serverTLS = try TLSContext.server(certificateFile: chain.certificateFile, privateKeyFile: chain.privateKeyFile)
        clientTLS = try TLSContext.client(caFile: chain.caCertificateFile)
        verifier = ES256ProviderTokenVerifier(try ProviderTokenVerifier(publicKeyPEMFile: publicKeyFile))
        signer = try ProviderTokenSigner(privateKeyPEMFile: privateKeyFile, keyID: Self.keyID, teamID: Self.teamID)
    }
}

final class ServiceFixture: @unchecked Sendable {
    let directory: String
    let databasePath: String
    let acceptedLogPath: String
    let simulator: APNsSimulator
    let server: FanfareServer
    let client: HTTPTestClient
    private let serving: Task<Void, any Error>

    /// `configure` adjusts the service (keys, limits, the engine) before it starts.
    init(
        simulator simulatorConfiguration: SimulatorConfiguration = ServiceFixture.simulatorConfiguration(),
        databasePath: String? = nil, directory: String? = nil, management: Bool = false,
        configure: (inout ServiceConfiguration) throws -> Void = { _ in }
    ) async throws {
        let directory = directory ?? NSTemporaryDirectory() + "fanfare-service-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.directory = directory
        self.databasePath = databasePath ?? directory + "/fanfare.db"
        acceptedLogPath = directory + "/accepted-\(UUID().uuidString.prefix(8)).jsonl"
        let keys = ServiceKeys.shared
        var options = APNsSimulator.Options(
            listen: try SocketAddress(ip: "127.0.0.1", port: 0), tls: keys.serverTLS, verifier: keys.verifier)
        options.acceptedLogPath = acceptedLogPath
        // The channel management API on a port of its own, as APNs has it.
        if management { options.managementListen = try SocketAddress(ip: "127.0.0.1", port: 0) }
        simulator = try APNsSimulator(configuration: simulatorConfiguration, options: options)

        var client = ClientConfiguration(
            host: "127.0.0.1", port: simulator.boundAddress.port, tls: keys.clientTLS,
            providerTokens: ProviderTokenSource(signer: keys.signer),
            topic: Topic.liveActivity(bundleID: ServiceKeys.bundleID))
        client.connectionsPerWorker = 2
        client.requestTimeout = TestTime.scaled(Liveness.condition)  // a hang guard
        client.buffers = .small
        var fanout = FanoutConfiguration(client: client, bundleID: ServiceKeys.bundleID)
        fanout.minimumInterval = nil
        fanout.retryDelays = [.milliseconds(10), .milliseconds(20), .milliseconds(40)]
        if let managementPort = simulator.managementAddress?.port {
            var channels = ChannelManagementConfiguration(
                host: "127.0.0.1", port: managementPort, tls: keys.clientTLS, providerTokens: client.providerTokens,
                bundleID: ServiceKeys.bundleID)
            channels.requestTimeout = TestTime.scaled(Liveness.condition)
            fanout.channelManagement = channels
        }
        var configuration = ServiceConfiguration(
            host: "127.0.0.1", port: 0, databasePath: self.databasePath, fanout: fanout)
        configuration.eventInterval = .milliseconds(50)
        var logger = Logger(label: "fanfare.service.test")
        logger.logLevel = .warning
        configuration.logger = logger
        try configure(&configuration)
        do {
            server = try FanfareServer(configuration: configuration)
        } catch {
            await simulator.shutdown()
            throw error
        }
        let server = self.server
        serving = Task { try await server.run() }
        guard let port = await server.listeningPort() else {
            await simulator.shutdown()
            _ = try? await serving.value
            throw HTTPTestError(description: "the service did not listen")
        }
        self.client = HTTPTestClient(port: port)
    }

    /// The simulator as `fanfare serve --simulator` runs it, without latency unless asked.
    static func simulatorConfiguration(latency: LatencyModel = .none) -> SimulatorConfiguration {
        var configuration = SimulatorConfiguration()
        configuration.keyID = ServiceKeys.keyID
        configuration.latency = latency
        configuration.tokenPrefixReplies = [
            TokenPrefixReply(prefix: "0410", reason: .unregistered)!,
            TokenPrefixReply(prefix: "0400", reason: .badDeviceToken)!,
        ]
        return configuration
    }

    /// Graceful shutdown of the service (waves finish), then the simulator (which flushes its log).
    func stop() async throws {
        server.shutdown()
        try await stopped()
    }

    /// Waits for a shutdown already asked for (a second `shutdown()` would stop waiting for waves), then stops
    /// the simulator.
    func stopped() async throws {
        try await serving.value
        await simulator.shutdown()
    }

    deinit {
        server.shutdown()
        simulator.shutdown()
    }

    func removeDirectory() { try? FileManager.default.removeItem(atPath: directory) }

    /// Lines of the simulator's accepted-push log (after `stop()`).
    func acceptedLines() -> [Substring] {
        ((try? String(contentsOfFile: acceptedLogPath, encoding: .utf8)) ?? "").split(separator: "\n")
    }
}

// MARK: - Request bodies

/// A distinct 32-byte token per index, never starting with the simulator's 0410 / 0400 prefixes.
func tokenHex(_ index: Int, salt: Int = 0) -> String {
    var hex = "a1"
    var value =
        UInt64(truncatingIfNeeded: index) &* 0x9E37_79B9_7F4A_7C15 ^ UInt64(truncatingIfNeeded: salt)
        &* 0xD6E8_FEB8_6659_FD93
    while hex.utf8.count < 64 {
        let piece = String(value, radix: 16)
        hex += String(repeating: "0", count: 16 - piece.utf8.count) + piece
        value = value &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
    }
    // The index itself, so tokens are distinct whatever the mixing does.
    let suffix = String(index, radix: 16)
    return String(hex.prefix(64 - suffix.utf8.count)) + suffix
}

/// `{"tokens":[...]}` of update tokens following `channel`.
func registrationBody(_ range: Range<Int>, channel: String, salt: Int = 0) -> String {
    var body = #"{"tokens":["#
    body.reserveCapacity(range.count * 140)
    for index in range {
        if index != range.lowerBound { body += "," }
        body +=
            #"{"token":"\#(tokenHex(index, salt: salt))","kind":"update","channels":["\#(channel)"],"activity_id":"act-\#(index)"}"#
    }
    return body + "]}"
}

func updateBody(timestamp: Int64, home: Int, away: Int = 0) -> String {
    #"{"event":"update","timestamp":\#(timestamp),"content_state":{"home":\#(home),"away":\#(away)}}"#
}

var unixNow: Int64 { Int64(Date().timeIntervalSince1970) }

/// The problem document of an error answer, checked for the RFC 9457 shape.
func problem(
    _ response: HTTPTestResponse, status: Int, code: String, sourceLocation: SourceLocation = #_sourceLocation
) -> [String: Any] {
    #expect(response.status == status, "\(response)", sourceLocation: sourceLocation)
    #expect(
        response.header("content-type") == "application/problem+json", "\(response)", sourceLocation: sourceLocation)
    let document = response.json ?? [:]
    #expect(document["code"] as? String == code, "\(response)", sourceLocation: sourceLocation)
    #expect(document["status"] as? Int == status, sourceLocation: sourceLocation)
    #expect(document["type"] as? String == "urn:fanfare:problem:\(code)", sourceLocation: sourceLocation)
    #expect((document["title"] as? String)?.isEmpty == false, sourceLocation: sourceLocation)
    #expect((document["detail"] as? String)?.isEmpty == false, sourceLocation: sourceLocation)
    return document
}

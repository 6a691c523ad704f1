// Sends one Live Activity push through Fanfare used as a versioned dependency: a single push through the
// client, then one through the fan-out engine (a channel update to a registered token), both to Fanfare's
// APNs simulator started in this process on loopback. Exits 0 only if both are answered 200.
import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareIO
import FanfareSQLite
import FanfareStorage
import FanfareSimulator
import FanfareTLS
import Foundation

// Opt in to OpenSSL's per-thread allocation cache before anything uses OpenSSL (the library never does it
// by itself: it replaces the allocator of every OpenSSL user in the process).
let cacheInstalled = OpenSSLAllocationCache.install()

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("versioned consumer: \(message)\n".utf8))
    exit(1)
}

let directory = NSTemporaryDirectory() + "fanfare-consumer-" + UUID().uuidString
defer { try? FileManager.default.removeItem(atPath: directory) }
let bundleID = "com.example.fanfare"

do {
    // A CA and a localhost certificate for the simulator, a provider key for the JWTs.
    let chain = try CertificateAuthority.generateLocalhostChain(in: directory)
    let privateKey = directory + "/AuthKey_KEYID00001.p8"
    let publicKey = directory + "/AuthKey_KEYID00001.pub.pem"
    try ProviderKeyGenerator.generate(privateKeyFile: privateKey, publicKeyFile: publicKey)

    let simulator = try APNsSimulator(
        configuration: SimulatorConfiguration(),
        options: APNsSimulator.Options(
            listen: try SocketAddress(ip: "127.0.0.1", port: 0),
            tls: try TLSContext.server(certificateFile: chain.certificateFile, privateKeyFile: chain.privateKeyFile),
            verifier: ES256ProviderTokenVerifier(try ProviderTokenVerifier(publicKeyPEMFile: publicKey))))
    defer { simulator.shutdown() }

    let signer = try ProviderTokenSigner(privateKeyPEMFile: privateKey, keyID: "KEYID00001", teamID: "TEAMID0001")
    var client = ClientConfiguration(
        host: "127.0.0.1", port: simulator.boundAddress.port, tls: try TLSContext.client(caFile: chain.caCertificateFile),
        providerTokens: ProviderTokenSource(signer: signer), topic: Topic.liveActivity(bundleID: bundleID))
    client.requestTimeout = .seconds(20)

    var content = LiveActivityContent(event: .update, timestamp: Int64(Date().timeIntervalSince1970))
    content.contentState = try RawJSON(validating: #"{"home":1,"away":0}"#)
    let token = try DeviceToken(hex: String(repeating: "ab", count: 32))

    // 1. One push through the client.
    let apns = try APNsClient(configuration: client)
    let single = try await apns.send(PushJob(token: token, payload: try PushPayload(liveActivity: content), priority: .normal))
    apns.shutdown()
    guard case .delivered = single.disposition else { fail("the client's push ended \(single.disposition)") }
    print("client push: \(single.disposition) apns-id \(single.apnsID)")

    // 2. A channel update through the fan-out engine, on a registry file.
    let store = try SQLiteTokenStore(path: directory + "/registry.db")
    let engine = try FanoutEngine(configuration: FanoutConfiguration(client: client, bundleID: bundleID), store: store)
    defer { engine.shutdown() }
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    try engine.register([
        TokenRegistration(
            token: token, kind: .update, activityID: "activity-1", bundleID: bundleID, environment: .production,
            channels: ["match-1"], createdAt: now)
    ])
    content.timestamp += 1
    content.contentState = try RawJSON(validating: #"{"home":2,"away":0}"#)
    let wave = try engine.publish(ChannelUpdate(channel: "match-1", content: content))
    await wave.completion()
    let report = wave.report
    guard report.targeted == 1, report.delivered == 1 else { fail("the wave ended \(report)") }
    print("fan-out wave: targeted \(report.targeted), delivered \(report.delivered)")
    print("OpenSSL allocation cache: \(cacheInstalled ? "on" : "off")")
} catch {
    fail("\(error)")
}

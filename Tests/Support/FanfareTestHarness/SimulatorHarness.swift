// Shared set-up for the end-to-end tests: a real APNsSimulator on 127.0.0.1:<ephemeral> and real APNsClients
// pointed at it over loopback TLS + HTTP/2. Every test builds its own harness (its own simulator, port and
// log), so tests can run in parallel.
import FanfareClient
import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTLS
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

/// The identity the simulator is configured with by default (`SimulatorConfiguration` defaults).
package enum Fixture {
    package static let bundleID = "com.example.fanfare"
    package static let teamID = "TEAMID0001"
    package static let keyID = "KEYID00001"
    package static var topic: String { Topic.liveActivity(bundleID: bundleID) }
}

/// A fresh CA, localhost server certificate and provider key pair (plus a second key pair the simulator does
/// not trust), made once per test process in a temp directory, with the TLS contexts, verifier and signer
/// loaded from them. Shared because OpenSSL 3.0 decodes PEM keys slowly and under a lock: thirty tests doing
/// it at once would keep the test threads busy for seconds.
package final class SharedKeys: Sendable {
    package static let shared: SharedKeys = {
        do {
            let keys = try SharedKeys()
            atexit { try? FileManager.default.removeItem(atPath: SharedKeys.shared.directory) }
            return keys
        } catch {
            fatalError("cannot create the end-to-end test keys: \(error)")
        }
    }()

    package let directory: String
    package let caFile: String
    /// The provider key whose public half the simulator's verifier trusts.
    package let privateKeyFile: String
    /// A provider key the simulator knows nothing about.
    package let unknownPrivateKeyFile: String
    package let serverTLS: TLSContext
    package let clientTLS: TLSContext
    package let verifier: ES256ProviderTokenVerifier
    /// Signs with the trusted key as `Fixture.keyID` / `Fixture.teamID`.
    package let signer: ProviderTokenSigner

    private init() throws {
        directory = NSTemporaryDirectory() + "fanfare-e2e-keys-" + UUID().uuidString
        let chain = try CertificateAuthority.generateLocalhostChain(in: directory)
        caFile = chain.caCertificateFile
        privateKeyFile = directory + "/AuthKey_\(Fixture.keyID).p8"
        let publicKeyFile = directory + "/AuthKey_\(Fixture.keyID).pub.pem"
        try ProviderKeyGenerator.generate(privateKeyFile: privateKeyFile, publicKeyFile: publicKeyFile)
        unknownPrivateKeyFile = directory + "/AuthKey_UNKNOWN.p8"
        try ProviderKeyGenerator.generate(
            privateKeyFile: unknownPrivateKeyFile, publicKeyFile: directory + "/AuthKey_UNKNOWN.pub.pem")
        serverTLS = try TLSContext.server(certificateFile: chain.certificateFile, privateKeyFile: chain.privateKeyFile)
        clientTLS = try TLSContext.client(caFile: caFile)
        verifier = ES256ProviderTokenVerifier(try ProviderTokenVerifier(publicKeyPEMFile: publicKeyFile))
        signer = try ProviderTokenSigner(
            privateKeyPEMFile: privateKeyFile, keyID: Fixture.keyID, teamID: Fixture.teamID)
    }
}

/// A simulator plus everything a client needs to reach it. Call `shutdown()` at the end of the test
/// (clients first, then the simulator); `deinit` does it too and removes the directory.
package final class TestHarness: @unchecked Sendable {
    /// This test's own directory (accepted-push logs).
    package let directory: String
    package let acceptedLogPath: String
    package let keys = SharedKeys.shared
    private let verifier: ObservingVerifier
    package let simulator: APNsSimulator
    private let extraSimulators = Mutex<[APNsSimulator]>([])
    private let clients = Mutex<[APNsClient]>([])
    private let isShutDown = Atomic<Bool>(false)

    /// `observeTokens` sees every provider token the simulator verified (on its thread, before it applies
    /// the age and binding rules).
    /// `management` adds the channel-management listener (`managementPort`); `channelStateFile` keeps the
    /// channels in that file (relative to this test's directory).
    package init(
        _ configuration: SimulatorConfiguration = SimulatorConfiguration(), threads: Int = 1,
        maxStreamsPerWorker: Int? = nil,
        management: Bool = false, channelStateFile: String? = nil,
        observeTokens: (@Sendable (VerifiedProviderToken) -> Void)? = nil
    ) throws {
        let directory = NSTemporaryDirectory() + "fanfare-e2e-" + UUID().uuidString
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        acceptedLogPath = directory + "/accepted.jsonl"
        verifier = ObservingVerifier(inner: SharedKeys.shared.verifier, observe: observeTokens)
        simulator = try Self.makeSimulator(
            configuration, threads: threads, maxStreamsPerWorker: maxStreamsPerWorker, port: 0, verifier: verifier,
            log: acceptedLogPath,
            managementPort: management ? 0 : nil, channelStateFile: channelStateFile.map { directory + "/" + $0 })
    }

    private static func makeSimulator(
        _ configuration: SimulatorConfiguration, threads: Int, maxStreamsPerWorker: Int? = nil, port: UInt16,
        verifier: ObservingVerifier,
        log: String, managementPort: UInt16? = nil, channelStateFile: String? = nil
    ) throws -> APNsSimulator {
        var options = APNsSimulator.Options(
            listen: try SocketAddress(ip: "127.0.0.1", port: port), tls: SharedKeys.shared.serverTLS, verifier: verifier
        )
        options.threads = threads
        options.maxStreamsPerWorker = maxStreamsPerWorker
        options.acceptedLogPath = log
        options.managementListen = try managementPort.map { try SocketAddress(ip: "127.0.0.1", port: $0) }
        options.channelStateFile = channelStateFile
        return try APNsSimulator(configuration: configuration, options: options)
    }

    /// Another simulator on `port` (e.g. the first one's, after it stopped: a restarted APNs), with the same
    /// certificate and provider key and its own accepted-push log. `shutdown()` stops it too.
    /// `managementPort` and `channelStateFile` (relative to this test's directory) as in `init`.
    package func startSimulator(
        _ configuration: SimulatorConfiguration = SimulatorConfiguration(), port: UInt16, log: String,
        managementPort: UInt16? = nil, channelStateFile: String? = nil
    ) throws -> APNsSimulator {
        let simulator = try Self.makeSimulator(
            configuration, threads: 1, port: port, verifier: verifier, log: directory + "/" + log,
            managementPort: managementPort,
            channelStateFile: channelStateFile.map { directory + "/" + $0 })
        extraSimulators.withLock { $0.append(simulator) }
        return simulator
    }

    deinit {
        shutdown()
        try? FileManager.default.removeItem(atPath: directory)
    }

    package var port: UInt16 { simulator.boundAddress.port }

    /// The management listener's port (a harness made with `management: true`).
    package var managementPort: UInt16 { simulator.managementAddress?.port ?? 0 }

    /// A signer with the trusted key (or `privateKeyFile`), under the given key and team IDs.
    package func signer(
        keyID: String = Fixture.keyID, teamID: String = Fixture.teamID, privateKeyFile: String? = nil
    ) throws
        -> ProviderTokenSigner
    {
        if keyID == Fixture.keyID && teamID == Fixture.teamID && privateKeyFile == nil { return keys.signer }
        return try ProviderTokenSigner(
            privateKeyPEMFile: privateKeyFile ?? keys.privateKeyFile, keyID: keyID, teamID: teamID)
    }

    /// A client configuration aimed at this simulator, with test-sized buffers, queues and back-off.
    package func clientConfiguration(
        topic: String = Fixture.topic, tokens: ProviderTokenSource? = nil, port: UInt16? = nil
    ) throws -> ClientConfiguration {
        var configuration = ClientConfiguration(
            host: "127.0.0.1", port: port ?? self.port, tls: keys.clientTLS,
            providerTokens: try tokens ?? ProviderTokenSource(signer: signer()), topic: topic)
        // Hang guards, not behaviour under test (tests of deadlines and connect timeouts set their own).
        configuration.requestTimeout = TestTime.scaled(Liveness.condition)
        configuration.connectTimeout = TestTime.scaled(.seconds(30))
        configuration.reconnectBackoffMinimum = .milliseconds(5)
        configuration.reconnectBackoffMaximum = .milliseconds(100)
        // A fixed count, chosen: tests count connections (the engine would otherwise autoscale).
        configuration.connectionsPerWorker = 1
        configuration.pendingCapacityPerWorker = 1 << 12
        configuration.inboxCapacityPerWorker = 1 << 12
        configuration.buffers = .small
        return configuration
    }

    /// Starts a client whose results go to `collector`; `shutdown()` stops it.
    package func startClient(_ configuration: ClientConfiguration, collector: ResultCollector) throws -> APNsClient {
        let client = try APNsClient(configuration: configuration, resultHandler: collector)
        clients.withLock { $0.append(client) }
        return client
    }

    /// Stops every client (pushes still open end as `.failed(.shutdown)`), then the simulator (which flushes
    /// the accepted-push log). Idempotent.
    package func shutdown() {
        guard !isShutDown.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for client in clients.withLock({ $0 }) { client.shutdown() }
        simulator.shutdown()
        for extra in extraSimulators.withLock({ $0 }) { extra.shutdown() }
    }

    /// `shutdown()` with the waits on a thread of their own (the sync one is for `defer`).
    package func shutdown() async {
        await BlockingHandOff.run(name: "harness-stop") { self.shutdown() }
    }

    /// The simulator's accepted-push log as raw lines and parsed objects (call after `shutdown()`).
    package func acceptedLog() throws -> [AcceptedRecord] {
        guard FileManager.default.fileExists(atPath: acceptedLogPath) else { return [] }
        let text = try String(contentsOfFile: acceptedLogPath, encoding: .utf8)
        return try text.split(separator: "\n").map { line in
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8))
            return AcceptedRecord(line: String(line), fields: try #require(object as? [String: Any]))
        }
    }

    /// The accepted pushes by token hex: the apns-ids of each token's lines, in order (broadcasts left out).
    package func acceptedIDsByToken() throws -> [String: [String]] {
        var byToken: [String: [String]] = [:]
        for record in try acceptedLog() {
            guard let token = record.string("token"), let id = record.string("apns-id") else { continue }
            byToken[token, default: []].append(id)
        }
        return byToken
    }
}

/// The real ES256 verifier, reporting what it verified.
package struct ObservingVerifier: ProviderTokenVerifying {
    package let inner: ES256ProviderTokenVerifier
    package let observe: (@Sendable (VerifiedProviderToken) -> Void)?

    package func verify(jwt: UnsafeRawBufferPointer) -> VerifiedProviderToken? {
        let verified = inner.verify(jwt: jwt)
        if let verified { observe?(verified) }
        return verified
    }
}

/// One line of the simulator's accepted-push log.
package struct AcceptedRecord: @unchecked Sendable {
    package let line: String
    package let fields: [String: Any]

    package func string(_ key: String) -> String? { fields[key] as? String }
    package func int(_ key: String) -> Int? { (fields[key] as? NSNumber)?.intValue }
    package func isNull(_ key: String) -> Bool { fields[key] is NSNull }
    /// The payload exactly as the simulator re-emitted it (the last field of the line).
    package func hasPayload(_ json: String) -> Bool { line.hasSuffix(",\"payload\":" + json + "}") }
}

/// Checks that the simulator's accepted-log `record` carries `job`'s headers and `payload` exactly.
package func expectRecord(
    _ record: AcceptedRecord, matches job: PushJob, payload: PushPayload, _ name: String = "",
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(record.string("token") == job.token.hexString, "\(name)", sourceLocation: sourceLocation)
    #expect(
        record.string("topic") == "\(Fixture.bundleID).push-type.liveactivity", "\(name)",
        sourceLocation: sourceLocation)
    #expect(record.string("push-type") == "liveactivity", "\(name)", sourceLocation: sourceLocation)
    #expect(record.int("priority") == job.priority.rawValue, "\(name)", sourceLocation: sourceLocation)
    if let expiration = job.expiration {
        #expect(record.int("expiration") == Int(expiration), "\(name)", sourceLocation: sourceLocation)
    } else {
        #expect(record.isNull("expiration"), "\(name)", sourceLocation: sourceLocation)
    }
    if let collapseID = job.collapseID {
        #expect(record.string("collapse-id") == collapseID, "\(name)", sourceLocation: sourceLocation)
    } else {
        #expect(record.isNull("collapse-id"), "\(name)", sourceLocation: sourceLocation)
    }
    #expect(
        record.hasPayload(payload.text), "\(name): \(record.line) vs \(payload.text)", sourceLocation: sourceLocation)
}

/// Collects every result the client reports, from any worker thread.
package final class ResultCollector: PushResultHandler {
    package init() {}

    private let results = Mutex<[PushResult]>([])

    package func pushCompleted(_ result: PushResult) {
        results.withLock { $0.append(result) }
    }

    package var all: [PushResult] { results.withLock { $0 } }
    package var count: Int { results.withLock { $0.count } }

    /// Waits until at least `count` results arrived; false if `timeout` (scaled) passed first (a hang guard, not a
    /// timing assertion).
    package func waitFor(count: Int, timeout: Duration = Liveness.condition) async -> Bool {
        await eventually(timeout: timeout) { self.count >= count }
    }

    /// Results by cookie; records a test issue for any cookie reported twice.
    package func byCookie(sourceLocation: SourceLocation = #_sourceLocation) -> [UInt64: PushResult] {
        var map: [UInt64: PushResult] = [:]
        for result in all {
            if map.updateValue(result, forKey: result.cookie) != nil {
                Issue.record("cookie \(result.cookie) reported twice", sourceLocation: sourceLocation)
            }
        }
        return map
    }
}

/// Runs `action` on a thread of its own the moment `condition` holds (polled about every half millisecond)
/// and returns its result; nil if `timeout` (scaled) passed first. For acting on a passing state (a burst in
/// flight) that a task polling every few milliseconds could miss.
package func perform<T: Sendable>(
    when condition: @escaping @Sendable () -> Bool, timeout: Duration = Liveness.condition,
    _ action: @escaping @Sendable () throws -> T
) async throws -> T? {
    let outcome: Result<T, any Error>? = await withCheckedContinuation { continuation in
        let thread = Thread {
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: TestTime.scaled(timeout))
            while !condition() {
                if clock.now >= deadline {
                    continuation.resume(returning: nil)
                    return
                }
                usleep(500)
            }
            continuation.resume(returning: Result { try action() })
        }
        thread.start()
    }
    return try outcome?.get()
}

/// A deterministic, distinct token per index (`salt` separates groups): splitmix64 words, 32 bytes unless asked
/// (80 is the size Live Activity tokens are seen at).
package func makeToken(_ index: Int, salt: UInt64 = 0, byteCount: Int = 32) -> DeviceToken {
    var state = UInt64(truncatingIfNeeded: index) &* 0x9E37_79B9_7F4A_7C15 ^ salt ^ 0xD1B5_4A32_D192_ED03
    var bytes: [UInt8] = []
    bytes.reserveCapacity(byteCount + 7)
    while bytes.count < byteCount {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        withUnsafeBytes(of: z.littleEndian) { bytes.append(contentsOf: $0) }
    }
    return try! DeviceToken(bytes: bytes.prefix(byteCount))
}

/// A small Live Activity update payload.
package func updatePayload(minute: Int = 63) throws -> PushPayload {
    var content = LiveActivityContent(event: .update, timestamp: Int64(Date().timeIntervalSince1970))
    content.contentState = try RawJSON(validating: #"{"home":1,"away":0,"minute":\#(minute)}"#)
    return try PushPayload(liveActivity: content)
}

/// Submits every job, waiting out back-pressure (the inbox is bounded; a full one is not a failure here).
package func submitAll(_ client: APNsClient, _ jobs: [PushJob]) async throws {
    for job in jobs {
        while true {
            do {
                try client.submit(job)
                break
            } catch .backPressure {
                try await Task.sleep(for: .milliseconds(1))
            }
        }
    }
}

/// The text of an encoded payload (for comparing with the accepted-push log).
extension PushPayload {
    package var text: String { String(decoding: bytes, as: UTF8.self) }
}

extension PushDisposition {
    package var rejectionReason: APNsReason? {
        if case .rejected(_, let reason, _, _, _) = self { return reason }
        return nil
    }
    package var status: Int? {
        switch self {
        case .delivered: return 200
        case .rejected(let status, _, _, _, _): return status
        case .failed: return nil
        }
    }
    package var failure: PushFailure? {
        if case .failed(let failure) = self { return failure }
        return nil
    }
}

extension TestHarness {
    /// A channel manager aimed at this simulator's management port, with the trusted key (or `signer`).
    package func channelManager(
        signer: ProviderTokenSigner? = nil, configure: (inout ChannelManagementConfiguration) -> Void = { _ in }
    ) throws
        -> BroadcastChannelManager
    {
        var configuration = ChannelManagementConfiguration(
            host: "127.0.0.1", port: managementPort, tls: keys.clientTLS,
            providerTokens: try ProviderTokenSource(signer: signer ?? self.signer()), bundleID: Fixture.bundleID)
        configuration.requestTimeout = TestTime.scaled(Liveness.condition)
        configure(&configuration)
        return try BroadcastChannelManager(configuration: configuration)
    }
}

// `fanfare load`'s accounting, against the real simulator over loopback TLS + HTTP/2: every push handed to
// the client appears exactly once in the report, whatever happened to it.
import FanfareClient
import FanfareCore
import FanfareIO
import FanfareLoad
import FanfareSimulator
import FanfareTLS
import FanfareTestSupport
import Foundation
import Testing

/// Keys and certificates for this test process (generated once; OpenSSL key parsing is slow).
final class LoadFixture: Sendable {
    static let shared = try! LoadFixture()

    let directory: String
    let serverTLS: TLSContext
    let clientTLS: TLSContext
    let verifier: ES256ProviderTokenVerifier
    let signer: ProviderTokenSigner

    private init() throws {
        directory = NSTemporaryDirectory() + "fanfare-load-tests-" + UUID().uuidString
        let chain = try CertificateAuthority.generateLocalhostChain(in: directory)
        let privateKey = directory + "/AuthKey.p8"
        let publicKey = directory + "/AuthKey.pub.pem"
        try ProviderKeyGenerator.generate(privateKeyFile: privateKey, publicKeyFile: publicKey)
        serverTLS = try TLSContext.server(certificateFile: chain.certificateFile, privateKeyFile: chain.privateKeyFile)
        clientTLS = try TLSContext.client(caFile: chain.caCertificateFile)
        verifier = ES256ProviderTokenVerifier(try ProviderTokenVerifier(publicKeyPEMFile: publicKey))
        signer = try ProviderTokenSigner(privateKeyPEMFile: privateKey, keyID: "KEYID00001", teamID: "TEAMID0001")
    }

    func simulator(_ configuration: SimulatorConfiguration) throws -> APNsSimulator {
        try APNsSimulator(
            configuration: configuration,
            options: .init(listen: SocketAddress.loopbackIPv4(port: 0), tls: serverTLS, verifier: verifier))
    }

    func client(port: UInt16, timeout: Duration = .seconds(20)) -> ClientConfiguration {
        var configuration = ClientConfiguration(
            host: "127.0.0.1", port: port, tls: clientTLS, providerTokens: ProviderTokenSource(signer: signer),
            topic: Topic.liveActivity(bundleID: "com.example.fanfare"))
        configuration.connectionsPerWorker = 2
        configuration.maxConcurrentStreamsPerConnection = 200
        configuration.requestTimeout = timeout
        configuration.buffers = .small
        return configuration
    }

    func fixedPayload() throws -> LoadPayload {
        var content = LiveActivityContent(event: .update, timestamp: 1_700_000_000)
        content.contentState = try RawJSON(validating: #"{"home":1,"away":0}"#)
        return .fixed(try PushPayload(liveActivity: content))
    }
}

@Suite("fanfare load accounting", .ownThread)
struct LoadAccountingTests {
    @Test("every push of a closed-loop run is delivered and counted once")
    func closedLoopAllDelivered() throws {
        let simulator = try LoadFixture.shared.simulator(SimulatorConfiguration())
        defer { simulator.shutdown() }
        let plan = LoadPlan(
            pushes: 3000, duration: nil, rate: nil, tokens: TokenList.generate(count: 100),
            payload: try LoadFixture.shared.fixedPayload())
        let report = try LoadRunner.run(
            client: LoadFixture.shared.client(port: simulator.boundAddress.port), plan: plan)
        #expect(report.pushes == 3000)
        #expect(report.completed == 3000)
        #expect(report.delivered == 3000)
        #expect(report.counts.values.reduce(0, +) == 3000)
        #expect(report.latencyMicroseconds.totalCount == 3000)
        simulator.shutdown()
        #expect(simulator.statistics().accepted == 3000)
    }

    @Test("rejections are counted by reason, and the rows add up to the pushes sent")
    func rejectionsCountedByReason() throws {
        var configuration = SimulatorConfiguration()
        configuration.faults = [
            FaultRule(reason: .unregistered, probability: 0.05), FaultRule(reason: .tooManyRequests, probability: 0.05),
            FaultRule(reason: .internalServerError, probability: 0.02),
        ]
        let simulator = try LoadFixture.shared.simulator(configuration)
        defer { simulator.shutdown() }
        let plan = LoadPlan(
            pushes: 4000, duration: nil, rate: nil, tokens: TokenList.generate(count: 500),
            payload: try LoadFixture.shared.fixedPayload())
        let report = try LoadRunner.run(
            client: LoadFixture.shared.client(port: simulator.boundAddress.port), plan: plan)
        simulator.shutdown()
        let stats = simulator.statistics()
        #expect(report.pushes == 4000)
        #expect(report.counts.values.reduce(0, +) == 4000)
        #expect(report.delivered == stats.accepted)
        #expect(report.counts[.rejected(status: 410, reason: .unregistered)] == stats.count(of: .unregistered))
        #expect(report.counts[.rejected(status: 429, reason: .tooManyRequests)] == stats.count(of: .tooManyRequests))
        #expect(
            report.counts[.rejected(status: 500, reason: .internalServerError)] == stats.count(of: .internalServerError)
        )
        #expect(stats.count(of: .unregistered) > 0 && stats.count(of: .tooManyRequests) > 0)
        #expect(report.text().contains("410 Unregistered"))
    }

    @Test("pushes that hit their deadline are counted as such, not lost")
    func deadlinesCounted() throws {
        var configuration = SimulatorConfiguration()
        // About half the answers come after the client's 150 ms deadline.
        configuration.latency = .uniform(minNanoseconds: 50_000_000, maxNanoseconds: 250_000_000)
        let simulator = try LoadFixture.shared.simulator(configuration)
        defer { simulator.shutdown() }
        let plan = LoadPlan(
            pushes: 600, duration: nil, rate: nil, tokens: TokenList.generate(count: 50),
            payload: try LoadFixture.shared.fixedPayload())
        let report = try LoadRunner.run(
            client: LoadFixture.shared.client(port: simulator.boundAddress.port, timeout: .milliseconds(150)),
            plan: plan)
        let expired = report.counts[.deadlineExceeded] ?? 0
        #expect(report.pushes == 600)
        #expect(report.counts.values.reduce(0, +) == 600)
        #expect(expired > 0)
        #expect(report.delivered > 0)
        #expect(report.delivered + expired == 600)
    }

    @Test("an open-loop run sends at the requested rate and accounts for every push")
    func openLoopAccounting() throws {
        let simulator = try LoadFixture.shared.simulator(SimulatorConfiguration())
        defer { simulator.shutdown() }
        let plan = LoadPlan(
            pushes: 500, duration: nil, rate: 2000, tokens: TokenList.generate(count: 10),
            payload: try LoadFixture.shared.fixedPayload())
        let report = try LoadRunner.run(
            client: LoadFixture.shared.client(port: simulator.boundAddress.port), plan: plan)
        #expect(report.completed == 500)
        #expect(report.delivered == 500)
        // 500 pushes at 2000/s are due over 250 ms; the run cannot finish sooner.
        #expect(report.seconds >= 0.24)
    }

    @Test("a template payload is rendered per push and stays valid")
    func templatePayload() throws {
        let simulator = try LoadFixture.shared.simulator(SimulatorConfiguration())
        defer { simulator.shutdown() }
        let template = try PayloadTemplate(contentState: #"{"score":{{score}},"seq":{{sequence}},"at":{{timestamp}}}"#)
        let plan = LoadPlan(
            pushes: 200, duration: nil, rate: nil, tokens: TokenList.generate(count: 10), payload: .template(template))
        let report = try LoadRunner.run(
            client: LoadFixture.shared.client(port: simulator.boundAddress.port), plan: plan)
        #expect(report.delivered == 200)
        #expect(throws: PayloadTemplate.TemplateError.self) { try PayloadTemplate(contentState: #"{"x":{{nope}}}"#) }
        #expect(throws: PayloadTemplate.TemplateError.self) { try PayloadTemplate(contentState: #"{"x":{{score}}"#) }
    }

    @Test("no server: the run stops on its own and the report says why")
    func unreachableEndpoint() throws {
        let port = try Sockets.listen(on: SocketAddress.loopbackIPv4(port: 0))
        Sockets.close(port.fd)  // a port nobody listens on
        let plan = LoadPlan(
            pushes: 50, duration: nil, rate: nil, tokens: TokenList.generate(count: 5),
            payload: try LoadFixture.shared.fixedPayload())
        var configuration = LoadFixture.shared.client(port: port.boundAddress.port, timeout: .milliseconds(300))
        configuration.reconnectBackoffMinimum = .milliseconds(10)
        configuration.connectTimeout = .milliseconds(500)
        let report = try LoadRunner.run(client: configuration, plan: plan)
        #expect(report.counts.values.reduce(0, +) == report.pushes)
        #expect(report.stopReason?.contains("no connection") == true)
        #expect(report.delivered == 0)
        #expect(report.connectionError?.contains("refused") == true)
    }
}

@Suite("token lists", .ownThread)
struct TokenListTests {
    @Test func generatedTokensAreDistinctAndSized() {
        let tokens = TokenList.generate(count: 1000, byteLength: 80, seed: 7)
        #expect(Set(tokens).count == 1000)
        #expect(tokens.allSatisfy { $0.byteCount == 80 })
        #expect(TokenList.generate(count: 3, seed: 7) == Array(tokens.prefix(3)))
    }

    @Test func fileErrorsNameTheLine() throws {
        let path = NSTemporaryDirectory() + "tokens-\(UUID().uuidString).txt"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try "# comment\n\(String(repeating: "ab", count: 32))\nnot-hex\n".write(
            toFile: path, atomically: true, encoding: .utf8)
        #expect(throws: TokenList.FileError.self) { try TokenList.load(path: path) }
        do {
            _ = try TokenList.load(path: path)
        } catch {
            #expect(error.description.contains(":3:"))
        }
    }
}

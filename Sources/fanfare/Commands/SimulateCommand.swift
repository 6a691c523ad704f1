import ArgumentParser
import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTLS
import Foundation

/// `fanfare simulate`: a faithful APNs stand-in on loopback (TLS + HTTP/2 over io_uring).
struct SimulateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Run an APNs simulator: the real protocol over TLS + HTTP/2, with latency and fault injection.",
        discussion: """
            With no --cert/--key it writes a fresh localhost CA and certificate into --state-dir and prints \
            the CA path (give it to clients as --ca-file). With no --jwt-key it writes a provider key pair \
            there too and prints the flags `fanfare push` needs. Stop it with Ctrl-C (or --duration); it \
            prints a summary of every answer by status and reason.
            """
    )

    @Option(help: "Address to listen on (host:port; port 0 picks a free one).")
    var listen: String = "127.0.0.1:2197"

    @Option(help: "Server certificate chain (PEM).")
    var cert: String?

    @Option(help: "Server private key (PEM).")
    var key: String?

    @Option(help: "Public key (PEM) that provider tokens must be signed with (the .p8 also works).")
    var jwtKey: String?

    @Option(help: "Directory for generated certificates and keys.")
    var stateDir: String = ".fanfare-simulator"

    @Option(help: "The only accepted JWT team ID (iss).")
    var teamId: String = "TEAMID0001"

    @Option(help: "The only accepted JWT key ID (kid).")
    var keyId: String = "FANFARE001"

    @Option(help: "The app's bundle ID (topics are <bundle> or <bundle>.push-type.liveactivity, ...).")
    var bundleId: String = "com.example.fanfare"

    @Flag(help: "Play the development environment (adds apns-unique-id to 200s).")
    var sandbox = false

    @Option(help: "Worker threads.")
    var threads: Int = 1

    @Option(help: "Pin worker i to CPU list[i] (comma-separated).")
    var cpus: String?

    @Option(help: "SETTINGS_MAX_CONCURRENT_STREAMS after the first accepted push.")
    var maxStreams: Int = 1000

    @Option(help: "SETTINGS_MAX_CONCURRENT_STREAMS on a new connection.")
    var initialStreams: Int = 1

    @Flag(help: "Drop the stream limit to 1 after a rejected push; the next 200 restores it.")
    var dropStreamsAfterRejection = false

    @Option(help: "Response latency: 0, 20ms, uniform:10ms-30ms or longtail:MEDIAN,P99.")
    var latency: String = "0"

    @Option(help: "Inject a failure into valid pushes: Reason:probability (repeatable), e.g. TooManyRequests:0.01.")
    var fault: [String] = []

    @Option(help: "Send GOAWAY on a connection after this many requests.")
    var goawayAfter: Int?

    @Option(help: "File of known tokens (hex, one per line); others get --unknown-token-reply.")
    var knownTokens: String?

    @Option(help: "Answer for tokens outside --known-tokens: unregistered (410) or badDeviceToken (400).")
    var unknownTokenReply: String = "unregistered"

    @Option(help: "Pushes per token per second before 429 TooManyRequests (0 = no limit).")
    var perTokenRate: Int = 0

    @Flag(help: "After ExpiredProviderToken, reject everything on that connection.")
    var wedgeAfterExpiredToken = false

    @Option(help: "Write every accepted push as a JSON line to this file.")
    var log: String?

    @Option(help: "Stop after this many seconds (default: run until interrupted).")
    var duration: Double?

    @Flag(help: "Print the final summary as JSON.")
    var json = false

    @Option(help: "Seed for latency and fault draws.")
    var seed: UInt64 = 0x00FA_FA4E

    func run() throws {
        SignalWaiter.blockTerminationSignals()
        let simulator: APNsSimulator
        do {
            simulator = try start()
        } catch let error as UsageError {
            printError(error.description)
            throw ExitCode(64)
        } catch {
            printError("\(error)")
            throw ExitCode(1)
        }
        print("simulating APNs on https://\(simulator.boundAddress)")
        FileHandle.standardOutput.synchronizeFile()
        SignalWaiter.wait(seconds: duration)
        simulator.shutdown()
        let stats = simulator.statistics()
        print(json ? stats.summaryJSON() : stats.summary())
    }

    func start() throws -> APNsSimulator {
        var configuration = SimulatorConfiguration()
        configuration.bundleID = bundleId
        configuration.teamID = teamId
        configuration.keyID = keyId
        configuration.environment = sandbox ? .sandbox : .production
        configuration.maxConcurrentStreams = maxStreams
        configuration.initialMaxConcurrentStreams = initialStreams
        configuration.dropStreamsToOneAfterRejection = dropStreamsAfterRejection
        configuration.latency = try parseLatency(latency)
        configuration.faults = try fault.map { text throws in
            do { return try FaultRule(parsing: text) } catch { throw UsageError("--fault: \(error)") }
        }
        configuration.goAwayAfterStreams = goawayAfter
        configuration.perTokenRateLimit = perTokenRate
        configuration.wedgeAfterExpiredToken = wedgeAfterExpiredToken
        configuration.seed = seed
        guard let reply = SimulatorConfiguration.UnknownTokenReply(rawValue: unknownTokenReply) else {
            throw UsageError("--unknown-token-reply must be unregistered or badDeviceToken")
        }
        configuration.unknownTokenReply = reply
        if let knownTokens {
            guard let text = try? String(contentsOfFile: knownTokens, encoding: .utf8) else {
                throw UsageError("--known-tokens: cannot read '\(knownTokens)'")
            }
            configuration.knownTokens = Set(text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty })
        }
        do {
            try configuration.validate()
        } catch {
            throw UsageError("\(error)")
        }
        guard threads >= 1 && threads <= 256 else { throw UsageError("--threads must be 1...256") }

        let listenAddress = try parseListenAddress(listen)
        let tls = try makeServerTLS()
        let verifier = try makeVerifier()
        var options = APNsSimulator.Options(listen: listenAddress, tls: tls, verifier: verifier)
        options.threads = threads
        options.cpuAffinity = try cpus.map { try parseCPUList($0) }
        options.acceptedLogPath = log
        return try APNsSimulator(configuration: configuration, options: options)
    }

    private func makeServerTLS() throws -> TLSContext {
        if (cert == nil) != (key == nil) { throw UsageError("--cert and --key go together") }
        if let cert, let key {
            return try TLSContext.server(certificateFile: cert, privateKeyFile: key)
        }
        let generated = try CertificateAuthority.generateLocalhostChain(in: stateDir)
        print("generated a localhost certificate; clients trust it with --ca-file \(generated.caCertificateFile)")
        return try TLSContext.server(certificateFile: generated.certificateFile, privateKeyFile: generated.privateKeyFile)
    }

    private func makeVerifier() throws -> ES256ProviderTokenVerifier {
        if let jwtKey {
            return ES256ProviderTokenVerifier(try ProviderTokenVerifier(publicKeyPEMFile: jwtKey))
        }
        let privatePath = (stateDir as NSString).appendingPathComponent("AuthKey_\(keyId).p8")
        let publicPath = (stateDir as NSString).appendingPathComponent("AuthKey_\(keyId).pub.pem")
        if !FileManager.default.fileExists(atPath: publicPath) {
            try FileManager.default.createDirectory(atPath: stateDir, withIntermediateDirectories: true)
            try ProviderKeyGenerator.generate(privateKeyFile: privatePath, publicKeyFile: publicPath)
        }
        print("provider key: --auth-key \(privatePath) --key-id \(keyId) --team-id \(teamId) --bundle-id \(bundleId)")
        return ES256ProviderTokenVerifier(try ProviderTokenVerifier(publicKeyPEMFile: publicPath))
    }
}

/// `host:port`, `[v6]:port`; resolves names like `localhost`.
func parseListenAddress(_ text: String) throws -> SocketAddress {
    let endpoint = try Endpoint(parsing: text.contains("://") ? text : "https://" + text, allowPortZero: true)
    if let literal = try? SocketAddress(ip: endpoint.host, port: endpoint.port) { return literal }
    guard let first = try SocketResolver.resolve(host: endpoint.host, port: endpoint.port).first else {
        throw UsageError("cannot resolve '\(endpoint.host)'")
    }
    return first
}

func parseCPUList(_ text: String) throws -> [Int] {
    let cpus = text.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
    guard !cpus.isEmpty, cpus.allSatisfy({ $0 != nil && $0! >= 0 && $0! < CPUAffinity.cpuCount }) else {
        throw UsageError("--cpus '\(text)' must list CPU numbers from 0 to \(CPUAffinity.cpuCount - 1)")
    }
    return cpus.map { $0! }
}

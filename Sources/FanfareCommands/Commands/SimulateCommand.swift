import ArgumentParser
import FanfareApps
import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTLS
import Foundation

/// `fanfare simulate`: a faithful APNs stand-in on loopback (TLS + HTTP/2 over io_uring).
public struct SimulateCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Run an APNs simulator: the real protocol over TLS + HTTP/2, with latency and fault injection.",
        discussion: """
            With no --cert/--key it uses the localhost CA and certificate in --state-dir, writing them the \
            first time, and prints the CA path (give it to clients as --ca-file): a restarted simulator keeps \
            its certificate, so clients keep trusting it. With no --jwt-key it does the same with a provider \
            key pair and prints the flags `fanfare push` needs. Files found there are checked first (chain, \
            validity dates, key pairs); if they are partial, corrupt, expired or mismatched it stops with the \
            problem: --regenerate-state writes new ones. Stop it with Ctrl-C (or --duration); it prints a \
            summary of every answer by status and reason.

            Faults for load and fault tests: --fault (steady), --fault-burst (on and off), --refuse-streams, \
            --goaway-after, --drop-streams-after-rejection, --reset-connections, --hold-responses, --latency. \
            With --log, every accepted push is in the file before its 200 is sent, so it survives kill -9.

            Broadcast channels: --management-port serves APNs' channel-management API (create, read, list, \
            delete on /1/apps/<bundle>/channels and /all-channels) on its own port, as APNs does on 2195/2196; \
            broadcasts on the push port are checked against those channels. Channels are kept in \
            <state-dir>/channels across restarts (--memory-channels: in memory only); deleted ids are never \
            reused. --key-environment and --key-topics describe 2025-style provider keys.

            Several apps and both environments: --apps FILE reads the apps file `fanfare serve --apps` reads (bundle \
            ids, teams, provider keys with their environments and topics; each key verifies with the public half of \
            its .p8) and serves production and sandbox at once, on the file's endpoints (--listen and \
            --sandbox-listen override them; without them 127.0.0.1:2197 and 127.0.0.1:2198). --sandbox-listen adds \
            the sandbox to the single app too. --sandbox-token-prefix tells sandbox tokens from production ones: a \
            token sent to the other environment gets 400 BadDeviceToken, as APNs answers it. With --log, each \
            accepted push's line names its environment, app, key id and team.
            """
    )

    @Option(
        help:
            "Address to listen on (host:port; port 0 picks a free one; default 127.0.0.1:2197, or the --apps file's production endpoint)."
    )
    var listen: String?

    @Option(
        help: ArgumentHelp(
            "Serve the apps of this apps file, in production and sandbox at once (the file `fanfare serve --apps` reads).",
            valueName: "file"))
    var apps: String?

    @Option(
        help:
            "Also serve the sandbox environment on this address (host:port; 0 picks a free port; with --apps the default is the file's sandbox endpoint, else 127.0.0.1:2198)."
    )
    var sandboxListen: String?

    @Option(
        help:
            "Serve the sandbox's channel-management API on this port of the --sandbox-listen host (0 picks a free one)."
    )
    var sandboxManagementPort: Int?

    @Option(
        help: ArgumentHelp(
            "Tokens whose hex starts with HEX are sandbox tokens, the others production tokens (the other environment answers 400 BadDeviceToken).",
            valueName: "hex"))
    var sandboxTokenPrefix: String?

    @Option(help: "Server certificate chain (PEM).")
    var cert: String?

    @Option(help: "Server private key (PEM).")
    var key: String?

    @Option(help: "Public key (PEM) that provider tokens must be signed with (the .p8 also works).")
    var jwtKey: String?

    @Option(help: "Directory for generated certificates and keys (reused when valid).")
    var stateDir: String = ".fanfare-simulator"

    @Flag(help: "Write a new CA, server certificate and provider key into --state-dir even if valid ones are there.")
    var regenerateState = false

    @Option(name: .customLong("team-id"), help: "The only accepted JWT team ID (iss; default TEAMID0001).")
    var teamIdOption: String?

    @Option(name: .customLong("key-id"), help: "The only accepted JWT key ID (kid; default FANFARE001).")
    var keyIdOption: String?

    @Option(
        name: .customLong("bundle-id"),
        help:
            "The app's bundle ID (topics are <bundle> or <bundle>.push-type.liveactivity, ...; default com.example.fanfare)."
    )
    var bundleIdOption: String?

    // Optional above so that --apps can refuse them: they describe the one app the file replaces.
    var teamId: String { teamIdOption ?? "TEAMID0001" }
    var keyId: String { keyIdOption ?? "FANFARE001" }
    var bundleId: String { bundleIdOption ?? "com.example.fanfare" }

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

    @Option(
        help: ArgumentHelp(
            "A fault that switches on and off: Reason:probability:LENGTH/PERIOD (repeatable).",
            discussion:
                "During the last LENGTH of every PERIOD, both request counts or both durations: ServiceUnavailable:1:200/2000, TooManyRequests:0.5:100ms/1s."
        ))
    var faultBurst: [String] = []

    @Option(help: "Refuse this share of new streams with RST_STREAM REFUSED_STREAM (0...1).")
    var refuseStreams: Double = 0

    @Option(
        help: ArgumentHelp(
            "Reset a share of connections (TCP RST) after N requests: probability:N, e.g. 0.5:1000.",
            discussion:
                "The N-th request is decided (logged if accepted) and never answered; requests still in flight are lost."
        ))
    var resetConnections: String?

    @Option(
        help:
            "Answer a share of requests only after a delay, e.g. past a client's deadline: probability:duration, e.g. 0.001:30s."
    )
    var holdResponses: String?

    @Option(help: "Send GOAWAY on a connection after this many requests.")
    var goawayAfter: Int?

    @Option(help: "File of known tokens (hex, one per line); others get --unknown-token-reply.")
    var knownTokens: String?

    @Option(help: "Answer for tokens outside --known-tokens: unregistered (410) or badDeviceToken (400).")
    var unknownTokenReply: String = "unregistered"

    @Option(
        help:
            "Answer tokens whose hex starts with PREFIX with an APNs reason: PREFIX:Reason (repeatable), e.g. 0410:Unregistered."
    )
    var tokenReply: [String] = []

    @Option(help: "Pushes per token per second before 429 TooManyRequests (0 = no limit).")
    var perTokenRate: Int = 0

    @Flag(help: "After ExpiredProviderToken, reject everything on that connection.")
    var wedgeAfterExpiredToken = false

    @Flag(
        help:
            "Provider tokens: accept only a JSON number as iat (APNs also accepts a decimal string, as APNSwift sends)."
    )
    var strictProviderToken = false

    @Option(
        help:
            "Most requests one worker thread holds at once; more are refused (default: no limit beyond --max-streams per connection)."
    )
    var maxStreamsPerThread: Int?

    @Option(help: "Append every accepted push as a JSON line to this file (written before its 200 is sent).")
    var log: String?

    @Option(
        help:
            "Serve the channel-management API on this port of the --listen host (0 picks a free one; APNs uses 2195 sandbox, 2196 production)."
    )
    var managementPort: Int?

    @Flag(
        help: "Keep broadcast channels in memory only (lost when the simulator stops) instead of <state-dir>/channels.")
    var memoryChannels = false

    @Option(help: "Channels one app may have (more → 400 CannotCreateChannelConfig).")
    var maxChannels: Int = 10_000

    @Option(help: "The reason a broadcast with aps.event \"start\" gets (a 400 reason), or 'accept'.")
    var broadcastStartReason: String = APNsReason.badRequestPayload.rawValue

    @Option(
        help:
            "A provider key restricted to one environment: KEYID=production|sandbox (repeatable; the key is accepted besides --key-id and must verify with the same public key)."
    )
    var keyEnvironment: [String] = []

    @Option(
        help:
            "A topic-specific provider key: KEYID=bundle1,bundle2 (repeatable; other apps' requests → 403 UnrelatedKeyIdInToken)."
    )
    var keyTopics: [String] = []

    @Option(help: "Reason for a key of the other environment: BadEnvironmentKeyIdInToken or BadEnvironmentKeyInToken.")
    var environmentKeyReason: String = APNsReason.badEnvironmentKeyIdInToken.rawValue

    @Option(help: "Stop after this many seconds (default: run until interrupted).")
    var duration: Double?

    @Flag(help: "Print the final summary as JSON.")
    var json = false

    @Option(help: "Seed for latency and fault draws.")
    var seed: UInt64 = 0x00FA_FA4E

    public init() {}

    public func run() throws {
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
        printWhereItListens(simulator)
        print(
            memoryChannels
                ? "broadcast channels: in memory only (lost when the simulator stops)"
                : "broadcast channels: kept in \(channelFile) (\(simulator.channels.count) found)")
        FileHandle.standardOutput.synchronizeFile()
        SignalWaiter.wait(seconds: duration)
        simulator.shutdown()
        let stats = simulator.statistics()
        print(json ? stats.summaryJSON() : stats.summary())
    }

    public func start() throws -> APNsSimulator {
        // With --apps the certificate comes first: the file's ca_file may name the CA it writes into --state-dir.
        let appsTLS = apps == nil ? nil : try makeServerTLS()
        let catalog = try loadApps()
        let configuration = try simulatorConfiguration(catalog)
        let options = try simulatorOptions(catalog, tls: appsTLS)
        do {
            return try APNsSimulator(configuration: configuration, options: options)
        } catch let error as ChannelStateFileError {
            throw UsageError("\(error)")
        }
    }

    /// The simulated APNs's behaviour from the options (and the apps file's apps), validated (a bad one is a usage
    /// error).
    private func simulatorConfiguration(_ catalog: AppCatalog?) throws -> SimulatorConfiguration {
        var configuration = SimulatorConfiguration()
        configuration.bundleID = bundleId
        configuration.teamID = teamId
        configuration.keyID = keyId
        if let catalog { configuration.apps = SimulatedApp.apps(of: catalog) }
        configuration.sandboxTokenPrefix = sandboxTokenPrefix
        configuration.environment = sandbox ? .sandbox : .production
        configuration.maxConcurrentStreams = maxStreams
        configuration.initialMaxConcurrentStreams = initialStreams
        configuration.dropStreamsToOneAfterRejection = dropStreamsAfterRejection
        try applyFaults(to: &configuration)
        configuration.perTokenRateLimit = perTokenRate
        configuration.wedgeAfterExpiredToken = wedgeAfterExpiredToken
        configuration.strictProviderToken = strictProviderToken
        configuration.seed = seed
        guard maxChannels >= 0 else { throw UsageError("--max-channels must not be negative") }
        configuration.maxChannelsPerApp = maxChannels
        try applyReplies(to: &configuration)
        if let knownTokens { configuration.knownTokens = try Self.readKnownTokens(knownTokens) }
        do {
            try configuration.validate()
        } catch {
            throw UsageError("\(error)")
        }
        return configuration
    }

    /// Latency, injected faults and the connection-level misbehaviour (refused streams, resets, held responses,
    /// GOAWAY).
    private func applyFaults(to configuration: inout SimulatorConfiguration) throws {
        configuration.latency = try parseLatency(latency)
        configuration.faults = try fault.map { text throws in
            do { return try FaultRule(parsing: text) } catch { throw UsageError("--fault: \(error)") }
        }
        configuration.faultBursts = try faultBurst.map { text throws in
            do { return try FaultBurst(parsing: text) } catch { throw UsageError("--fault-burst: \(error)") }
        }
        guard refuseStreams >= 0 && refuseStreams <= 1 else { throw UsageError("--refuse-streams must be in 0...1") }
        configuration.refusedStreamProbability = refuseStreams
        if let resetConnections {
            do { configuration.connectionReset = try ConnectionResetRule(parsing: resetConnections) } catch {
                throw UsageError("--reset-connections: \(error)")
            }
        }
        if let holdResponses {
            do { configuration.heldResponses = try HeldResponseRule(parsing: holdResponses) } catch {
                throw UsageError("--hold-responses: \(error)")
            }
        }
        if let goawayAfter, goawayAfter < 1 { throw UsageError("--goaway-after must be at least 1") }
        configuration.goAwayAfterStreams = goawayAfter
    }

    /// The answers chosen for some requests: broadcast start events, the environment's key, provider keys'
    /// scopes, unknown tokens and token prefixes.
    private func applyReplies(to configuration: inout SimulatorConfiguration) throws {
        if broadcastStartReason == "accept" {
            configuration.broadcastStartEventReason = nil
        } else {
            guard let reason = APNsReason(rawValue: broadcastStartReason), reason.status == 400 else {
                throw UsageError(
                    "--broadcast-start-reason '\(broadcastStartReason)' is not a 400 APNs reason (e.g. BadRequestPayload) or 'accept'"
                )
            }
            configuration.broadcastStartEventReason = reason
        }
        guard let environmentReason = APNsReason(rawValue: environmentKeyReason),
            environmentReason == .badEnvironmentKeyIdInToken || environmentReason == .badEnvironmentKeyInToken
        else {
            throw UsageError("--environment-key-reason must be BadEnvironmentKeyIdInToken or BadEnvironmentKeyInToken")
        }
        configuration.environmentKeyReason = environmentReason
        configuration.providerKeys = try parseProviderKeys(environments: keyEnvironment, topics: keyTopics)
        guard let reply = SimulatorConfiguration.UnknownTokenReply(rawValue: unknownTokenReply) else {
            throw UsageError("--unknown-token-reply must be unregistered or badDeviceToken")
        }
        configuration.unknownTokenReply = reply
        configuration.tokenPrefixReplies = try tokenReply.map { text throws in
            let parts = text.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, let reason = APNsReason(rawValue: String(parts[1])),
                let rule = TokenPrefixReply(prefix: String(parts[0]), reason: reason)
            else {
                throw UsageError(
                    "--token-reply '\(text)' is not PREFIX:Reason with a hex prefix and an APNs reason, e.g. 0410:Unregistered"
                )
            }
            return rule
        }
    }

    /// `--known-tokens`: one hex token per line, any case.
    private static func readKnownTokens(_ path: String) throws -> Set<String> {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw UsageError("--known-tokens: cannot read '\(path)'")
        }
        return Set(
            text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
                .filter { !$0.isEmpty })
    }

    /// Where and how the simulator serves: its addresses, TLS and provider-token keys (made in `--state-dir`
    /// unless given or the apps file's), threads and where channels are kept.
    private func simulatorOptions(_ catalog: AppCatalog?, tls: TLSContext?) throws -> APNsSimulator.Options {
        guard threads >= 1 && threads <= 256 else { throw UsageError("--threads must be 1...256") }
        let addresses = try listenAddresses(catalog)
        let tls = try tls ?? makeServerTLS()
        // The apps' keys each verify with their own public key (the simulator builds those verifiers).
        let verifier = catalog == nil ? try makeVerifier() : nil
        var options = APNsSimulator.Options(listen: addresses.push, tls: tls, verifier: verifier)
        options.sandboxListen = addresses.sandbox
        options.managementListen = addresses.management
        options.sandboxManagementListen = addresses.sandboxManagement
        options.threads = threads
        options.cpuAffinity = try cpus.map { try parseCPUList($0) }
        options.acceptedLogPath = log
        if let maxStreamsPerThread {
            guard maxStreamsPerThread >= 1 else { throw UsageError("--max-streams-per-thread must be at least 1") }
            options.maxStreamsPerWorker = maxStreamsPerThread
        }
        if !memoryChannels {
            do {
                try FileManager.default.createDirectory(
                    atPath: stateDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw UsageError(
                    "--state-dir '\(stateDir)': cannot create it for the channels: \(error.localizedDescription)")
            }
            options.channelStateFile = channelFile
        }
        return options
    }

    private var channelFile: String { stateDir + "/channels" }

    /// `--key-environment KEYID=production|sandbox` and `--key-topics KEYID=bundle1,bundle2`, merged by key.
    private func parseProviderKeys(environments: [String], topics: [String]) throws -> [String: ProviderKeyScope] {
        var keys: [String: ProviderKeyScope] = [:]
        func split(_ text: String, _ flag: String) throws -> (String, String) {
            let parts = text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw UsageError("\(flag) '\(text)' is not KEYID=VALUE")
            }
            return (String(parts[0]), String(parts[1]))
        }
        for text in environments {
            let (keyID, value) = try split(text, "--key-environment")
            guard let environment = SimulatorConfiguration.Environment(rawValue: value) else {
                throw UsageError("--key-environment '\(text)': the environment must be production or sandbox")
            }
            keys[keyID, default: ProviderKeyScope()].environment = environment
        }
        for text in topics {
            let (keyID, value) = try split(text, "--key-topics")
            let list = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter {
                !$0.isEmpty
            }
            guard !list.isEmpty else { throw UsageError("--key-topics '\(text)': list at least one bundle ID") }
            keys[keyID, default: ProviderKeyScope()].topics = Set(list)
        }
        return keys
    }

    private var state: SimulatorStateDirectory { SimulatorStateDirectory(path: stateDir) }

    /// A state-dir problem, with the way out.
    private func stateError(_ error: SimulatorStateError) -> UsageError {
        switch error {
        case .unusable:
            UsageError(
                "\(error)\n--regenerate-state writes new files (clients then need the new ca.pem / .p8), or pass --cert/--key and --jwt-key"
            )
        case .cannotGenerate, .badKeyID:
            UsageError("\(error)")
        }
    }

    private func makeServerTLS() throws -> TLSContext {
        if (cert == nil) != (key == nil) { throw UsageError("--cert and --key go together") }
        if let cert, let key {
            return try TLSContext.server(certificateFile: cert, privateKeyFile: key)
        }
        let files: GeneratedCertificates
        do {
            let (prepared, origin) = try state.prepareCertificates(regenerate: regenerateState)
            files = prepared
            print(
                origin == .generated
                    ? "generated a localhost certificate; clients trust it with --ca-file \(files.caCertificateFile)"
                    : "reusing the localhost certificate in \(stateDir); clients trust it with --ca-file \(files.caCertificateFile)"
            )
        } catch {
            throw stateError(error)
        }
        return try TLSContext.server(certificateFile: files.certificateFile, privateKeyFile: files.privateKeyFile)
    }

    private func makeVerifier() throws -> ES256ProviderTokenVerifier {
        if let jwtKey {
            return ES256ProviderTokenVerifier(try ProviderTokenVerifier(publicKeyPEMFile: jwtKey))
        }
        do {
            _ = try state.prepareProviderKey(keyID: keyId, regenerate: regenerateState)
        } catch {
            throw stateError(error)
        }
        print(
            "provider key: --auth-key \(state.providerPrivateKeyFile(keyID: keyId)) --key-id \(keyId) --team-id \(teamId) --bundle-id \(bundleId)"
        )
        return ES256ProviderTokenVerifier(
            try ProviderTokenVerifier(publicKeyPEMFile: state.providerPublicKeyFile(keyID: keyId)))
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

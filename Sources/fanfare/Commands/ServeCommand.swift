import ArgumentParser
import FanfareClient
import FanfareCluster
import FanfareCommands
import FanfareCore
import FanfareFanout
import FanfarePostgres
import FanfareService
import FanfareSimulator
import FanfareTLS
import Foundation
import Logging

/// `fanfare serve`: the fan-out engine on its SQLite registry behind the HTTP/JSON API (docs/service.md).
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract:
            "Run the fan-out engine as a service behind an HTTP/JSON API (OpenAPI document at GET /openapi.yaml).",
        discussion: """
            `--simulator` starts the built-in APNs simulator in the same process (10-30 ms latency; tokens \
            starting with 0410 answer 410 Unregistered, 0400 answer 400 BadDeviceToken) and needs nothing else. \
            Otherwise give the APNs flags of `fanfare push`. Without --api-keys the service only listens on \
            loopback and answers only requests whose Host is localhost, 127.x.x.x or [::1] (421 otherwise: a web \
            page that rebinds its DNS name to 127.0.0.1 gets nothing). A write's body must be sent as \
            Content-Type: application/json (415 otherwise, also without the header), so a web page cannot post to \
            the service with a form or a "simple" fetch. --tls-cert and --tls-key serve the API over HTTPS. Waves \
            are durable: saved in --database before the 202, their progress checkpointed while they run, so \
            after a crash or a restart unfinished waves resume (a crash resends at most --checkpoint-window \
            pushes per worker and wave). SIGTERM or SIGINT: writes get 503 with Retry-After, \
            in-flight pushes are answered and unfinished waves checkpointed (up to --shutdown-timeout; they resume \
            at the next start with no duplicate), then the process exits 0; a second signal stops waiting. Secrets \
            come from files or the environment, never only from a flag's value: --auth-key FILE or \
            $FANFARE_AUTH_KEY (the .p8's PEM text), --api-keys FILE or $FANFARE_API_KEYS (the key file's text), \
            --tls-key FILE, and the database's password from PGPASSWORD, ~/.pgpass or $FANFARE_DATABASE (the whole \
            --database value, URL and password, out of ps). The SQLite registry is created 0600, the simulator's \
            directories 0700; --simulator works in a new private temporary directory, removed at exit. A failure \
            of the service (500, 503 database_unavailable) answers in general words with a request_id; the cause \
            is in the log line with that id. On PostgreSQL the node is one of a cluster sharing the database \
            (docs/deployment.md): it leases a fair share of --shards shards and sends only those; a node that \
            lost a lease exits 75 so that its supervisor restarts it fresh. Exit codes: 0 after a shutdown, 64 \
            bad flags or files, 1 the service could not start, 75 a shard lease was lost.
            """
    )

    @Option(
        help: """
            The registry: a SQLite file (created if missing), or a PostgreSQL database as \
            postgres://user@host[:port]/db[?sslmode=verify-full&sslrootcert=ca.pem] (tables created or migrated at \
            start; the server must be reachable). sslmode: disable, prefer (default), require, verify-ca, \
            verify-full. The password from PGPASSWORD or ~/.pgpass (PGPASSFILE), or in the URL (visible in ps: \
            give the URL in $FANFARE_DATABASE instead). Default: $FANFARE_DATABASE, else fanfare.db. See \
            docs/deployment.md.
            """)
    var database: String?

    @Option(
        help: "PostgreSQL: this node's name in the cluster, unique among the nodes (default: host name and process id)."
    )
    var nodeId: String?

    @Option(
        help:
            "PostgreSQL: the cluster's shard count (the same on every node, fixed by the first; more than nodes). Each is a worker thread here."
    )
    var shards = 8

    @Option(
        help:
            "PostgreSQL: how long a shard lease lasts without renewal, about how long a dead node's shards wait for another node (e.g. 6s)."
    )
    var lease = "6s"

    @Option(
        help:
            "PostgreSQL: how long a starting node waits for the nodes started with it before taking its share of the shards (default: one lease)."
    )
    var join: String?

    @Option(help: "Address to serve HTTP on (host:port; port 0 picks a free one). Beyond loopback needs --api-keys.")
    var listen = "127.0.0.1:8080"

    @Option(help: "Serve the API over HTTPS with this PEM certificate (chain); needs --tls-key.")
    var tlsCert: String?

    @Option(help: "The PEM private key of --tls-cert (unencrypted; keep the file 0600).")
    var tlsKey: String?

    @OptionGroup var connection: ConnectionOptions

    @OptionGroup var checkpoints: CheckpointOptions

    @Option(help: "Engine worker threads (shards), each with its own io_uring ring and APNs connections.")
    var workers = 1

    @OptionGroup var connectionCount: ConnectionCountOptions

    @Option(help: "Streams in flight per APNs connection (APNs allows about 1000).")
    var streams = 1000

    @Option(
        help: """
            The apps to send for, from a JSON file (docs/service.md, "Apps"): each with its bundle id, team id, provider \
            keys (a .p8 file or an environment variable holding it; the environments and topics each may sign for) \
            and, if not Apple's, its endpoints. Replaces --bundle-id, --endpoint, --sandbox, --ca-file and the \
            authentication flags. SIGHUP or POST /v1/apps/reload reads it again.
            """)
    var apps: String?

    @Flag(help: "Run the built-in APNs simulator in this process and send to it (nothing else to configure).")
    var simulator = false

    @Option(help: "With --simulator: its latency (e.g. 0, 20ms, uniform:10ms-30ms).")
    var simulatorLatency = "uniform:10ms-30ms"

    @Option(help: "With --simulator: append every push it accepts to this file, one JSON line each.")
    var simulatorLog: String?

    @Option(
        help:
            "APNs' broadcast channel management API as HOST:PORT, for PUT /v1/channels/{channel}/broadcast without a channel_id and for deleting the channels the service created (default: APNs' management host and port of the environment when sending to Apple; with --endpoint, the simulator's management port must be given; --simulator serves its own)."
    )
    var channelManagement: String?

    @Option(
        help:
            "API keys: one key per line with its scopes (register,publish,read,admin). Or the file's text in $FANFARE_API_KEYS."
    )
    var apiKeys: String?

    @Option(
        help:
            "After SIGTERM/SIGINT, how long answering in-flight pushes and checkpointing waves may take before the service stops anyway (e.g. 30s)."
    )
    var shutdownTimeout = "30s"

    @Option(
        help: "How many days the token ledger keeps the history of registrations that ended (GET /v1/tokens/{token}).")
    var ledgerRetentionDays = 30

    @Option(
        help:
            "PostgreSQL: how long one database call may take before it fails (the API answers 503 database_unavailable) and its connection is replaced (e.g. 60s, 15s)."
    )
    var databaseTimeout = "60s"

    @Option(help: "Largest request body (bytes, or with KiB / MiB).")
    var maxBody = "8MiB"

    @Option(help: "API (HTTP) connections open at once; past it new ones wait to be accepted.")
    var maxApiConnections = 4096

    @Option(help: "Wave event streams (/v1/waves/{id}/events) open at once; past it a new one is refused with 503.")
    var maxEventStreams = 1024

    @Option(help: "Log lines as text or json (one JSON object per line).")
    var logFormat = "text"

    @Option(help: "Least severe log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel = "info"

    static let apiKeysVariable = "FANFARE_API_KEYS"
    /// `--database`'s value when the flag is not given: a PostgreSQL URL with its password stays out of ps.
    static let databaseVariable = "FANFARE_DATABASE"
    static let simulatorBundleID = "com.example.fanfare"

    func run() async throws {
        // Logging first, so a configuration problem is a log line in the chosen format.
        let format = LogFormat(rawValue: logFormat)
        let level = Logger.Level(rawValue: logLevel)
        LoggingSystem.bootstrap { label in
            LineLogHandler(label: label, format: format ?? .text, level: level ?? .info)
        }
        let logger = Logger(label: "fanfare.serve")
        guard format != nil else { throw Self.refuse("--log-format '\(logFormat)' must be text or json", logger) }
        guard level != nil else {
            throw Self.refuse(
                "--log-level '\(logLevel)' must be trace, debug, info, notice, warning, error or critical", logger)
        }

        var inProcess: APNsSimulator?
        var scratch: PrivateDirectory?
        defer {
            inProcess?.shutdown()
            scratch?.remove()
        }
        let configuration: ServiceConfiguration
        do {
            configuration = try serviceConfiguration(logger: logger, simulator: &inProcess, scratch: &scratch)
        } catch let error as UsageError {
            throw Self.refuse(error.description, logger)
        } catch let error as APIKeyFileError {
            throw Self.refuse(error.description, logger)
        } catch let error as ServiceTLSError {
            throw Self.refuse(error.description, logger)
        } catch {
            throw Self.refuse("\(error)", logger)
        }

        let server: FanfareServer
        do {
            server = try FanfareServer(configuration: configuration)
        } catch {
            logger.error("cannot start: \(error)")
            throw ExitCode(1)
        }
        try await serve(server, configuration: configuration, logger: logger)
    }

    private static func refuse(_ message: String, _ logger: Logger) -> ExitCode {
        logger.error("configuration problem: \(message)")
        return ExitCode(64)
    }

    /// The service's configuration from the flags. With `--simulator`, starts the built-in simulator first (into
    /// `simulator`, which the caller shuts down, also when a later flag is refused) in a new private directory
    /// (into `scratch`, which the caller removes).
    private func serviceConfiguration(
        logger: Logger, simulator inProcess: inout APNsSimulator?, scratch: inout PrivateDirectory?
    ) throws -> ServiceConfiguration {
        let (host, port) = try Self.parseListen(listen)
        if let apps {
            var endpoints: ServeApps.Endpoints?
            if simulator {
                let state = try PrivateDirectory(prefix: "fanfare-serve-")
                scratch = state
                let started = try startAppsSimulator(file: apps, state: state.path)
                inProcess = started
                endpoints = ServeApps.Endpoints(
                    simulator: started, caFile: (state.path as NSString).appendingPathComponent("ca.pem"))
                logger.info(
                    "built-in APNs simulator started for the apps file",
                    metadata: [
                        "production": "https://127.0.0.1:\(started.boundAddress.port)",
                        "sandbox": "https://127.0.0.1:\(started.sandboxAddress?.port ?? 0)",
                        "sandbox_tokens": "\(Self.simulatorSandboxPrefix)…", "latency": "\(simulatorLatency)",
                    ])
            }
            return try appsConfiguration(file: apps, endpoints: endpoints, host: host, port: port, logger: logger)
        }
        let client: ClientConfiguration
        let bundleID: String
        let management: Endpoint?
        if simulator {
            if channelManagement != nil {
                throw UsageError("--simulator serves its own channel management: drop --channel-management")
            }
            let state = try PrivateDirectory(prefix: "fanfare-serve-")
            scratch = state
            let started = try startSimulator(state: state.path)
            inProcess = started
            bundleID = Self.simulatorBundleID
            client = try simulatorClient(state: state.path, port: started.boundAddress.port)
            management = started.managementAddress.map { Endpoint(host: "127.0.0.1", port: $0.port) }
            logger.info(
                "built-in APNs simulator started",
                metadata: [
                    "endpoint": "https://127.0.0.1:\(started.boundAddress.port)", "latency": "\(simulatorLatency)",
                ])
        } else {
            management = try managementEndpoint()
            client = try connection.makeClientConfiguration()
            bundleID = connection.bundleId ?? ""
        }
        let fanout = try fanoutConfiguration(client: client, bundleID: bundleID, management: management)
        return try finish(
            ServiceConfiguration(
                host: host, port: port, databasePath: try databaseValue(logger: logger), fanout: fanout), logger)
    }

    /// `--apps FILE`: the apps and their environments from the file; the engine template from the other flags.
    private func appsConfiguration(
        file: String, endpoints: ServeApps.Endpoints?, host: String, port: Int, logger: Logger
    ) throws -> ServiceConfiguration {
        if connection.namesAPNs || connection.bundleId != nil || channelManagement != nil {
            throw UsageError(
                "--apps names each app's bundle id, keys and endpoints: drop --bundle-id, --endpoint, --sandbox, "
                    + "--ca-file, --auth-key, --key-id, --team-id and --channel-management")
        }
        guard connection.timeout > 0 && connection.timeout <= 3600 else {
            throw UsageError("--timeout must be between 0 and 3600 seconds")
        }
        // The serve flags on a client, taken as the template every app's clients get.
        var probe = ClientConfiguration(
            host: "template", port: 443, tls: try TLSContext.client(), providerTokens: nil, topic: "template")
        probe.requestTimeout = .milliseconds(Int64(connection.timeout * 1000))
        probe.addressFamilies = try connection.resolvedAddressFamilies()
        probe.proxy = try connection.resolvedProxy()
        try applyDataPlane(to: &probe)
        let template = ServeApps.Template.from(probe)
        let apps = try ServeApps.load(path: file, template: template, endpoints: endpoints)
        guard let first = apps.first(where: \.isDefault) ?? apps.first, let environment = first.environments.first
        else { throw UsageError("--apps \(file): no app sends in any environment") }
        var fanout = FanoutConfiguration(
            client: environment.client, bundleID: first.bundleID, environment: environment.environment)
        fanout.checkpoints = try checkpoints.configuration()
        var service = ServiceConfiguration(
            host: host, port: port, databasePath: try databaseValue(logger: logger), fanout: fanout)
        service.apps = apps
        service.reloadApps = { try ServeApps.load(path: file, template: template, endpoints: endpoints) }
        logger.info(
            "apps",
            metadata: [
                "file": "\(file)", "apps": "\(apps.map { "\($0.id) (\($0.bundleID))" }.joined(separator: ", "))",
            ])
        return try finish(service, logger)
    }

    /// The flags every configuration shares: API keys, limits, timeouts, the cluster.
    private func finish(_ configuration: ServiceConfiguration, _ logger: Logger) throws -> ServiceConfiguration {
        var service = configuration
        service.apiKeys = try loadAPIKeys()
        service.tls = try loadTLS()
        service.maxBodyBytes = try Self.parseSize(maxBody, flag: "--max-body")
        service.maxAPIConnections = maxApiConnections
        service.maxEventStreams = maxEventStreams
        service.shutdownTimeout = .nanoseconds(try parseDuration(shutdownTimeout, flag: "--shutdown-timeout"))
        service.databaseTimeout = .nanoseconds(try parseDuration(databaseTimeout, flag: "--database-timeout"))
        service.ledgerRetention = .seconds(
            Int64(clamping: ledgerRetentionDays).multipliedReportingOverflow(by: 86_400).partialValue)
        service.logger = logger
        if case .postgres = service.database { try joinCluster(&service, logger: logger) }
        if let problem = service.problem() { throw UsageError(problem) }
        return service
    }

    /// The engine's configuration: the push client's workers and connections, checkpoints, and channel
    /// management at `management` (none: broadcast channels cannot be created or deleted).
    private func fanoutConfiguration(
        client: ClientConfiguration, bundleID: String, management: Endpoint?
    ) throws -> FanoutConfiguration {
        var client = client
        try applyDataPlane(to: &client)
        var fanout = FanoutConfiguration(
            client: client, bundleID: bundleID, environment: connection.sandbox ? .sandbox : .production)
        fanout.checkpoints = try checkpoints.configuration()
        if let management {
            // The push connection's trust store, provider key, timeout and proxy.
            var channels = ChannelManagementConfiguration(
                host: management.host, port: management.port, tls: client.tls,
                providerTokens: client.providerTokens,
                bundleID: bundleID)
            channels.requestTimeout = client.requestTimeout
            channels.addressFamilies = client.addressFamilies
            channels.proxy = client.proxy
            fanout.channelManagement = channels
        }
        return fanout
    }

    /// `--workers`, the connection counts and `--streams` on a client.
    private func applyDataPlane(to client: inout ClientConfiguration) throws {
        guard (1...256).contains(workers) else { throw UsageError("--workers must be in 1...256") }
        guard (1...100_000).contains(streams) else { throw UsageError("--streams must be in 1...100000") }
        client.workerCount = workers
        try connectionCount.apply(to: &client, streams: streams)
        client.maxConcurrentStreamsPerConnection = streams
    }

    /// On PostgreSQL the node is one of a cluster: its shard count, leases, and what losing a lease does.
    private func joinCluster(_ service: inout ServiceConfiguration, logger: Logger) throws {
        guard (1...256).contains(shards) else { throw UsageError("--shards must be in 1...256") }
        var cluster = ClusterConfiguration(nodeID: nodeId ?? ClusterConfiguration.defaultNodeID(), shardCount: shards)
        cluster.leaseDuration = .nanoseconds(try parseDuration(lease, flag: "--lease"))
        if let join { cluster.joinWindow = .nanoseconds(try parseDuration(join, flag: "--join")) }
        do { try cluster.validate() } catch { throw UsageError("\(error)") }
        service.cluster = cluster
        let leaseLogger = logger
        service.onLeaseLost = { shards in
            // Its state for those shards is stale: a fresh process loads them again if it gets them back.
            leaseLogger.critical(
                "lost the leases of shards \(shards) to another node: exiting (75) for a fresh restart")
            // At once, without exit handlers: OpenSSL's would tear down under the running workers. Everything
            // durable is already in the database; the other nodes resume from it.
            _exit(75)
        }
    }

    /// Serves until the server stops (after a termination signal, or when it cannot serve).
    private func serve(_ server: FanfareServer, configuration: ServiceConfiguration, logger: Logger) async throws {
        // Signals arrive blocked in every thread (FanfareMain); one thread of our own takes them.
        let signals = Thread {
            while true {
                switch SignalWaiter.waitForServiceSignal() {
                case .terminate: server.shutdown()
                case .reload: Self.reload(server, logger: logger)
                }
            }
        }
        signals.start()
        let serving = Task { try await server.run() }
        if let port = await server.listeningPort() {
            let url = configuration.url(port: port)
            logger.notice(
                "serving",
                metadata: [
                    "url": "\(url)", "database": "\(configuration.databaseDescription)",
                    "api_keys": "\(configuration.apiKeys?.count ?? 0)",
                    "apns": "\(simulator ? "built-in simulator" : configuration.fanout.client.host)",
                    "proxy": "\(configuration.fanout.client.proxy?.description ?? "none")",
                ])
            print("fanfare serve: listening on \(url)")
        }
        do {
            try await serving.value
        } catch {
            logger.error("cannot serve HTTP on \(listen): \(error)")
            throw ExitCode(1)
        }
    }

    /// SIGHUP: the apps file read again; what changed (or why nothing did) is logged.
    private static func reload(_ server: FanfareServer, logger: Logger) {
        switch server.reloadApps() {
        case .success(let changes):
            logger.notice(
                "apps reloaded (SIGHUP)",
                metadata: ["changes": "\(changes.isEmpty ? "none" : changes.joined(separator: "; "))"])
        case .failure(let error):
            logger.error("apps not reloaded (SIGHUP): \(error); the apps as they were go on")
        }
    }

    /// `--channel-management HOST:PORT`; without it APNs' management host and port when the pushes go to Apple,
    /// none when `--endpoint` names another server (a simulator's management port is its own flag).
    private func managementEndpoint() throws(UsageError) -> Endpoint? {
        if let channelManagement {
            do {
                return try Endpoint(parsing: channelManagement)
            } catch {
                throw UsageError(
                    "--channel-management '\(channelManagement)' is not HOST:PORT (e.g. api-manage-broadcast.push.apple.com:2196, 127.0.0.1:2197)"
                )
            }
        }
        guard connection.endpoint == nil else { return nil }
        let environment: APNsEndpoint = connection.sandbox ? .sandbox : .production
        return Endpoint(host: environment.channelManagementHost, port: UInt16(environment.channelManagementPort))
    }

    /// `host:port`, `[v6]:port`.
    static func parseListen(_ text: String) throws(UsageError) -> (host: String, port: Int) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port)
        else { throw UsageError("--listen '\(text)' is not host:port (e.g. 127.0.0.1:8080, [::1]:8080, 0.0.0.0:8080)") }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw UsageError("--listen '\(text)' has no host (e.g. 127.0.0.1:8080)") }
        return (host, port)
    }

    /// `8388608`, `512KiB`, `8MiB`.
    static func parseSize(_ text: String, flag: String) throws(UsageError) -> Int {
        for (suffix, scale) in [("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("", 1)]
        where text.hasSuffix(suffix) {
            if let value = Int(text.dropLast(suffix.count)), value >= 0, value <= (1 << 40) / scale {
                return value * scale
            }
        }
        throw UsageError("\(flag) '\(text)' is not a size like 8MiB, 512KiB or 1048576")
    }

    /// `--database`, else `$FANFARE_DATABASE`, else `fanfare.db`. A password in the flag's URL is visible to
    /// every local user (ps, /proc): it works, with a warning that says where else it can come from.
    private func databaseValue(logger: Logger) throws(UsageError) -> String {
        if let database {
            if PostgresTokenStore.redacted(database) != database {
                let elsewhere = "give it in PGPASSWORD or ~/.pgpass, or the whole URL in $\(Self.databaseVariable)"
                logger.warning("the --database URL carries a password, which any local user can see: \(elsewhere)")
            }
            return database
        }
        if let value = ProcessInfo.processInfo.environment[Self.databaseVariable] {
            guard !value.isEmpty else { throw UsageError("$\(Self.databaseVariable) is set but empty") }
            return value
        }
        return "fanfare.db"
    }

    /// `--tls-cert FILE --tls-key FILE`, both or neither.
    private func loadTLS() throws -> ServiceTLS? {
        switch (tlsCert, tlsKey) {
        case (nil, nil): return nil
        case (let certificate?, let key?): return try ServiceTLS(certificateFile: certificate, privateKeyFile: key)
        default: throw UsageError("--tls-cert and --tls-key go together: give both (or neither, for plain HTTP)")
        }
    }

    /// `--api-keys FILE`, else `$FANFARE_API_KEYS`, else none.
    private func loadAPIKeys() throws -> APIKeyring? {
        if let apiKeys { return try APIKeyring(contentsOfFile: apiKeys) }
        if let text = ProcessInfo.processInfo.environment[Self.apiKeysVariable], !text.isEmpty {
            return try APIKeyring(parsing: text, path: "$\(Self.apiKeysVariable)")
        }
        return nil
    }

    /// The simulator with a fresh CA, certificate and provider key in `state`, on a free loopback port.
    private func startSimulator(state: String) throws -> APNsSimulator {
        if connection.namesAPNs {
            throw UsageError(
                "--simulator runs its own APNs: drop --endpoint, --sandbox, --ca-file and the authentication flags")
        }
        var arguments = [
            "--listen", "127.0.0.1:0", "--state-dir", state, "--latency", simulatorLatency, "--bundle-id",
            Self.simulatorBundleID,
            "--threads", "1", "--token-reply", "0410:Unregistered", "--token-reply", "0400:BadDeviceToken",
            "--management-port", "0",
        ]
        if let simulatorLog { arguments += ["--log", simulatorLog] }
        let command: SimulateCommand
        do { command = try SimulateCommand.parse(arguments) } catch {
            throw UsageError(SimulateCommand.message(for: error))
        }
        return try command.start()
    }

    /// `--simulator --apps FILE`: the simulator knows the file's apps and keys and serves both environments on
    /// free loopback ports; tokens starting with `simulatorSandboxPrefix` are its sandbox tokens.
    private func startAppsSimulator(file: String, state: String) throws -> APNsSimulator {
        var arguments = [
            "--apps", file, "--listen", "127.0.0.1:0", "--sandbox-listen", "127.0.0.1:0", "--management-port", "0",
            "--sandbox-management-port", "0", "--state-dir", state, "--latency", simulatorLatency, "--threads", "1",
            "--token-reply", "0410:Unregistered", "--token-reply", "0400:BadDeviceToken",
            "--sandbox-token-prefix", Self.simulatorSandboxPrefix,
        ]
        if let simulatorLog { arguments += ["--log", simulatorLog] }
        let command: SimulateCommand
        do { command = try SimulateCommand.parse(arguments) } catch {
            throw UsageError(SimulateCommand.message(for: error))
        }
        return try command.start()
    }

    /// With `--simulator --apps`: the built-in simulator's sandbox tokens start with these hex digits (APNs knows
    /// which tokens are sandbox ones; the simulator is told).
    static let simulatorSandboxPrefix = "5a"

    private func simulatorClient(state: String, port: UInt16) throws -> ClientConfiguration {
        let keyPath = (state as NSString).appendingPathComponent("AuthKey_FANFARE001.p8")
        let caPath = (state as NSString).appendingPathComponent("ca.pem")
        let signer = try ProviderTokenSigner(privateKeyPEMFile: keyPath, keyID: "FANFARE001", teamID: "TEAMID0001")
        // --timeout holds for the built-in simulator too (its latency can be set past the default 30 s).
        guard connection.timeout > 0 && connection.timeout <= 3600 else {
            throw UsageError("--timeout must be between 0 and 3600 seconds")
        }
        var configuration = ClientConfiguration(
            host: "127.0.0.1", port: port, tls: try TLSContext.client(caFile: caPath),
            providerTokens: ProviderTokenSource(signer: signer),
            topic: Topic.liveActivity(bundleID: Self.simulatorBundleID))
        configuration.requestTimeout = .milliseconds(Int64(connection.timeout * 1000))
        // --proxy holds for the built-in simulator too: a way to try a proxy on one machine.
        configuration.proxy = try connection.resolvedProxy()
        return configuration
    }
}

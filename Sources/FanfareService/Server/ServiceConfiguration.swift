import FanfareCluster
import FanfareFanout
import FanfarePostgres
import Glibc
import Logging
import Prometheus

/// How `fanfare serve` runs: where it listens, the engine behind it, and the API's limits.
public struct ServiceConfiguration: Sendable {
    /// Listen address: an IP literal or `localhost` (and port; 0 picks a free one).
    public var host: String
    public var port: Int
    /// The registry: a SQLite file's path (the embedded default), or a `postgres://user@host:port/db` URL
    /// (PostgreSQL, which several nodes can share). See `database`.
    public var databasePath: String
    /// The engine (APNs client, app, budgets, ...). The service sets its logger, metrics factory and
    /// push-result observer. With `apps`, a template: each app's engines take their client, bundle id,
    /// environment and channel management from the app, everything else from here.
    public var fanout: FanoutConfiguration
    /// The apps this deployment sends for (`fanfare serve --apps FILE`); empty: one app, `default`, that
    /// `fanout` describes.
    public var apps: [ServiceApp] = []
    /// Reads the apps again (the apps file and its keys), for `POST /v1/apps/reload` and SIGHUP; nil: the apps
    /// cannot be reloaded (the service was not started with an apps file).
    public var reloadApps: (@Sendable () throws -> [ServiceApp])?
    /// API keys; nil: no authentication, which is allowed on loopback only, and only requests whose Host is
    /// a loopback name or address are answered (`LoopbackHostMiddleware`).
    public var apiKeys: APIKeyring?
    /// The API over HTTPS (`--tls-cert`, `--tls-key`); nil: plain HTTP.
    public var tls: ServiceTLS?
    /// Largest request body (bytes).
    public var maxBodyBytes = 8 << 20
    /// Most items in one token batch (register or delete).
    public var maxBatchItems = 10_000
    /// After SIGTERM/SIGINT, how long the engine's graceful shutdown (in-flight pushes answered, a final
    /// checkpoint of every unfinished wave) and requests still open may take before the service stops anyway.
    /// The engine waits for pushes in flight for half of it (`FanoutConfiguration.shutdownDrainTimeout`).
    public var shutdownTimeout: Duration = .seconds(30)
    /// `GET /v1/waves` lists, after the waves in memory, the final reports of up to this many of the newest
    /// waves the registry kept (waves from before a restart).
    public var storedWaveReportsListed = 1000
    /// Between two `progress` events of a wave's event stream.
    public var eventInterval: Duration = .milliseconds(250)
    /// HTTP connections open at once: past it the listener stops accepting until one closes.
    public var maxAPIConnections = 4096
    /// Wave event streams (`/v1/waves/{id}/events`) open at once: past it a new one is refused with 503.
    public var maxEventStreams = 1024
    /// How long an Idempotency-Key's answer is kept.
    public var idempotencyLifetime: Duration = .seconds(24 * 3600)
    /// How long the token ledger keeps the history of registrations that ended (`GET /v1/tokens/{token}`).
    public var ledgerRetention: Duration = .seconds(30 * 86_400)
    /// PostgreSQL: how long one database call may take before it fails (`database_unavailable` through the API)
    /// and its connection is replaced: a frozen server or a silent network path ends there.
    public var databaseTimeout: Duration = .seconds(60)
    /// The Retry-After of 503 answers (seconds).
    public var retryAfterSeconds = 1
    /// Threads for blocking work (registry writes and reads).
    public var blockingThreads = 2
    public var logger = Logger(label: "fanfare.service")
    /// On PostgreSQL: this node's part in the cluster of nodes sharing the database (docs/deployment.md). Its
    /// shard count becomes the engine's (`fanout.client.workerCount`). Ignored with SQLite.
    public var cluster: ClusterConfiguration?
    /// Called when the node lost shard leases (after those shards stopped): `fanfare serve` exits so that its
    /// supervisor restarts it fresh; by default the node goes on with the shards it still holds.
    public var onLeaseLost: (@Sendable ([Int]) -> Void)?
    /// Where the metrics go (served at GET /metrics).
    public var metricsRegistry = PrometheusCollectorRegistry()
    /// UNIX milliseconds; replaceable in tests.
    public var wallClockMilliseconds: @Sendable () -> Int64 = {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }

    public init(
        host: String = "127.0.0.1", port: Int = 8080, databasePath: String = "fanfare.db", fanout: FanoutConfiguration
    ) {
        self.host = host
        self.port = port
        self.databasePath = databasePath
        self.fanout = fanout
    }

    /// Where the registry lives, as `databasePath` says.
    public enum Database: Sendable, Equatable {
        case sqlite(path: String)
        case postgres(url: String)
    }

    /// A `postgres://` or `postgresql://` URL is PostgreSQL; anything else is a SQLite file's path.
    public var database: Database {
        let lowered = databasePath.lowercased()
        if lowered.hasPrefix("postgres://") || lowered.hasPrefix("postgresql://") {
            return .postgres(url: databasePath)
        }
        return .sqlite(path: databasePath)
    }

    /// `databasePath` for logs and messages: a URL's password is replaced by `***`.
    public var databaseDescription: String {
        switch database {
        case .sqlite(let path): return path
        case .postgres(let url): return PostgresTokenStore.redacted(url)
        }
    }

    /// The apps served: `apps`, or the one `fanout` describes.
    public var servedApps: [ServiceApp] {
        guard apps.isEmpty else { return apps }
        let environment = ServiceApp.Environment(
            environment: fanout.environment, client: fanout.client, channelManagement: fanout.channelManagement,
            keyID: fanout.client.providerTokens?.current().keyID)
        return [ServiceApp(id: "default", bundleID: fanout.bundleID, isDefault: true, environments: [environment])]
    }

    /// Where the API answers once it listens on `port`: `https://127.0.0.1:8080`, `http://[::1]:8080`.
    public func url(port: Int) -> String {
        "\(tls == nil ? "http" : "https")://\(host.contains(":") ? "[\(host)]" : host):\(port)"
    }

    /// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost).
    public static func isLoopback(_ host: String) -> Bool {
        let lowered = host.lowercased()
        if lowered == "localhost" || lowered == "::1" || lowered == "[::1]" { return true }
        let parts = lowered.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts.allSatisfy({ UInt8($0) != nil }) else { return false }
        return parts[0] == "127"
    }

    /// The first setting that cannot work, as a message that says what to do.
    public func problem() -> String? {
        if apiKeys == nil && !Self.isLoopback(host) {
            return "refusing to listen on \(host) without API keys: anyone who can reach it could register tokens and "
                + "push to your users. Give --api-keys FILE (one key per line with its scopes), or listen on 127.0.0.1"
        }
        if !(0...65535).contains(port) { return "port \(port) is not in 0...65535" }
        switch database {
        case .sqlite(let path):
            if path.isEmpty {
                return "--database is empty: give a SQLite file's path or a postgres://user@host:port/db URL"
            }
            if path.contains("://") {
                return "--database \(PostgresTokenStore.redacted(path)): only postgres:// (or postgresql://) URLs are "
                    + "known; give a postgres://user@host:port/db URL or a SQLite file's path"
            }
        case .postgres(let url):
            if let problem = PostgresTokenStore.urlProblem(url) { return "--database: \(problem)" }
        }
        if maxBodyBytes < 1024 || maxBodyBytes > 1 << 30 { return "--max-body must be in 1 KiB...1 GiB" }
        if maxBatchItems < 1 || maxBatchItems > 1_000_000 { return "the batch limit must be in 1...1,000,000" }
        if shutdownTimeout < .zero || shutdownTimeout > .seconds(24 * 3600) {
            return "--shutdown-timeout must be in 0...86400 seconds"
        }
        if eventInterval < .milliseconds(10) || eventInterval > .seconds(60) {
            return "the event interval must be in 10 ms...60 s"
        }
        if ledgerRetention < .seconds(86_400) || ledgerRetention > .seconds(3650 * 86_400) {
            return "--ledger-retention-days must be in 1...3650"
        }
        if retryAfterSeconds < 1 || retryAfterSeconds > 3600 { return "Retry-After must be in 1...3600 seconds" }
        if databaseTimeout < .seconds(1) || databaseTimeout > .seconds(3600) {
            return "--database-timeout must be in 1...3600 seconds"
        }
        if maxAPIConnections < 1 || maxAPIConnections > 1_000_000 {
            return "--max-api-connections must be in 1...1,000,000"
        }
        if maxEventStreams < 0 || maxEventStreams > maxAPIConnections {
            return "--max-event-streams must be in 0...--max-api-connections (\(maxAPIConnections))"
        }
        if blockingThreads < 1 || blockingThreads > 64 { return "blocking threads must be in 1...64" }
        if let problem = appsProblem() { return problem }
        if storedWaveReportsListed < 0 || storedWaveReportsListed > 100_000 {
            return "stored wave reports listed must be in 0...100,000"
        }
        return nil
    }

    /// The first problem of `apps`: ids unique, one default, each app sending somewhere.
    private func appsProblem() -> String? {
        var ids = Set<String>()
        for app in apps {
            if let problem = app.problem() { return problem }
            if !ids.insert(app.id).inserted { return "app \(app.id) is configured twice" }
        }
        if !apps.isEmpty && apps.filter(\.isDefault).count != 1 { return "exactly one app must be the default" }
        if case .postgres = database, servedApps.reduce(0, { $0 + $1.environments.count }) > 1 {
            return "several apps or environments on PostgreSQL are not supported yet (issue 25, in progress): "
                + "serve them from SQLite, or one app in one environment per PostgreSQL database"
        }
        return nil
    }
}

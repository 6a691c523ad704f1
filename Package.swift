// swift-tools-version:6.1
// Fanfare: iOS Live Activity pushes through APNs over io_uring + TLS (OpenSSL) + its own HTTP/2 framing.
import PackageDescription

let package = Package(
    name: "Fanfare",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "fanfare", targets: ["fanfare"]),
        // `fanfare` without serve, import and waves: scripts/demo builds it, as it needs neither SwiftNIO, Hummingbird,
        // postgres-nio nor swift-crypto (a release build in minutes instead of about half an hour on two cores).
        .executable(name: "fanfare-demo", targets: ["fanfare-demo"]),
        .library(name: "FanfareClient", targets: ["FanfareClient"]),
        // TLS contexts, provider tokens (JWT) and keys: what a client configuration is built from.
        .library(name: "FanfareTLS", targets: ["FanfareTLS"]),
        // The io_uring event loop and socket addresses (the simulator's listen address is one).
        .library(name: "FanfareIO", targets: ["FanfareIO"]),
        // HTTP/2 framing and HPACK (client and server sessions), for the benchmarks and anyone framing their own.
        .library(name: "FanfareHTTP2", targets: ["FanfareHTTP2"]),
        .library(name: "FanfareSimulator", targets: ["FanfareSimulator"]),
        .library(name: "FanfareCore", targets: ["FanfareCore"]),
        .library(name: "FanfareStorage", targets: ["FanfareStorage"]),
        .library(name: "FanfareApps", targets: ["FanfareApps"]),
        .library(name: "FanfareSQLite", targets: ["FanfareSQLite"]),
        .library(name: "FanfareFanout", targets: ["FanfareFanout"]),
        // The registry on PostgreSQL (issue 14: several nodes on one database).
        .library(name: "FanfarePostgres", targets: ["FanfarePostgres"]),
        .library(name: "FanfareCluster", targets: ["FanfareCluster"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // Logs and metrics of long-running work (connections, waves, the invalid-token breaker): the
        // ecosystem's facades, so an application chooses the backends (swift-log's handler, Prometheus).
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        // `fanfare serve`: the HTTP/JSON API (spec-first: Sources/FanfareService/openapi.yaml), its lifecycle
        // and its Prometheus metrics. Package traits off: nothing of swift-configuration is used.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: []),
        .package(url: "https://github.com/apple/swift-openapi-runtime", from: "1.13.4", traits: []),
        .package(url: "https://github.com/hummingbird-project/swift-openapi-hummingbird", from: "2.1.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        // The PostgreSQL wire protocol (COPY, LISTEN/NOTIFY, a connection pool) for FanfarePostgres.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // TLS to PostgreSQL (sslmode): postgres-nio's own TLS library, named so FanfarePostgres may import it.
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
    ],
    targets: [
        // C libraries: one shim header each, installed from Debian by the README commands. nghttp2 is the
        // reference the tests check our HTTP/2 and HPACK against; no library target links it.
        .systemLibrary(name: "CURing", pkgConfig: "liburing", providers: [.apt(["liburing-dev"])]),
        .systemLibrary(name: "CNghttp2", pkgConfig: "libnghttp2", providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),

        // Pure Swift: tokens, payload encoder, APNs reasons and actions. No Foundation on the hot path.
        .target(name: "FanfareCore"),
        // io_uring event loop: rings, completions, timers, cross-thread wake-up.
        .target(name: "FanfareIO", dependencies: ["CURing"]),
        // OpenSSL: TLS over memory BIOs, ES256 provider tokens (JWT), key files.
        // OpenSSL's small allocations from a per-thread cache (installed when the program loads).
        .target(name: "CFanfareCryptoPool", dependencies: ["COpenSSL"]),
        .target(name: "FanfareTLS", dependencies: ["COpenSSL", "CFanfareCryptoPool", "FanfareCore"]),
        // Connections shared by the client and the simulator: TLS over io_uring sockets, HTTP/2 framing (a
        // client and a server session on one frame layer) and HPACK.
        .target(name: "FanfareHTTP2", dependencies: ["FanfareCore", "FanfareIO", "FanfareTLS"]),
        // The APNs client data plane: workers, connections, streams.
        .target(
            name: "FanfareClient",
            dependencies: [
                "FanfareCore", "FanfareIO", "FanfareTLS", "FanfareHTTP2", "CURing",
                .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // The APNs simulator: same stack, server side. It serves the apps of an apps file (FanfareApps).
        .target(
            name: "FanfareSimulator",
            dependencies: ["FanfareCore", "FanfareIO", "FanfareTLS", "FanfareHTTP2", "CURing", "FanfareApps", "FanfareStorage"]
        ),
        // Load generation and measurement (`fanfare load`): closed/open loop, HdrHistogram latency.
        .target(
            name: "FanfareLoad",
            dependencies: ["FanfareClient", "FanfareCore", "FanfareIO", .product(name: "Histogram", package: "hdrhistogram-swift")]
        ),
        // What the engine and the service keep, as interfaces and records: tokens, broadcast subscriptions and
        // links, the ledger, waves, idempotency answers. No database here: FanfareSQLite and FanfarePostgres
        // implement it, so the engine builds (and links) without either.
        .target(name: "FanfareStorage", dependencies: ["FanfareCore"]),
        // The apps a deployment sends for (`--apps FILE`): bundle ids, teams, provider keys and their environments
        // and topics, endpoints. Read by `fanfare serve` and by the simulator, which checks pushes against it.
        .target(name: "FanfareApps", dependencies: ["FanfareCore", "FanfareStorage", "FanfareTLS"]),
        // The embedded default store: one SQLite file through GRDB (WAL, synchronous=FULL).
        .target(
            name: "FanfareSQLite",
            dependencies: [
                "FanfareStorage", "FanfareCore",
                .product(name: "GRDB", package: "GRDB.swift"), .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ]
        ),
        // The registry on PostgreSQL: the same TokenStore, shared by several nodes (versioned migrations, COPY).
        .target(
            name: "FanfarePostgres",
            dependencies: [
                "FanfareStorage", "FanfareCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // The TCP connection (keepalive, TCP_USER_TIMEOUT) and its TLS: Sources/FanfarePostgres/Connection.
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The fan-out engine: sharded token tables, lock-free command queues, priority budget, latest state wins.
        .target(
            name: "FanfareFanout",
            dependencies: [
                "FanfareClient", "FanfareStorage", "FanfareCore", "FanfareIO",
                .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // `fanfare serve`: the engine behind an HTTP/JSON API (Hummingbird 2; the OpenAPI document is the
        // source of truth and its generated code is committed under Generated/, see scripts/generate-openapi).
        // Several nodes on one PostgreSQL: shard leases, the wave and registry feeds, driving a FanfareFanout engine.
        .target(
            name: "FanfareCluster",
            dependencies: [
                "FanfareFanout", "FanfarePostgres", "FanfareStorage", "FanfareCore", "FanfareIO",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "FanfareService",
            dependencies: [
                "FanfareFanout", "FanfareStorage", "FanfareSQLite", "FanfarePostgres", "FanfareCluster", "FanfareClient", "FanfareCore", "FanfareTLS",
                "FanfareApps",
                .product(name: "Hummingbird", package: "hummingbird"),
                // --tls-cert / --tls-key: the API over HTTPS (swift-nio-ssl, as postgres-nio already brings it).
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "OpenAPIHummingbird", package: "swift-openapi-hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
            ],
            exclude: ["openapi.yaml", "openapi-generator-config.yaml"],
            // The operator page (GET /) is a file of its own, compiled into the code: no resource bundle to ship
            // beside the binary, no Bundle.module lookup at run time.
            resources: [.embedInCode("OperatorPage/OperatorPage.html")]
        ),
        // The subcommands that need neither the service nor PostgreSQL (push, channel, simulate, load, keygen, token,
        // demo), their options and the process entry: one implementation for both executables.
        .target(
            name: "FanfareCommands",
            dependencies: [
                "FanfareClient", "FanfareSimulator", "FanfareCore", "FanfareTLS", "FanfareLoad", "FanfareIO", "CURing",
                "FanfareStorage", "FanfareSQLite", "FanfareFanout", "FanfareApps",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The whole CLI: FanfareCommands plus serve, import and waves.
        .executableTarget(
            name: "fanfare",
            dependencies: [
                "FanfareCommands", "FanfareClient", "FanfareSimulator", "FanfareCore", "FanfareTLS", "FanfareStorage", "FanfareSQLite",
                "FanfareFanout", "FanfareService", "FanfareCluster", "FanfarePostgres", "FanfareApps", "FanfareIO",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The demo's binary: FanfareCommands alone.
        .executableTarget(
            name: "fanfare-demo",
            dependencies: ["FanfareCommands", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),

        // Test support: every test on a thread of its own (`.ownThread`), liveness bounds scaled by FANFARE_TEST_TIME_SCALE,
        // child processes through posix_spawn, a real PostgreSQL per test process (Tests/Support/FanfareTestSupport/).
        .target(name: "CChildProcess", path: "Tests/Support/CChildProcess"),
        .target(name: "FanfareTestSupport", dependencies: ["CChildProcess"], path: "Tests/Support/FanfareTestSupport"),
        // The registry tests' rows (tokens, registrations, subscriptions, the ledger's clock), for both stores.
        .target(
            name: "FanfareRegistryFixtures", dependencies: ["FanfareCore", "FanfareStorage"],
            path: "Tests/Support/FanfareRegistryFixtures"),
        // What the client, fan-out, cluster and end-to-end tests share: a real APNsSimulator on loopback with the
        // keys and TLS contexts to reach it (SimulatorHarness), nghttp as a reference client, the engine's fixture.
        .target(
            name: "FanfareTestHarness",
            dependencies: [
                "FanfareClient", "FanfareSimulator", "FanfareCore", "FanfareTLS", "FanfareIO", "FanfareFanout",
                "FanfareStorage", "FanfareSQLite", "FanfareTestSupport",
                .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
            ],
            path: "Tests/Support/FanfareTestHarness"
        ),

        // The house rules a machine can check (docs/STYLE.md), over Sources/.
        .testTarget(name: "TidyTests", dependencies: ["FanfareTestSupport"]),
        .testTarget(name: "FanfareCoreTests", dependencies: ["FanfareCore", "FanfareTestSupport"]),
        .testTarget(name: "FanfareIOTests", dependencies: ["FanfareIO", "CURing", "FanfareTestSupport"]),
        .testTarget(name: "FanfareTLSTests", dependencies: ["FanfareTLS", "FanfareCore", "COpenSSL", "FanfareTestSupport"]),
        .testTarget(
            name: "FanfareAppsTests", dependencies: ["FanfareApps", "FanfareStorage", "FanfareTLS", "FanfareTestSupport"]),
        // HPACK and HTTP/2 framing, checked against nghttp2's own encoder and decoder.
        .testTarget(
            name: "FanfareHTTP2Tests", dependencies: ["FanfareHTTP2", "FanfareCore", "FanfareClient", "CNghttp2", "FanfareTestSupport"]),
        .testTarget(
            name: "FanfareSimulatorTests",
            dependencies: ["FanfareSimulator", "FanfareCore", "FanfareTLS", "FanfareApps", "FanfareTestSupport"]),
        .testTarget(
            name: "LoadTests",
            dependencies: ["FanfareLoad", "FanfareClient", "FanfareSimulator", "FanfareCore", "FanfareTLS", "FanfareIO", "FanfareTestSupport"]
        ),
        .testTarget(
            name: "InteropTests",
            dependencies: ["FanfareClient", "FanfareSimulator", "FanfareCore", "FanfareTLS", "FanfareIO", "FanfareTestSupport", "FanfareTestHarness"]
        ),
        .testTarget(
            name: "FanfareSQLiteTests",
            dependencies: ["FanfareSQLite", "FanfareStorage", "FanfareCore", "FanfareTestSupport", "FanfareRegistryFixtures"]),
        // FanfarePostgres against a real PostgreSQL (initdb into a temporary directory, loopback), with the same
        // expectations run against SQLite.
        .testTarget(
            name: "FanfarePostgresTests",
            dependencies: [
                "FanfarePostgres", "FanfareSQLite", "FanfareStorage", "FanfareCore", "FanfareTestSupport",
                "FanfareRegistryFixtures",
                // Raw statements inside the store's own transactions (a pause, a lock held by a stalled node).
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ]
        ),
        // The fan-out engine: parts in isolation (queue under contention, budgets, lanes, tables, the shard under
        // random schedules) and, in Engine/, whole engines against the real simulator and a SQLite file.
        .testTarget(
            name: "FanoutTests",
            dependencies: [
                "FanfareFanout", "FanfareStorage", "FanfareSQLite", "FanfareClient", "FanfareSimulator", "FanfareCore",
                "FanfareIO", "FanfareTLS", "FanfareTestSupport", "FanfareTestHarness",
                .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // FanfareClient against the real simulator over loopback TLS + HTTP/2: connections, streams, GOAWAY,
        // deadlines, autoscaling, faults, broadcast channels and their management API.
        .testTarget(
            name: "FanfareClientTests",
            dependencies: [
                "FanfareClient", "FanfareSimulator", "FanfareCore", "FanfareTLS", "FanfareIO", "FanfareHTTP2",
                "FanfareTestSupport", "FanfareTestHarness",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Several nodes' parts on a real PostgreSQL (initdb on loopback): ClusterNode, the engine's leased shards.
        .testTarget(
            name: "FanfareClusterTests",
            dependencies: [
                "FanfareCluster", "FanfareFanout", "FanfarePostgres", "FanfareStorage", "FanfareClient",
                "FanfareSimulator", "FanfareCore", "FanfareTestSupport", "FanfareTestHarness",
            ]
        ),
        // `fanfare serve` over real HTTP on loopback: in-process services and the real binary as a child process,
        // the OpenAPI document checked against what the server answers.
        .testTarget(
            name: "ServiceTests",
            dependencies: [
                "FanfareService", "FanfareFanout", "FanfareStorage", "FanfareSQLite", "FanfareClient", "FanfareSimulator", "FanfareCore",
                "FanfareTLS", "FanfareIO", "FanfareTestSupport",
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "FanfareClient", "FanfareSimulator", "FanfareCore", "FanfareTLS", "FanfareIO", "FanfareFanout", "FanfareStorage", "FanfareSQLite",
                "FanfareApps", "FanfareTestSupport", "FanfareTestHarness",
            ]
        ),
    ]
)

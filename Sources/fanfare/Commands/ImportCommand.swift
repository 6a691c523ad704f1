import ArgumentParser
import FanfareApps
import FanfareCommands
import FanfarePostgres
import FanfareSQLite
import FanfareStorage
import FanfareService
import Foundation
import Synchronization

/// `fanfare import`: bulk-loads token registrations into the registry, without a running service. For moving an
/// existing token base to Fanfare, or loading a cluster's PostgreSQL before its nodes start (running nodes pick the
/// tokens up from the change feed).
struct ImportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Bulk-load token registrations (POST /v1/tokens bodies) into the registry.",
        discussion: """
            Each FILE holds one token batch as `POST /v1/tokens` takes it ({"tokens": [...]}, any number of items; \
            `-` reads standard input). A file is checked whole, with the API's rules, before any of it is written: a \
            bad file writes nothing and stops the import, and what the files before it registered stays (each \
            batch is durable when written). Batches of --batch tokens go to the database --connections at a time \
            (PostgreSQL: COPY, on that many connections). Exit status: 0 done, 64 bad arguments, 65 a bad file, \
            66 a file that cannot be read, 74 the registry failed.
            """)

    @Option(
        help: """
            The registry: a SQLite file (created if missing), or \
            postgres://user@host[:port]/database[?sslmode=verify-full&sslrootcert=ca.pem] (sslmode: disable, prefer \
            (default), require, verify-ca, verify-full); the password from PGPASSWORD or ~/.pgpass (PGPASSFILE), \
            or in the URL (visible in ps). See docs/deployment.md.
            """)
    var database = "fanfare.db"

    @Option(help: "The app the tokens belong to (or --apps FILE with --app ID).")
    var bundleId: String?

    @Option(help: "An apps file (as `fanfare serve --apps` reads it), for --app.")
    var apps: String?

    @Option(help: "The app of --apps the tokens belong to (its id); items may name either environment it sends in.")
    var app: String?

    @Flag(help: "Items that name no environment are APNs sandbox (development) tokens (default: production).")
    var sandbox = false

    @Option(help: "Tokens per registry transaction.")
    var batch = 10_000

    @Option(help: "Batches written at once (PostgreSQL; SQLite writes one at a time).")
    var connections = 2

    @Flag(help: "No progress lines on standard error.")
    var quiet = false

    @Argument(help: "Token batch files (JSON), or - for standard input.")
    var files: [String]

    func validate() throws {
        guard (1...1_000_000).contains(batch) else {
            throw ValidationError("--batch must be in 1...1000000 (got \(batch))")
        }
        guard (1...16).contains(connections) else {
            throw ValidationError("--connections must be in 1...16 (got \(connections))")
        }
        switch (bundleId, apps, app) {
        case (let bundle?, nil, nil):
            guard !bundle.isEmpty else { throw ValidationError("--bundle-id must not be empty") }
        case (nil, .some, .some): break
        case (.some, _, _): throw ValidationError("give --bundle-id, or --apps FILE with --app ID, not both")
        default: throw ValidationError("give --bundle-id, or --apps FILE with --app ID (the tokens' app)")
        }
        if database.hasPrefix("postgres://") || database.hasPrefix("postgresql://"),
            let problem = PostgresTokenStore.urlProblem(database)
        {
            throw ValidationError(problem)
        }
    }

    /// The tokens' app: its name, bundle id and the environments its tokens may be in (`--app` of `--apps`:
    /// where one of its keys may sign; `--bundle-id`: either).
    private func target() throws -> (String, String, [APNsEnvironment]) {
        guard let apps, let app else { return (bundleId ?? "", bundleId ?? "", APNsEnvironment.allCases) }
        let catalog: AppCatalog
        do { catalog = try AppCatalog.load(path: apps) } catch {
            printError("\(error)")
            throw ExitCode(64)
        }
        guard let definition = catalog[app] else {
            printError(
                "--app \(app): \(apps) has no such app (it has \(catalog.apps.map(\.id).joined(separator: ", ")))")
            throw ExitCode(64)
        }
        return (definition.id, definition.bundleID, definition.environments)
    }

    func run() throws {
        let isPostgres = database.hasPrefix("postgres://") || database.hasPrefix("postgresql://")
        let store: any TokenStore
        let close: () -> Void
        do {
            if isPostgres {
                let postgres = try PostgresTokenStore(url: database, registrationConnections: connections)
                (store, close) = (postgres, { try? postgres.close() })
            } else {
                let sqlite = try SQLiteTokenStore(path: database)
                (store, close) = (sqlite, { try? sqlite.close() })
            }
        } catch {
            printError("opening the registry: \(error)")
            throw ExitCode(74)
        }
        defer { close() }
        let (appName, bundleID, environments) = try target()
        let writer = BatchWriter(store: store, inFlight: isPostgres ? connections : 1)
        let progress = ImportProgress(quiet: quiet)
        var filesDone = 0
        for file in files {
            let items: RegistrationItems
            do {
                let body = try Self.contents(of: file)
                items = try TokenBatchReader.read(
                    body, app: appName, bundleID: bundleID, environments: environments,
                    defaultEnvironment: sandbox ? .sandbox : .production,
                    now: Int64(Date().timeIntervalSince1970 * 1000))
            } catch let problem as ServiceProblem {
                writer.finish()
                printError(
                    "\(file): \(problem.detail); nothing of it was written (\(progress.summary(writer, files: filesDone)))"
                )
                throw ExitCode(65)
            } catch {
                writer.finish()
                printError("\(file): \(error) (\(progress.summary(writer, files: filesDone)))")
                throw ExitCode(66)
            }
            var start = 0
            while start < items.tokens.count {
                let end = min(start + batch, items.tokens.count)
                writer.write(Array(items.tokens[start..<end]), subscriptions: [])
                start = end
                progress.tick(writer)
            }
            if !items.subscriptions.isEmpty { writer.write([], subscriptions: items.subscriptions) }
            if writer.failure != nil { break }
            filesDone += 1
        }
        writer.finish()
        if let failure = writer.failure {
            printError(
                "the registry failed: \(failure) (\(progress.summary(writer, files: filesDone)); a batch that failed wrote nothing)"
            )
            throw ExitCode(74)
        }
        print("fanfare import: \(progress.summary(writer, files: filesDone))")
    }

    static func contents(of file: String) throws -> [UInt8] {
        if file == "-" { return Array(FileHandle.standardInput.readDataToEndOfFile()) }
        guard let data = FileManager.default.contents(atPath: file) else {
            throw ImportError("cannot read it (missing, a directory, or not permitted)")
        }
        return Array(data)
    }

    struct ImportError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}

/// Writes batches on up to `inFlight` threads at once, so the database works on one batch while the next is
/// sent. After a failure nothing more is written.
private final class BatchWriter: @unchecked Sendable {
    private let store: any TokenStore
    private let queue = DispatchQueue(label: "fanfare.import", attributes: .concurrent)
    private let slots: DispatchSemaphore
    private let group = DispatchGroup()
    private struct Totals {
        var tokens = 0
        var subscriptions = 0
        var replaced = 0
        var failure: String?
    }
    private let totals = Mutex(Totals())
    let started = ContinuousClock.now

    init(store: any TokenStore, inFlight: Int) {
        self.store = store
        slots = DispatchSemaphore(value: inFlight)
    }

    var tokens: Int { totals.withLock { $0.tokens } }
    var subscriptions: Int { totals.withLock { $0.subscriptions } }
    var replaced: Int { totals.withLock { $0.replaced } }
    var failure: String? { totals.withLock { $0.failure } }

    func write(_ tokens: [TokenRegistration], subscriptions: [BroadcastSubscription]) {
        slots.wait()
        guard failure == nil else {
            slots.signal()
            return
        }
        group.enter()
        queue.async { [self] in
            defer {
                slots.signal()
                group.leave()
            }
            do {
                let result = try store.register(tokens, subscriptions: subscriptions)
                totals.withLock {
                    $0.tokens += tokens.count
                    $0.subscriptions += subscriptions.count
                    $0.replaced += result.replacedTokens.count
                }
            } catch {
                totals.withLock { if $0.failure == nil { $0.failure = "\(error)" } }
            }
        }
    }

    /// Waits for the batches in flight.
    func finish() { group.wait() }
}

/// A line on standard error about once a second while the import runs.
private final class ImportProgress {
    private let quiet: Bool
    private var lastLine = ContinuousClock.now

    init(quiet: Bool) { self.quiet = quiet }

    func tick(_ writer: BatchWriter) {
        guard !quiet, ContinuousClock.now - lastLine >= .seconds(1) else { return }
        lastLine = ContinuousClock.now
        FileHandle.standardError.write(
            Data("fanfare import: \(writer.tokens) tokens so far, \(Self.rate(writer))/s\n".utf8))
    }

    func summary(_ writer: BatchWriter, files: Int) -> String {
        let seconds = Self.seconds(ContinuousClock.now - writer.started)
        var text =
            "\(writer.tokens) tokens registered from \(files) file\(files == 1 ? "" : "s") in "
            + String(format: "%.2f", seconds) + " s (\(Self.rate(writer)) tokens/s)"
        if writer.replaced > 0 { text += ", \(writer.replaced) replaced" }
        if writer.subscriptions > 0 { text += ", \(writer.subscriptions) broadcast subscriptions" }
        return text
    }

    private static func rate(_ writer: BatchWriter) -> Int {
        let seconds = seconds(ContinuousClock.now - writer.started)
        return seconds > 0 ? Int(Double(writer.tokens) / seconds) : 0
    }

    private static func seconds(_ duration: Duration) -> Double {
        let (whole, attoseconds) = duration.components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}

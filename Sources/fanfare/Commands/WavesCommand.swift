import ArgumentParser
import FanfareCommands
import FanfareFanout
import FanfarePostgres
import FanfareSQLite
import FanfareStorage
import FanfareService
import Foundation

/// `fanfare waves`: what a registry file says about waves, read without running an engine: the final reports
/// kept for complete waves, and the unfinished waves the next `fanfare serve` on it resumes.
struct WavesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "waves",
        abstract: "Show the wave reports and the unfinished waves a registry file keeps (docs/service.md).",
        discussion: """
            Reads --database directly, so the service must not be running on it (the registry keeps its file \
            locked while open; ask a running service with GET /v1/waves instead). Complete waves are shown newest \
            first with their final report; unfinished waves (cut by a crash or a shutdown) with the progress \
            checkpoints the next start resumes them from. Exit codes: 0 shown, 1 the wave asked for with --id is \
            not there or the file cannot be read, 64 bad flags or a missing file.
            """
    )

    @Option(help: "The registry file (SQLite) of `fanfare serve` or `fanfare demo`.")
    var database: String

    @Option(
        help: "The app whose waves to show (`fanfare serve --simulator` and `fanfare demo` use com.example.fanfare).")
    var bundleId = "com.example.fanfare"

    @Option(help: "The app's APNs environment: production or sandbox.")
    var environment = "production"

    @Option(help: "Show only this wave.")
    var id: UInt64?

    @Option(help: "The newest N complete waves (1...100000).")
    var limit = 20

    @Flag(help: "One JSON object: the reports as GET /v1/waves/{id} answers them, and the unfinished waves.")
    var json = false

    func run() throws {
        guard (1...100_000).contains(limit) else { throw refuse("--limit must be in 1...100000 (got \(limit))") }
        let environment: APNsEnvironment
        switch self.environment {
        case "production": environment = .production
        case "sandbox": environment = .sandbox
        default: throw refuse("--environment '\(self.environment)' must be production or sandbox")
        }
        if let id, id < 1 { throw refuse("--id must be at least 1") }
        // The store creates a missing file: check first, so a typo is not answered with an empty registry.
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: database, isDirectory: &isDirectory), !isDirectory.boolValue else {
            // Redacted: a postgres:// URL given here by mistake may hold a password.
            throw refuse("--database '\(PostgresTokenStore.redacted(database))' does not exist (or is a directory)")
        }
        let store: SQLiteTokenStore
        do {
            store = try SQLiteTokenStore(path: database)
        } catch {
            printError("\(error)")
            if case .storage(let message) = error, message.contains("in use") {
                printError("is `fanfare serve` running on it? Stop it first, or ask it: GET /v1/waves")
            }
            throw ExitCode(1)
        }
        defer { try? store.close() }

        var reports: [WaveReport]
        var unfinished: [UnfinishedWave]
        do {
            unfinished = try store.unfinishedWaves(bundleID: bundleId, environment: environment)
            if let id {
                reports = try store.waveReport(id: id).map { [WaveReport(record: $0)] } ?? []
                unfinished.removeAll { $0.record.id != id }
            } else {
                reports = try store.waveReports(bundleID: bundleId, environment: environment, limit: limit)
                    .map(WaveReport.init(record:))
            }
        } catch {
            printError("reading the waves of '\(database)': \(error)")
            throw ExitCode(1)
        }
        if let id, reports.isEmpty && unfinished.isEmpty {
            printError("wave \(id) is not in '\(database)' (as a complete or unfinished wave)")
            throw ExitCode(1)
        }
        if json {
            print(try Self.json(bundleID: bundleId, environment: environment, reports: reports, unfinished: unfinished))
        } else {
            print(
                Self.text(
                    database: database, bundleID: bundleId, environment: environment, reports: reports,
                    unfinished: unfinished))
        }
    }

    private func refuse(_ message: String) -> ExitCode {
        printError(message)
        return ExitCode(64)
    }

    static func text(
        database: String, bundleID: String, environment: APNsEnvironment, reports: [WaveReport],
        unfinished: [UnfinishedWave]
    ) -> String {
        var lines = ["\(database): \(bundleID) (\(environment))", ""]
        if reports.isEmpty {
            lines.append("no complete waves")
        } else {
            lines.append("complete waves, newest first:")
            lines.append(WaveTable.render(reports))
            for report in reports where report.restarts > 0 {
                lines.append(
                    "wave \(report.id): resumed after \(report.restarts) restart(s); "
                        + "\(WaveTable.group(report.resentAfterRestart)) pushes resent after a restart")
            }
        }
        lines.append("")
        if unfinished.isEmpty {
            lines.append("no unfinished waves")
        } else {
            lines.append("unfinished waves (the next start on this registry resumes them):")
            let rows =
                [["wave", "channel", "event", "timestamp", "published", "shards", "checkpoints"]]
                + unfinished.map { wave in
                    let record = wave.record
                    return [
                        "\(record.id)", record.channel, record.event, "\(record.timestamp)",
                        Self.utc(milliseconds: record.publishedAt),
                        "\(record.shardCount)", "\(wave.checkpoints.count)",
                    ]
                }
            lines.append(contentsOf: Self.table(rows))
        }
        return lines.joined(separator: "\n")
    }

    /// Fixed-width columns, the first row a header.
    static func table(_ rows: [[String]]) -> [String] {
        var widths = Array(repeating: 0, count: rows[0].count)
        for row in rows { for (column, cell) in row.enumerated() { widths[column] = max(widths[column], cell.count) } }
        var lines: [String] = []
        for (index, row) in rows.enumerated() {
            lines.append(
                row.enumerated().map { column, cell in cell + String(repeating: " ", count: widths[column] - cell.count)
                }
                .joined(separator: "  ").trimmingCharacters(in: .whitespaces))
            if index == 0 { lines.append(String(repeating: "-", count: lines[0].count)) }
        }
        return lines
    }

    static func utc(milliseconds: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }

    /// The JSON of `--json`: the reports exactly as the API encodes them.
    static func json(
        bundleID: String, environment: APNsEnvironment, reports: [WaveReport], unfinished: [UnfinishedWave]
    ) throws -> String {
        let listing = Listing(
            bundleID: bundleID, environment: "\(environment)", waves: reports.map(FanfareAPI.report),
            unfinished: unfinished.map {
                Listing.Unfinished(
                    id: $0.record.id, channel: $0.record.channel, event: $0.record.event,
                    timestamp: $0.record.timestamp,
                    publishedAtMs: $0.record.publishedAt, freshUntil: $0.record.freshUntil,
                    shards: $0.record.shardCount,
                    checkpoints: $0.checkpoints.count)
            })
        return String(decoding: try ServiceProblem.encoder.encode(listing), as: UTF8.self)
    }

    struct Listing: Encodable {
        var bundleID: String
        var environment: String
        var waves: [Components.Schemas.WaveReport]
        var unfinished: [Unfinished]

        struct Unfinished: Encodable {
            var id: UInt64
            var channel: String
            var event: String
            var timestamp: Int64
            var publishedAtMs: Int64
            var freshUntil: Int64?
            var shards: Int
            var checkpoints: Int

            enum CodingKeys: String, CodingKey {
                case id, channel, event, timestamp, shards, checkpoints
                case publishedAtMs = "published_at_ms"
                case freshUntil = "fresh_until"
            }
        }

        enum CodingKeys: String, CodingKey {
            case bundleID = "bundle_id"
            case environment, waves, unfinished
        }
    }
}

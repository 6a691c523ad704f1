import FanfareCore
@_exported import FanfareRegistryFixtures
import FanfarePostgres
@testable import FanfareSQLite
import FanfareStorage
import FanfareTestSupport
import Foundation
import Testing

/// Every suite of this target runs inside this one, one test at a time: the tests are synchronous and block
/// their thread on PostgreSQL calls, and swift-testing runs them on the shared concurrency pool (2 threads on a
/// 2-core machine). Several at once starved other targets' async tests of the pool for minutes under load.
@Suite("FanfarePostgres (one test at a time)", .serialized, .ownThread)
enum PostgresSuites {}

/// The stores the shared expectations run against.
enum StoreKind: String, CaseIterable, Sendable, CustomStringConvertible {
    case sqlite
    case postgres

    var description: String { rawValue }
}

/// Runs `body` with a fresh store of `kind`: a new SQLite file, or a new database on the process's PostgreSQL.
func withStore<T>(_ kind: StoreKind, _ body: (any TokenStore) throws -> T) throws -> T {
    switch kind {
    case .sqlite:
        let directory = NSTemporaryDirectory() + "fanfare-pg-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteTokenStore(path: directory + "/fanfare.db")
        return try body(store)
    case .postgres:
        return try withWaveStore(.postgres) { store, _ in try body(store) }
    }
}

func pushToStartRegistration(
    _ number: Int, device: String? = nil, channels: [String] = ["match-1"], createdAt: Int64 = 1_700_000_000_000
) -> TokenRegistration {
    TokenRegistration(
        token: makeToken(number), kind: .pushToStart, deviceID: device ?? "device-\(number)",
        attributesType: "MatchAttributes", bundleID: testBundle, environment: .production, channels: channels,
        createdAt: createdAt)
}

extension TokenStore {
    /// Every registration of one app, keyed by token, channel lists sorted (SQLite keeps no order).
    func all(
        bundleID: String = testBundle, environment: APNsEnvironment = .production
    ) throws
        -> [DeviceToken: TokenRegistration]
    {
        var result: [DeviceToken: TokenRegistration] = [:]
        var duplicates = 0
        try forEachRegistration(bundleID: bundleID, environment: environment) { registration in
            var registration = registration
            registration.channels.sort()
            if result[registration.token] != nil { duplicates += 1 }
            result[registration.token] = registration
        }
        if duplicates > 0 { throw RegistryError.storage("\(duplicates) tokens delivered twice") }
        return result
    }
}

extension TokenRegistration {
    var sortedChannels: TokenRegistration {
        var copy = self
        copy.channels.sort()
        return copy
    }
}

/// A fresh database of one kind that stores can be opened on again and again (a reopened store sees what the
/// earlier ones wrote), with raw SQL behind the stores' back for counting and corrupting rows.
final class StoreDatabase {
    typealias Store = any ServiceStorage

    let kind: StoreKind
    private let directory: String?
    /// The process's shared server, and the database of this test on it.
    private let server: PostgresServer?
    private let database: String

    init(_ kind: StoreKind) throws {
        self.kind = kind
        switch kind {
        case .sqlite:
            let directory = NSTemporaryDirectory() + "fanfare-pg-tests-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            self.directory = directory
            server = nil
            database = ""
        case .postgres:
            directory = nil
            let server = try PostgresServer.shared()
            self.server = server
            database = try server.createDatabase()
        }
    }

    /// The URL of this test's PostgreSQL database (nil on SQLite).
    var url: String? { server.map { $0.url(database: database) } }
    /// The SQLite file of this test (meaningless on PostgreSQL).
    var sqlitePath: String { (directory ?? "") + "/fanfare.db" }

    func open() throws -> Store {
        if let url { return try PostgresTokenStore(url: url) }
        return try SQLiteTokenStore(path: sqlitePath)
    }

    func close(_ store: Store) throws { try store.close() }

    /// The integer `sql` returns: through psql, or on the SQLite store's own connection (it locks the file).
    func scalar(_ sql: String, _ store: Store) throws -> Int64 {
        if let server { return Int64(try server.psql(sql, database: database)) ?? -1 }
        return try (store as? SQLiteTokenStore)?.scalar(sql: sql) ?? -1
    }

    /// Runs `sql` behind the store's back.
    func execute(_ sql: String, _ store: Store) throws {
        if let server {
            _ = try server.psql(sql, database: database)
        } else {
            try (store as? SQLiteTokenStore)?.execute(sql: sql)
        }
    }

    func remove() {
        if let server { try? server.dropDatabase(database) }
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }
}

/// Runs `body` with a fresh database of `kind`, removed afterwards.
func withDatabase<T>(_ kind: StoreKind, _ body: (StoreDatabase) throws -> T) throws -> T {
    let database = try StoreDatabase(kind)
    defer { database.remove() }
    return try body(database)
}

/// Runs `body` with a store on a fresh database of `kind` (closed and removed afterwards).
func withWaveStore<T>(_ kind: StoreKind, _ body: (StoreDatabase.Store, StoreDatabase) throws -> T) throws -> T {
    try withDatabase(kind) { database in
        let store = try database.open()
        defer { try? database.close(store) }
        return try body(store, database)
    }
}

import FanfareCore
@_exported import FanfareRegistryFixtures
import Foundation

@testable import FanfareSQLite
import FanfareStorage

/// A fresh directory under the system temporary directory; `remove()` deletes it with everything inside.
struct TemporaryDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("fanfare-registry-tests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    func remove() { try? FileManager.default.removeItem(at: url) }
}

/// Runs `body` with a store on a new database file in a temporary directory, then removes the directory.
func withStore<T>(_ body: (SQLiteTokenStore, TemporaryDirectory) throws -> T) throws -> T {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let store = try SQLiteTokenStore(path: directory.path("fanfare.db"))
    return try body(store, directory)
}

func pushToStartRegistration(
    _ number: Int, channels: [String] = ["match-1"], bundleID: String = testBundle,
    environment: APNsEnvironment = .production, createdAt: Int64 = 1_700_000_000_000
) -> TokenRegistration {
    TokenRegistration(
        token: makeToken(number), kind: .pushToStart, deviceID: "device-\(number)", attributesType: "MatchAttributes",
        bundleID: bundleID, environment: environment, channels: channels, createdAt: createdAt)
}

extension SQLiteTokenStore {
    /// Every registration of one app, keyed by token, with channel lists sorted (the store keeps no order).
    func all(
        bundleID: String = testBundle, environment: APNsEnvironment = .production
    ) throws
        -> [DeviceToken: TokenRegistration]
    {
        var result: [DeviceToken: TokenRegistration] = [:]
        try forEachRegistration(bundleID: bundleID, environment: environment) { registration in
            var registration = registration
            registration.channels.sort()
            precondition(result[registration.token] == nil, "token delivered twice")
            result[registration.token] = registration
        }
        return result
    }
}

extension TokenRegistration {
    var sortedChannels: TokenRegistration {
        var copy = self
        copy.channels = Array(Set(channels)).sorted()
        return copy
    }
}

extension SQLiteTokenStore {
    /// Undoes migrations v4 to v6 on the open file (what a Fanfare of schema v3 left: its tables and columns
    /// exactly, no later row in `grdb_migrations`), so reopening tests the upgrade from v3.
    func rewindToVersion3() throws {
        for index in ["tokens_by_device", "tokens_by_activity"] { try execute(sql: "DROP INDEX \(index)") }
        for table in [
            "broadcast_subscriptions", "subscription_channels", "token_history", "broadcast_links", "publication_parts",
        ] {
            try execute(sql: "DROP TABLE \(table)")
        }
        try execute(sql: "ALTER TABLE tokens DROP COLUMN supports_broadcast")
        for column in [
            "broadcast_channel_id", "channel_payload", "report_broadcast_channel_id", "broadcast_subscribers",
            "broadcast_requests", "broadcast_outcome", "broadcast_reason", "broadcast_priority", "broadcast_flags",
        ] {
            try execute(sql: "ALTER TABLE waves DROP COLUMN \(column)")
        }
        try execute(
            sql: """
                DELETE FROM grdb_migrations WHERE identifier LIKE 'v4:%' OR identifier LIKE 'v5:%' OR identifier LIKE 'v6:%'
                """)
    }
}

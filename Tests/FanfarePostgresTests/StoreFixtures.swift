import FanfareCore
import FanfarePostgres
import FanfareRegistry
import FanfareTestSupport
import Foundation

/// The stores the shared expectations run against.
enum StoreKind: String, CaseIterable, Sendable, CustomStringConvertible {
    case sqlite
    case postgres

    var description: String { rawValue }
}

/// Runs `body` with a fresh store of `kind`: a new SQLite file, or a new PostgreSQL server (initdb) of its own.
func withStore<T>(_ kind: StoreKind, _ body: (any TokenStore) throws -> T) throws -> T {
    switch kind {
    case .sqlite:
        let directory = NSTemporaryDirectory() + "fanfare-pg-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteTokenStore(path: directory + "/fanfare.db")
        return try body(store)
    case .postgres:
        let server = try PostgresServer()
        defer { server.stop() }
        let store = try PostgresTokenStore(url: server.url)
        defer { try? store.close() }
        return try body(store)
    }
}

/// A deterministic token: `number` big-endian in the first four bytes, then a pattern derived from it.
func makeToken(_ number: Int, byteCount: Int = 80) -> DeviceToken {
    var bytes = [UInt8](repeating: 0, count: byteCount)
    let value = UInt32(truncatingIfNeeded: number)
    bytes[0] = UInt8(truncatingIfNeeded: value >> 24)
    bytes[1] = UInt8(truncatingIfNeeded: value >> 16)
    bytes[2] = UInt8(truncatingIfNeeded: value >> 8)
    bytes[3] = UInt8(truncatingIfNeeded: value)
    for index in 4..<byteCount { bytes[index] = UInt8(truncatingIfNeeded: number &* 31 &+ index &* 7) }
    return try! DeviceToken(bytes: bytes)
}

let testBundle = "com.example.fanfare"

func updateRegistration(
    _ number: Int, channels: [String] = ["match-1"], bundleID: String = testBundle,
    environment: APNsEnvironment = .production, createdAt: Int64 = 1_700_000_000_000, lastSeenAt: Int64? = nil
) -> TokenRegistration {
    TokenRegistration(
        token: makeToken(number), kind: .update, activityID: "activity-\(number)", bundleID: bundleID,
        environment: environment, channels: channels, createdAt: createdAt, lastSeenAt: lastSeenAt)
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
    func all(bundleID: String = testBundle, environment: APNsEnvironment = .production) throws
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

// What the registry tests of both stores (FanfareSQLiteTests, FanfarePostgresTests) build their rows from:
// deterministic tokens, registrations of each kind, broadcast subscriptions, and a settable clock for the ledger.
import FanfareCore
import FanfareStorage
import Synchronization

package let testBundle = "com.example.fanfare"

/// A deterministic token: `number` big-endian in the first four bytes, then a pattern derived from it.
package func makeToken(_ number: Int, byteCount: Int = 80) -> DeviceToken {
    var bytes = [UInt8](repeating: 0, count: byteCount)
    let value = UInt32(truncatingIfNeeded: number)
    bytes[0] = UInt8(truncatingIfNeeded: value >> 24)
    bytes[1] = UInt8(truncatingIfNeeded: value >> 16)
    bytes[2] = UInt8(truncatingIfNeeded: value >> 8)
    bytes[3] = UInt8(truncatingIfNeeded: value)
    for index in 4..<byteCount { bytes[index] = UInt8(truncatingIfNeeded: number &* 31 &+ index &* 7) }
    return try! DeviceToken(bytes: bytes)
}

package func updateRegistration(
    _ number: Int, channels: [String] = ["match-1"], bundleID: String = testBundle,
    environment: APNsEnvironment = .production, createdAt: Int64 = 1_700_000_000_000, lastSeenAt: Int64? = nil
) -> TokenRegistration {
    TokenRegistration(
        token: makeToken(number), kind: .update, activityID: "activity-\(number)", bundleID: bundleID,
        environment: environment, channels: channels, createdAt: createdAt, lastSeenAt: lastSeenAt)
}

/// A settable wall clock (UNIX ms) for a store's ledger history.
package final class LedgerClock: Sendable {
    package let now = Atomic<Int64>(1_800_000_000_000)
    package init() {}
    package func advance(by milliseconds: Int64) { now.add(milliseconds, ordering: .relaxed) }
    package var read: @Sendable () -> Int64 { { [self] in now.load(ordering: .relaxed) } }
}

/// The ledger and replacement tests' rows: activities of devices, on "match-1" unless told.
package enum LedgerFixture {
    package static func pushToStart(
        _ number: Int, device: String, type: String = "MatchAttributes", broadcast: Bool = false
    ) -> TokenRegistration {
        TokenRegistration(
            token: makeToken(number), kind: .pushToStart, deviceID: device, attributesType: type,
            bundleID: testBundle, environment: .production, supportsBroadcast: broadcast, channels: ["match-1"],
            createdAt: 1_700_000_000_000)
    }

    package static func update(
        _ number: Int, activity: String, device: String? = nil, channels: [String] = ["match-1"]
    ) -> TokenRegistration {
        TokenRegistration(
            token: makeToken(number), kind: .update, activityID: activity, deviceID: device,
            attributesType: device == nil ? nil : "MatchAttributes", bundleID: testBundle, environment: .production,
            channels: channels, createdAt: 1_700_000_000_000)
    }

    package static func subscription(
        _ activity: String, channels: [String] = ["match-1"], device: String? = nil,
        createdAt: Int64 = 1_700_000_000_000
    ) -> BroadcastSubscription {
        BroadcastSubscription(
            activityID: activity, deviceID: device, attributesType: device == nil ? nil : "MatchAttributes",
            bundleID: testBundle, environment: .production, channels: channels, createdAt: createdAt)
    }
}

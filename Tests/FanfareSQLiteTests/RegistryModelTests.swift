import FanfareCore
import FanfareTestSupport
import Foundation
import Testing

@testable import FanfareSQLite
import FanfareStorage

/// Random operations against the store and against a plain dictionary that states the protocol's rules; after
/// every step both must agree. Covers what the targeted tests cannot enumerate: batches across the writer's
/// chunks, the same token several times in a batch, hash-index bookkeeping after deletes, and a reopen.
@Suite("SQLiteTokenStore: agrees with a reference model", .ownThread)
struct RegistryModelTests {
    /// The protocol's rules, applied one registration at a time.
    struct Model {
        var registrations: [DeviceToken: TokenRegistration] = [:]

        mutating func register(_ batch: [TokenRegistration]) {
            for registration in batch {
                var stored = registration.sortedChannels
                if let existing = registrations[registration.token] {
                    stored.createdAt = existing.createdAt
                    stored.lastSeenAt = max(existing.lastSeenAt, registration.lastSeenAt)
                }
                registrations[registration.token] = stored
            }
            // A push-to-start token replaces the others of its (app, device, attributes type): per key, the batch's
            // last one, keys in the order of their winners.
            struct Key: Hashable {
                var bundleID: String, environment: APNsEnvironment, deviceID: String?, attributesType: String?
            }
            func key(_ registration: TokenRegistration) -> Key {
                Key(
                    bundleID: registration.bundleID, environment: registration.environment,
                    deviceID: registration.deviceID, attributesType: registration.attributesType)
            }
            var latest: [Key: Int] = [:]
            for (index, registration) in batch.enumerated() where registration.kind == .pushToStart {
                latest[key(registration)] = index
            }
            for (replacing, index) in latest.sorted(by: { $0.value < $1.value }) {
                let winner = batch[index].token
                for (token, stored) in registrations
                where stored.kind == .pushToStart && token != winner && key(stored) == replacing {
                    registrations[token] = nil
                }
            }
        }

        mutating func unregister(_ tokens: [DeviceToken]) -> Int {
            var removed = 0
            for token in tokens where registrations.removeValue(forKey: token) != nil { removed += 1 }
            return removed
        }

        mutating func invalidate(_ token: DeviceToken, _ invalidSince: Int64?) -> Bool {
            guard let stored = registrations[token] else { return false }
            if let invalidSince, stored.lastSeenAt > invalidSince { return false }
            registrations[token] = nil
            return true
        }

        mutating func retire(where shouldRetire: (TokenRegistration) -> Bool) -> Set<DeviceToken> {
            let retired = registrations.values.filter { $0.kind == .update && shouldRetire($0) }.map(\.token)
            for token in retired { registrations[token] = nil }
            return Set(retired)
        }

        func registrations(_ bundleID: String, _ environment: APNsEnvironment) -> [DeviceToken: TokenRegistration] {
            registrations.filter { $0.value.bundleID == bundleID && $0.value.environment == environment }
        }
    }

    static let apps: [(String, APNsEnvironment)] = [
        ("com.example.a", .production), ("com.example.a", .sandbox), ("com.example.b", .production),
    ]
    static let channels = (0..<6).map { "match-\($0)" }

    static func randomRegistration(_ generator: inout SplitMix64) -> TokenRegistration {
        let number = Int.random(in: 0..<400, using: &generator)
        let (bundleID, environment) = apps.randomElement(using: &generator)!
        let channelCount = Int.random(in: 1...3, using: &generator)
        let channels = (0..<channelCount).map { _ in Self.channels.randomElement(using: &generator)! }
        let createdAt = Int64.random(in: 1_000...9_000, using: &generator)
        let lastSeenAt = createdAt + Int64.random(in: 0...2_000, using: &generator)
        // A token keeps its kind (real tokens are of one kind); its other fields vary between registrations.
        if number.isMultiple(of: 4) {
            return TokenRegistration(
                token: makeToken(number), kind: .pushToStart, deviceID: "device-\(number % 7)",
                attributesType: Bool.random(using: &generator) ? "MatchAttributes" : "RaceAttributes",
                bundleID: bundleID, environment: environment, frequentUpdates: Bool.random(using: &generator),
                channels: channels, createdAt: createdAt, lastSeenAt: lastSeenAt)
        }
        return TokenRegistration(
            token: makeToken(number), kind: .update, activityID: "activity-\(Int.random(in: 0..<3, using: &generator))",
            bundleID: bundleID, environment: environment, frequentUpdates: Bool.random(using: &generator),
            channels: channels, createdAt: createdAt, lastSeenAt: lastSeenAt)
    }

    static func expectAgreement(_ store: SQLiteTokenStore, _ model: Model, step: Int) throws {
        #expect(try store.count() == model.registrations.count, "count after step \(step)")
        #expect(try store.rowCount() == model.registrations.count, "rows after step \(step)")
        for (bundleID, environment) in apps {
            let stored = try store.all(bundleID: bundleID, environment: environment)
            let expected = model.registrations(bundleID, environment)
            #expect(stored == expected, "registrations of \(bundleID) \(environment) after step \(step)")
        }
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func randomOperationsMatchTheModel(seed: UInt64) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("fanfare.db")
        var store: SQLiteTokenStore? = try SQLiteTokenStore(path: path)
        var model = Model()
        var generator = SplitMix64(seed: seed)

        for step in 0..<150 {
            let current = store!
            switch Int.random(in: 0..<100, using: &generator) {
            case 0..<45:
                let size = Int.random(in: 1...100, using: &generator)
                let batch = (0..<size).map { _ in Self.randomRegistration(&generator) }
                try current.register(batch)
                model.register(batch)
            case 45..<60:
                let tokens = (0..<Int.random(in: 1...20, using: &generator)).map { _ in
                    makeToken(Int.random(in: 0..<450, using: &generator))
                }
                #expect(try current.unregister(tokens) == model.unregister(tokens), "unregister at step \(step)")
            case 60..<75:
                let token = makeToken(Int.random(in: 0..<450, using: &generator))
                let invalidSince: Int64? =
                    Bool.random(using: &generator) ? nil : Int64.random(in: 1_000...11_000, using: &generator)
                #expect(
                    try current.invalidate(token, invalidSince: invalidSince) == model.invalidate(token, invalidSince),
                    "invalidate at step \(step)")
            case 75..<85:
                let channel = Self.channels.randomElement(using: &generator)!
                let retired = try current.retireUpdateTokens(following: channel)
                #expect(Set(retired) == model.retire { $0.channels.contains(channel) }, "retire \(channel) at \(step)")
                #expect(retired.count == Set(retired).count)
            case 85..<95:
                let cutoff = Int64.random(in: 1_000...9_000, using: &generator)
                let retired = try current.retireUpdateTokens(createdBefore: cutoff)
                #expect(Set(retired) == model.retire { $0.createdAt < cutoff }, "retire before \(cutoff) at \(step)")
            default:
                // Reopen: the token index and name caches are rebuilt from the file.
                try current.close()
                store = nil
                store = try SQLiteTokenStore(path: path)
            }
            try Self.expectAgreement(store!, model, step: step)
        }
    }
}

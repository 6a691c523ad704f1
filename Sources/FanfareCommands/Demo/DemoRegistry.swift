import FanfareCore
import FanfareFanout
import FanfareStorage
import Foundation

/// Fills a fresh registry with demo tokens: 80-byte tokens (like real Live Activity tokens), split over the
/// matches with a few push-to-start tokens per match and some activities with frequent updates. A share of the
/// activities are iOS 18+ ones started with the match's broadcast channel: registered as broadcast
/// subscriptions (no token), and their devices' push-to-start tokens say they support broadcast.
struct DemoRegistry {
    let bundleID: String
    let channels: [String]
    /// Share of tokens per channel (sums to 1).
    let weights: [Double]
    let pushToStartShare: Double
    let frequentShare: Double
    /// Share of the activities subscribed to their match's broadcast channel (0: a per-token audience only).
    var broadcastShare = 0.0

    /// Registers `total` activities (tokens and broadcast subscriptions) in batches of 10,000, printing progress;
    /// returns registrations per second and how many were broadcast subscriptions.
    func fill(
        _ store: TokenStore, total: Int, progress: (Int, Double) -> Void
    ) throws -> (rate: Double, subscriptions: Int) {
        var random = SplitMix64(seed: 0x00FA_FA4E)
        let batchSize = 10_000
        let started = Date()
        var done = 0
        var batch: [TokenRegistration] = []
        batch.reserveCapacity(batchSize)
        var subscriptions: [BroadcastSubscription] = []
        var subscribed = 0
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        while done < total {
            batch.removeAll(keepingCapacity: true)
            subscriptions.removeAll(keepingCapacity: true)
            for index in done..<min(total, done + batchSize) {
                var bytes = [UInt8](repeating: 0, count: 80)
                for offset in stride(from: 0, to: 80, by: 8) {
                    withUnsafeBytes(of: random.next()) { word in
                        for byte in 0..<8 { bytes[offset + byte] = word[byte] }
                    }
                }
                let channel = pick(random.nextUnit())
                let pushToStart = random.nextUnit() < pushToStartShare
                let iOS18 = random.nextUnit() < broadcastShare
                if iOS18 && !pushToStart {
                    subscriptions.append(
                        BroadcastSubscription(
                            activityID: "activity-\(index)", deviceID: "device-\(index)",
                            attributesType: "MatchAttributes",
                            bundleID: bundleID, environment: .production, channels: [channel], createdAt: now))
                    continue
                }
                batch.append(
                    TokenRegistration(
                        token: try DeviceToken(bytes: bytes), kind: pushToStart ? .pushToStart : .update,
                        activityID: pushToStart ? nil : "activity-\(index)",
                        deviceID: pushToStart ? "device-\(index)" : nil,
                        attributesType: pushToStart ? "MatchAttributes" : nil, bundleID: bundleID,
                        environment: .production,
                        frequentUpdates: !pushToStart && random.nextUnit() < frequentShare,
                        supportsBroadcast: pushToStart && iOS18, channels: [channel], createdAt: now))
            }
            try store.register(batch, subscriptions: subscriptions)
            done += batch.count + subscriptions.count
            subscribed += subscriptions.count
            progress(done, Double(done) / max(1e-9, Date().timeIntervalSince(started)))
        }
        return (Double(total) / max(1e-9, Date().timeIntervalSince(started)), subscribed)
    }

    private func pick(_ unit: Double) -> String {
        var sum = 0.0
        for (index, weight) in weights.enumerated() {
            sum += weight
            if unit < sum { return channels[index] }
        }
        return channels[channels.count - 1]
    }
}

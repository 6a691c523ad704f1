import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareSQLite
import FanfareStorage
import FanfareSimulator
import Foundation
import Synchronization

/// `fanfare demo --scenario soak` (perf/soak.sh): the engine against the in-process simulator for a long
/// time, the way a service runs it. Every second a share of the tokens is replaced (unregistered, new ones
/// registered on the newest channel, plus replacements for the ones APNs called dead) and every channel with
/// tokens gets an update; a new channel opens every 20 s and old ones empty out and are forgotten. The
/// process's RSS is sampled; after the warm-up it must stay flat.
struct SoakRun {
    let tokens: Int
    let minutes: Double
    let churn: Double
    let sampleSeconds: Int
    let warmupMinutes: Double
    let bundleID: String

    /// A new channel this often; tokens registered meanwhile follow it.
    static let channelSeconds = 20
    static let initialChannels = 5

    /// Tokens APNs called dead (removed by the engine), and how many died since the last second.
    typealias DeadTokens = Mutex<(tokens: Set<DeviceToken>, new: Int)>

    /// Runs; returns whether every retained wave was complete and balanced before shutdown.
    func run(
        store: SQLiteTokenStore, client: ClientConfiguration, minimumInterval: Double, simulator: APNsSimulator
    ) throws -> Bool {
        let started = Date()
        var population = Population(bundleID: bundleID)
        for channel in 0..<Self.initialChannels {
            try store.register(try population.registrations(tokens / Self.initialChannels, channel: channel))
        }

        var configuration = FanoutConfiguration(client: client, bundleID: bundleID)
        configuration.minimumInterval = minimumInterval > 0 ? .milliseconds(Int64(minimumInterval * 1000)) : nil
        configuration.maintenanceInterval = .seconds(10)
        // Tokens APNs called dead (removed by the engine): replaced at once, skipped when their turn to leave comes.
        let dead = DeadTokens(([], 0))
        let engine = try FanoutEngine(
            configuration: configuration, store: store,
            onInvalidation: { report in
                guard report.removed else { return }
                dead.withLock {
                    $0.tokens.insert(report.token)
                    $0.new += 1
                }
            })
        print(
            "soak        \(WaveTable.group(tokens)) tokens, \(Int(churn * 100)) % replaced per second, a wave per channel every "
                + "second, a new channel every \(Self.channelSeconds) s; \(Int(minutes)) min, RSS every \(sampleSeconds) s, "
                + "warm-up \(String(format: "%.1f", warmupMinutes)) min")

        let duration = minutes * 60
        var tally = Tally(nextSample: Double(sampleSeconds))
        var second = 0
        var interrupted = false
        while true {
            // Sleep to the next whole second of the run.
            second += 1
            let wake = Double(second) - Date().timeIntervalSince(started)
            if wake > 0, SignalWaiter.wait(seconds: wake) {
                interrupted = true
                break
            }
            let elapsed = Date().timeIntervalSince(started)
            if elapsed >= duration { break }
            try replaceTokens(of: &population, second: second, engine: engine, dead: dead)
            tally.refused += try publishWaves(to: population.channelMembers, second: second, engine: engine)
            population.channelMembers = population.channelMembers.filter { $0.value > 0 }
            if elapsed >= tally.nextSample { sample(engine, at: elapsed, into: &tally) }
        }

        let retainedBalanced = Self.settledAndBalanced(engine)
        let balanced = !interrupted && tally.unbalanced == 0 && retainedBalanced
        let statistics = engine.statistics
        let seconds = Date().timeIntervalSince(started)
        engine.shutdown()
        printMemoryVerdict(tally.samples)
        Self.printTotals(statistics, seconds: seconds, balanced: balanced, interrupted: interrupted)
        print("")
        print("simulator saw:")
        print(simulator.statistics().summary())
        return balanced || interrupted
    }

    /// The registered tokens, oldest first (those before `liveHead` have left), and how many follow each channel.
    private struct Population {
        let bundleID: String
        var random = SplitMix64(seed: 0x50A4)
        var live: [(token: DeviceToken, channel: Int)] = []
        var liveHead = 0
        var channelMembers: [Int: Int] = [:]

        init(bundleID: String) { self.bundleID = bundleID }

        mutating func newToken() throws -> DeviceToken {
            var bytes = [UInt8](repeating: 0, count: 80)
            for offset in stride(from: 0, to: 80, by: 8) {
                withUnsafeBytes(of: random.next()) { word in for byte in 0..<8 { bytes[offset + byte] = word[byte] } }
            }
            return try DeviceToken(bytes: bytes)
        }

        /// `count` new tokens following `channel`, counted as live.
        mutating func registrations(_ count: Int, channel: Int) throws -> [TokenRegistration] {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            return try (0..<count).map { _ in
                let token = try newToken()
                live.append((token, channel))
                channelMembers[channel, default: 0] += 1
                return TokenRegistration(
                    token: token, kind: .update, activityID: "activity-\(live.count)", bundleID: bundleID,
                    environment: .production, frequentUpdates: false, channels: ["soak-\(channel)"], createdAt: now)
            }
        }
    }

    /// Churn: the oldest tokens go and as many new ones follow the newest channel, plus one for each token APNs
    /// called dead since the last second: the registered population stays at `tokens`.
    private func replaceTokens(
        of population: inout Population, second: Int, engine: FanoutEngine, dead: borrowing DeadTokens
    ) throws {
        let replace = Int(Double(tokens) * churn)
        let leaving = population.live[population.liveHead..<min(population.live.count, population.liveHead + replace)]
        population.liveHead += leaving.count
        for member in leaving { population.channelMembers[member.channel, default: 0] -= 1 }
        let (alreadyDead, died) = dead.withLock { dead -> (Int, Int) in
            var already = 0
            for member in leaving where dead.tokens.remove(member.token) != nil { already += 1 }
            defer { dead.new = 0 }
            return (already, dead.new)
        }
        if !leaving.isEmpty { _ = try engine.unregister(leaving.map(\.token)) }
        if population.liveHead > tokens / 4 {  // often, so this list itself stays flat
            population.live.removeFirst(population.liveHead)
            population.liveHead = 0
        }
        let channel = Self.initialChannels + second / Self.channelSeconds
        try engine.register(try population.registrations(leaving.count - alreadyDead + died, channel: channel))
    }

    /// A wave per channel that has tokens; returns how many the engine refused.
    private func publishWaves(to channelMembers: [Int: Int], second: Int, engine: FanoutEngine) throws -> Int {
        var refused = 0
        let timestamp = Int64(Date().timeIntervalSince1970)
        for (channel, members) in channelMembers where members > 0 {
            var content = LiveActivityContent(event: .update, timestamp: timestamp)
            content.contentState = try RawJSON(validating: #"{"second":\#(second),"channel":\#(channel)}"#)
            do {
                _ = try engine.publish(ChannelUpdate(channel: "soak-\(channel)", content: content, priority: .normal))
            } catch {
                refused += 1
            }
        }
        return refused
    }

    /// What the run measured: RSS samples, and the counts the sample lines show.
    private struct Tally {
        var samples: [(seconds: Double, rss: Double)] = []
        var nextSample: Double
        var lastCompleted = 0
        var refused = 0
        var unbalanced = 0
    }

    /// Samples RSS, and prints it with the push rate since the last sample and the engine's counts.
    private func sample(_ engine: FanoutEngine, at elapsed: Double, into tally: inout Tally) {
        tally.nextSample += Double(sampleSeconds)
        let rss = Self.residentMegabytes()
        tally.samples.append((elapsed, rss))
        let statistics = engine.statistics
        let completed = statistics.client.completed
        let rate = Double(completed - tally.lastCompleted) / Double(sampleSeconds)
        tally.lastCompleted = completed
        let waves = engine.waves
        tally.unbalanced += waves.filter { $0.isComplete && $0.report.accounted != $0.report.targeted }.count
        print(
            String(
                format:
                    "%6.0f s  rss %7.1f MB  pushes/s %@  channels %d  waves kept %d  unfinished %d  invalidated %@  refused %d",
                elapsed, rss, WaveTable.group(Int(rate)), statistics.channelsInUse, waves.count,
                statistics.unfinishedWaves, WaveTable.group(statistics.invalidationsPersisted), tally.refused))
        fflush(nil)
    }

    /// Waits up to a minute for the waves to complete, then whether every retained one is complete and balanced.
    /// Checked while the engine still runs: shutdown would close open outcomes as Shutdown.
    private static func settledAndBalanced(_ engine: FanoutEngine) -> Bool {
        let deadline = Date().addingTimeInterval(60)
        while engine.waves.contains(where: { !$0.isComplete }) && Date() < deadline { usleep(10_000) }
        let retained = engine.waves.map(\.report)
        return retained.allSatisfy { $0.isComplete && $0.accounted == $0.targeted }
    }

    private static func printTotals(
        _ statistics: FanoutStatistics, seconds: Double, balanced: Bool, interrupted: Bool
    ) {
        print(
            String(
                format:
                    "soak result %@ pushes in %.0f s (%@ pushes/s); %@ tokens invalidated and replaced; every retained wave balanced: %@",
                WaveTable.group(statistics.client.completed), seconds,
                WaveTable.group(Int(Double(statistics.client.completed) / max(seconds, 1))),
                WaveTable.group(statistics.invalidationsPersisted),
                interrupted ? "not checked (interrupted)" : balanced ? "yes" : "NO"))
        if let error = statistics.lastRegistryError { print("registry error: \(error)") }
    }

    /// Memory after the warm-up: the first samples' median is the baseline, the last ones' the end.
    private func printMemoryVerdict(_ samples: [(seconds: Double, rss: Double)]) {
        let warmup = warmupMinutes * 60
        let afterWarmup = samples.filter { $0.seconds >= warmup }
        if let baseline = Self.median(afterWarmup.prefix(3).map(\.rss)),
            let end = Self.median(afterWarmup.suffix(3).map(\.rss)),
            let peak = afterWarmup.map(\.rss).max(), afterWarmup.count >= 6
        {
            print(
                String(
                    format: "warm-up     ends at %.0f s: rss %.1f MB (median of the first 3 samples after it)", warmup,
                    baseline))
            print(
                String(
                    format:
                        "soak result rss %.1f MB at the end (median of the last 3 samples): growth %+.1f %% after warm-up; peak %.1f MB (%+.1f %%)",
                    end, (end / baseline - 1) * 100, peak, (peak / baseline - 1) * 100))
        } else {
            print("soak result too short to judge memory: \(afterWarmup.count) samples after the warm-up (need 6)")
        }
    }

    /// This process's resident set (MB), from /proc/self/statm.
    static func residentMegabytes() -> Double {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Double(fields[1]) else { return 0 }
        return pages * Double(sysconf(Int32(_SC_PAGESIZE))) / 1_048_576
    }

    static func median(_ values: [Double]) -> Double? {
        guard !values.isEmpty else { return nil }
        return values.sorted()[values.count / 2]
    }
}

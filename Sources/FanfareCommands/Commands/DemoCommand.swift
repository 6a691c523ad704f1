import ArgumentParser
import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareIO
import FanfareSQLite
import FanfareStorage
import FanfareSimulator
import FanfareTLS
import Foundation

/// `fanfare demo`: the README's main job on embedded defaults. Starts the APNs simulator on loopback,
/// registers a million tokens across a few matches in a fresh SQLite registry, plays a short match through
/// the fan-out engine, and prints what every wave did.
public struct DemoCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract:
            "Play a match to a million Live Activity tokens through the fan-out engine and the built-in APNs simulator.",
        discussion: """
            Everything is local: the simulator listens on 127.0.0.1 with realistic latency and a few injected \
            failures, the registry is a fresh SQLite file (also the engine's wave store: waves are durable and \
            checkpointed as they run, unless --no-checkpoints), and the engine pushes over real TLS + HTTP/2. \
            `--scenario wave` sends one update to every token instead (the fan-out benchmark); `--scenario soak` \
            runs for --minutes with token churn and a wave per channel every second, sampling the process's RSS \
            (perf/soak.sh).
            """
    )

    enum Scenario: String, ExpressibleByArgument, CaseIterable {
        case match, wave, soak
    }

    @Option(
        help:
            "What to play: match (kick-off, goals, a burst of overlapping goals, full time), wave (one update to every token) or soak (a long run with churn, sampling memory)."
    )
    var scenario: Scenario = .match

    @Option(help: "Tokens to register (80 bytes each); default 1,000,000 (soak: 50,000, one push each per second).")
    var tokens: Int?

    @Option(help: "soak: minutes to run.")
    var minutes: Double = 30

    @Option(help: "soak: share of the tokens replaced every second (unregistered, new ones registered).")
    var churn: Double = 0.01

    @Option(help: "soak: seconds between memory samples.")
    var sampleSeconds: Int = 10

    @Option(help: "soak: minutes of warm-up before the memory baseline (default: a sixth of the run, at least 1).")
    var warmupMinutes: Double?

    @Option(help: "Matches (channels) the tokens follow.")
    var matches: Int = 3

    @Option(help: "The registry file; it is deleted and created afresh.")
    var database: String = "fanfare-demo.db"

    @Option(help: "Engine worker threads (shards).")
    var workers: Int = 1

    @OptionGroup var connectionCount: ConnectionCountOptions

    @Option(help: "Streams in flight per connection (the simulator allows 1000).")
    var streams: Int = 1000

    @Option(help: "Simulated APNs latency (e.g. 20ms, uniform:10ms-30ms, longtail:20ms,200ms).")
    var latency: String = "uniform:10ms-30ms"

    @Option(help: "Inject failures: Reason:probability (repeatable).")
    var fault: [String] = ["Unregistered:0.0005", "TooManyRequests:0.001", "InternalServerError:0.0005"]

    @Option(help: "Minimum seconds between two pushes to one activity (0 turns it off).")
    var minimumInterval: Double = 1

    @Option(
        help:
            "match: share of the activities started with their match's broadcast channel (iOS 18+): they get each update through one broadcast, the rest per token (0 plays per-token only)."
    )
    var broadcastShare: Double = 0.4

    @OptionGroup var checkpoints: CheckpointOptions

    public init() {}

    public func validate() throws {
        guard tokenCount > 0, matches > 0, workers > 0, streams > 0 else {
            throw ValidationError("--tokens, --matches, --workers and --streams must be positive")
        }
        guard minimumInterval >= 0 else { throw ValidationError("--minimum-interval must be 0 or more") }
        guard broadcastShare >= 0 && broadcastShare <= 1 else {
            throw ValidationError("--broadcast-share must be in 0...1")
        }
        guard minutes > 0, minutes <= 7 * 24 * 60 else { throw ValidationError("--minutes must be in (0, 10080]") }
        guard churn >= 0, churn <= 0.5 else { throw ValidationError("--churn must be in 0...0.5") }
        guard sampleSeconds >= 1 else { throw ValidationError("--sample-seconds must be at least 1") }
        if let warmupMinutes, !(warmupMinutes >= 0 && warmupMinutes < minutes) {
            throw ValidationError("--warmup-minutes must be in 0..<--minutes")
        }
        do { _ = try checkpoints.configuration() } catch { throw ValidationError(error.description) }
    }

    var tokenCount: Int { tokens ?? (scenario == .soak ? 50_000 : 1_000_000) }

    public func run() throws {
        let tokens = tokenCount
        SignalWaiter.blockTerminationSignals()
        let phases = DemoPhases()
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("fanfare-demo-\(getpid())").path
        defer { try? FileManager.default.removeItem(atPath: state) }
        let bundleID = "com.example.fanfare"
        let cpus = CPUAffinity.cpuCount
        let channels = scenario == .wave ? ["final"] : (1...matches).map { "match-\($0)" }

        // 1. The simulator on its own core, with a fresh CA, server certificate and provider key.
        let simulator = try startSimulator(state: state, bundleID: bundleID, cpus: cpus)
        defer { simulator.shutdown() }
        let port = simulator.boundAddress.port
        let managementPort = simulator.managementAddress?.port ?? 0
        let planned = scenario == .match && broadcastShare > 0
        phases.end("simulator")

        // 2. A fresh registry with the demo's tokens.
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: database + suffix) }
        let store = try SQLiteTokenStore(path: database)
        if scenario == .soak {
            let client = try clientConfiguration(state: state, port: port, bundleID: bundleID, cpus: cpus)
            return try runSoak(tokens, bundleID: bundleID, store: store, client: client, simulator: simulator)
        }
        let progress = ProgressLine()
        try register(tokens, following: channels, bundleID: bundleID, planned: planned, into: store, progress: progress)
        phases.end("registration")

        // 3. The engine: loads the registry into its shards and connects to the simulator.
        let client = try clientConfiguration(state: state, port: port, bundleID: bundleID, cpus: cpus)
        let configuration = try engineConfiguration(
            client: client, bundleID: bundleID, managementPort: planned ? managementPort : nil)
        let invalidated = InvalidationCounter()
        let engine = try startEngine(
            configuration, store: store, invalidated: invalidated, progress: progress, phases: phases)
        if planned {
            try createBroadcastChannels(channels, on: engine)
            phases.end("broadcast channels")
        }

        // 4. Play.
        let script =
            scenario == .wave
            ? MatchScript.singleWave(channel: channels[0]) : MatchScript.match(channels: channels, dismissAfter: 2)
        let play = play(script, on: engine, progress: progress)
        phases.end("play")
        progress.finish(
            String(
                format: "%6.1fs  %@", play.seconds, play.interrupted ? "interrupted: stopping" : "every wave complete"))
        // The balance is checked while the engine runs: after `shutdown` every open outcome has been counted as
        // Shutdown, so a wave that lost a token would look balanced.
        let beforeShutdown = engine.waves.map(\.report)
        let balanced = !play.interrupted && beforeShutdown.allSatisfy { $0.isComplete && $0.accounted == $0.targeted }
        let statistics = wrapUp(engine, interrupted: play.interrupted, progress: progress, phases: phases)
        print("")
        print(WaveTable.render(engine.waves.map(\.report), labels: play.labels))
        print("")
        try printTotals(
            statistics, play: play, balanced: balanced, invalidated: invalidated, store: store, simulator: simulator)
        print("")
        print(phases.summary)
        if !balanced && !play.interrupted { throw ExitCode(1) }
    }

    /// `--scenario soak` (perf/soak.sh): fails when a retained wave did not balance.
    private func runSoak(
        _ tokens: Int, bundleID: String, store: SQLiteTokenStore, client: ClientConfiguration,
        simulator: APNsSimulator
    ) throws {
        let soak = SoakRun(
            tokens: tokens, minutes: minutes, churn: churn, sampleSeconds: sampleSeconds,
            warmupMinutes: warmupMinutes ?? max(1, minutes / 6), bundleID: bundleID)
        let balanced = try soak.run(
            store: store, client: client, minimumInterval: minimumInterval, simulator: simulator)
        if !balanced { throw ExitCode(1) }
    }

    /// The in-process simulator, started through `fanfare simulate`'s options on loopback.
    private func startSimulator(state: String, bundleID: String, cpus: Int) throws -> APNsSimulator {
        // The soak keeps its injected faults low: it measures memory over a long run, not failure handling.
        let faults =
            scenario == .soak ? ["Unregistered:0.0002", "TooManyRequests:0.0005", "InternalServerError:0.0002"] : fault
        let simulate = try SimulateCommand.parse(
            [
                "--listen", "127.0.0.1:0", "--state-dir", state, "--latency", latency, "--cpus",
                cpus > 1 ? "\(cpus - 1)" : "0",
                "--bundle-id", bundleID, "--management-port", "0",
            ] + (scenario == .wave ? [] : faults.flatMap { ["--fault", $0] }))
        let simulator = try simulate.start()
        print(
            "simulator   https://127.0.0.1:\(simulator.boundAddress.port)  latency \(latency)\(scenario == .wave ? "" : "  faults \(faults.joined(separator: " "))")"
        )
        return simulator
    }

    /// The match's (or wave's) activities, spread over the channels by `weights`, into the fresh registry.
    private func register(
        _ tokens: Int, following channels: [String], bundleID: String, planned: Bool, into store: SQLiteTokenStore,
        progress: ProgressLine
    ) throws {
        let registry = DemoRegistry(
            bundleID: bundleID, channels: channels, weights: Self.weights(channels.count),
            pushToStartShare: scenario == .wave ? 0 : 0.1, frequentShare: 0.3,
            broadcastShare: planned ? broadcastShare : 0)
        let (rate, subscriptions) = try registry.fill(store, total: tokens) { done, rate in
            progress.update(
                "registering  \(WaveTable.group(done))/\(WaveTable.group(tokens)) activities  \(WaveTable.group(Int(rate)))/s"
            )
        }
        progress.finish(
            "registered   \(WaveTable.group(tokens - subscriptions)) tokens"
                + (subscriptions > 0
                    ? " and \(WaveTable.group(subscriptions)) broadcast subscriptions (iOS 18+ activities)" : "")
                + " in \(database) at \(WaveTable.group(Int(rate))) registrations/s (durable, WAL + fsync)")
    }

    /// `managementPort`: the simulator's channel management, when the audience planner plays (nil: it does not).
    private func engineConfiguration(
        client: ClientConfiguration, bundleID: String, managementPort: UInt16?
    ) throws -> FanoutConfiguration {
        var configuration = FanoutConfiguration(client: client, bundleID: bundleID)
        configuration.minimumInterval = minimumInterval > 0 ? .milliseconds(Int64(minimumInterval * 1000)) : nil
        configuration.maintenanceInterval = .seconds(1)
        configuration.checkpoints = try checkpoints.configuration()
        if let managementPort {
            configuration.channelManagement = ChannelManagementConfiguration(
                host: "127.0.0.1", port: managementPort, tls: client.tls, providerTokens: client.providerTokens,
                bundleID: bundleID)
        }
        return configuration
    }

    /// The engine, loaded from the registry (the wave store too), with what loading took and how durable it is.
    private func startEngine(
        _ configuration: FanoutConfiguration, store: SQLiteTokenStore, invalidated: InvalidationCounter,
        progress: ProgressLine, phases: DemoPhases
    ) throws -> FanoutEngine {
        // Reading a million rows into the shards takes seconds: say so before, not only after.
        progress.begin("engine      loading \(database) into \(workers) shard(s)")
        let engine = try FanoutEngine(
            configuration: configuration, store: store, waveStore: store, onInvalidation: { invalidated.add($0) })
        let loadSeconds = phases.end("engine load")
        let footprint = engine.shardFootprint
        let loaded = footprint.reduce(0) { $0 + $1.tokens }
        let bytes = footprint.reduce(0) { $0 + $1.bytes }
        progress.finish(
            String(
                format: "engine      loaded %@ tokens into %d shard(s) in %.2f s, %.0f bytes of shard memory per token",
                WaveTable.group(loaded), workers, loadSeconds, Double(bytes) / Double(max(1, loaded))))
        let checkpointing = configuration.checkpoints
        print(
            "durable     waves saved in \(database); "
                + (checkpointing.isEnabled
                    ? "checkpoints on: every \(checkpointing.interval) or \(WaveTable.group(checkpointing.pushes)) pushes, "
                        + "window \(WaveTable.group(checkpointing.window))"
                    : "checkpoints off"))
        return engine
    }

    /// The audience planner: every match gets an APNs broadcast channel (no message stored: a score changes
    /// often), created on the simulator's management port; Fanfare deletes it after full time.
    private func createBroadcastChannels(_ channels: [String], on engine: FanoutEngine) throws {
        for channel in channels {
            let link = try Self.blocking {
                try await engine.createBroadcastChannel(for: channel, storagePolicy: .noMessageStored)
            }
            let subscribers = try engine.broadcastSubscribers(of: channel)
            print(
                "broadcast   \(channel) → APNs channel \(link.channelID): \(WaveTable.group(subscribers)) "
                    + "subscribed activities get one broadcast per update, the rest per token")
        }
    }

    /// What playing the script left: each wave's label, how long it took, and whether a signal cut it short.
    struct PlayOutcome {
        var labels: [UInt64: String] = [:]
        var seconds = 0.0
        var interrupted = false
    }

    /// Publishes each step of the script when its time comes, showing the waves' progress, until every wave is
    /// complete or a termination signal arrives.
    private func play(_ script: MatchScript, on engine: FanoutEngine, progress: ProgressLine) -> PlayOutcome {
        var outcome = PlayOutcome()
        let playStarted = Date()
        var nextStep = 0
        var rate = PushRate()
        while true {
            let elapsed = Date().timeIntervalSince(playStarted)
            while nextStep < script.steps.count && script.steps[nextStep].at <= elapsed {
                let step = script.steps[nextStep]
                nextStep += 1
                do {
                    let wave = try engine.publish(try step.make(Int64(Date().timeIntervalSince1970)))
                    outcome.labels[wave.id] = step.label
                    progress.finish(
                        String(format: "%6.1fs  wave %d  %@: %@", elapsed, Int(wave.id), step.channel, step.label))
                } catch {
                    progress.finish("\(step.channel): \(step.label) refused: \(error)")
                }
            }
            let waves = engine.waves
            showProgress(
                of: waves.map(\.report), steps: script.steps.count, engine: engine, elapsed: elapsed, rate: &rate,
                progress: progress)
            if nextStep == script.steps.count && waves.allSatisfy(\.isComplete) { break }
            if SignalWaiter.poll() {
                outcome.interrupted = true
                break
            }
            usleep(50_000)
        }
        outcome.seconds = Date().timeIntervalSince(playStarted)
        return outcome
    }

    /// The push rate shown while playing, measured over at least half a second.
    struct PushRate {
        var lastCompleted = 0
        var lastSample = Date()
        var perSecond = 0.0
    }

    private func showProgress(
        of reports: [WaveReport], steps: Int, engine: FanoutEngine, elapsed: Double, rate: inout PushRate,
        progress: ProgressLine
    ) {
        let stats = engine.statistics.client
        let now = Date()
        if now.timeIntervalSince(rate.lastSample) >= 0.5 {
            rate.perSecond = Double(stats.completed - rate.lastCompleted) / now.timeIntervalSince(rate.lastSample)
            rate.lastCompleted = stats.completed
            rate.lastSample = now
        }
        progress.update(
            String(
                format:
                    "%6.1fs  waves done %d/%d  delivered %@  superseded %@  in flight %@  %@ pushes/s  connections %d",
                elapsed, reports.filter(\.isComplete).count, steps,
                WaveTable.group(reports.reduce(0) { $0 + $1.delivered }),
                WaveTable.group(reports.reduce(0) { $0 + $1.superseded }), WaveTable.group(stats.inFlight),
                WaveTable.group(Int(rate.perSecond)), stats.connectionsOpen - stats.connectionsDraining))
    }

    /// Ended matches leave the registry after their dismissal window (2 s in the demo); then the engine stops.
    /// Returns its statistics from before it stopped.
    private func wrapUp(
        _ engine: FanoutEngine, interrupted: Bool, progress: ProgressLine, phases: DemoPhases
    ) -> FanoutStatistics {
        let dismissing = scenario == .match && !interrupted
        progress.begin(
            dismissing
                ? "wrap-up     the ended matches' 2 s dismissal window, their tokens leave the registry, the engine stops"
                : "wrap-up     the engine stops")
        if dismissing {
            usleep(2_500_000)
            engine.runMaintenance()
        }
        let statistics = engine.statistics
        engine.shutdown()
        progress.finish(String(format: "wrap-up     done in %.1f s", phases.end("wrap-up")))
        return statistics
    }

    private func printTotals(
        _ statistics: FanoutStatistics, play: PlayOutcome, balanced: Bool, invalidated: InvalidationCounter,
        store: SQLiteTokenStore, simulator: APNsSimulator
    ) throws {
        let pushes = statistics.client.completed
        print(
            String(
                format: "%@ pushes in %.2f s (%@ pushes/s); every targeted token accounted for in every wave: %@",
                WaveTable.group(pushes), play.seconds,
                WaveTable.group(Int(Double(pushes) / max(play.seconds, 1e-9))),
                play.interrupted ? "not checked (interrupted)" : balanced ? "yes" : "NO"))
        print(
            "invalidated tokens removed from the registry: \(WaveTable.group(invalidated.count)); "
                + "registry now holds \(WaveTable.group(try store.count())) tokens")
        if let error = statistics.lastRegistryError { print("registry error: \(error)") }
        let apns = statistics.client
        print(
            "connections: \(apns.connectionsOpened) opened, \(apns.connectionsTarget) kept at the end "
                + "(\(apns.scaleUps) scale-ups, \(apns.scaleDowns) scale-downs, \(apns.scaleUpFailures) failed); "
                + "at most \(WaveTable.group(apns.inFlightPeak)) pushes in flight")
        print("")
        print("simulator saw:")
        print(simulator.statistics().summary())
    }

    /// The demo's client: the simulator's CA and provider key from `state`, pinned next to the simulator.
    func clientConfiguration(state: String, port: UInt16, bundleID: String, cpus: Int) throws -> ClientConfiguration {
        let keyPath = (state as NSString).appendingPathComponent("AuthKey_FANFARE001.p8")
        let caPath = (state as NSString).appendingPathComponent("ca.pem")
        let signer = try ProviderTokenSigner(privateKeyPEMFile: keyPath, keyID: "FANFARE001", teamID: "TEAMID0001")
        var client = ClientConfiguration(
            host: "127.0.0.1", port: port, tls: try TLSContext.client(caFile: caPath),
            providerTokens: ProviderTokenSource(signer: signer), topic: Topic.liveActivity(bundleID: bundleID))
        client.workerCount = workers
        try connectionCount.apply(to: &client, streams: streams)
        client.maxConcurrentStreamsPerConnection = streams
        client.cpuAffinity = cpus > 1 ? Array(0..<max(1, cpus - 1)) : [0]
        return client
    }

    /// Runs async work from this synchronous command and waits for it.
    static func blocking<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) throws -> T {
        let done = DispatchSemaphore(value: 0)
        let box = ResultBox<T>()
        Task {
            do { box.result = .success(try await work()) } catch { box.result = .failure(error) }
            done.signal()
        }
        done.wait()
        return try box.result!.get()
    }

    /// The first match is the big one: 50%, 30%, 20% for three; equal shares beyond.
    static func weights(_ count: Int) -> [Double] {
        switch count {
        case 1: return [1]
        case 2: return [0.6, 0.4]
        case 3: return [0.5, 0.3, 0.2]
        default: return Array(repeating: 1 / Double(count), count: count)
        }
    }
}

private final class ResultBox<T>: @unchecked Sendable {
    var result: Result<T, any Error>?
}

/// Counts invalidation reports from the engine's registry thread.
final class InvalidationCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    func add(_ report: InvalidationReport) { lock.withLock { if report.removed { value += 1 } } }
    var count: Int { lock.withLock { value } }
}

/// A progress line that rewrites itself on a terminal and prints about once a second otherwise.
final class ProgressLine {
    private let isTerminal = isatty(STDOUT_FILENO) != 0
    private var lastPrinted = Date.distantPast
    private var pending = false

    func update(_ text: String) {
        if isTerminal {
            print("\r\u{1B}[K" + text, terminator: "")
            fflush(nil)
            pending = true
        } else if Date().timeIntervalSince(lastPrinted) >= 1 {
            print(text)
            lastPrinted = Date()
        }
    }

    /// Says what starts now (a phase silent for seconds): on a terminal the next line replaces it, elsewhere it
    /// is printed at once.
    func begin(_ text: String) {
        if isTerminal {
            update(text)
        } else {
            print(text)
            lastPrinted = Date()
        }
    }

    /// Prints a line that stays.
    func finish(_ text: String) {
        if isTerminal && pending { print("\r\u{1B}[K", terminator: "") }
        pending = false
        print(text)
    }
}

import ArgumentParser
import FanfareClient
import FanfareCore
import FanfareLoad
import Foundation
import Glibc

/// `fanfare load`: APNs-shaped load over the real data plane, with an honest summary.
public struct LoadCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "load",
        abstract: "Drive Live Activity pushes at an APNs endpoint (or the simulator) and report rate and latency.",
        discussion: """
            Closed loop by default: every free stream carries a push. With --rate, pushes are due at fixed \
            times and latency is measured from the due time, so client stalls show up (no coordinated \
            omission). Every push sent ends in exactly one row of the summary.
            """
    )

    @OptionGroup var connection: ConnectionOptions

    @OptionGroup var connectionCount: ConnectionCountOptions

    @Option(help: "Streams in flight per connection (the server's SETTINGS may lower it).")
    var streams: Int = 1000

    @Option(help: "Worker threads (each with its own io_uring ring and connections).")
    var threads: Int = 1

    @Option(help: "Pin worker i to CPU list[i] (comma-separated).")
    var cpus: String?

    @Option(help: "Total pushes (default 100000 unless --duration is given).")
    var pushes: Int?

    @Option(help: "Run for this many seconds instead of a push count.")
    var duration: Double?

    @Option(help: "Open loop: pushes per second over all workers.")
    var rate: Double?

    @Option(help: "Generate this many random tokens.")
    var tokens: Int = 10_000

    @Option(help: "Bytes per generated token (Live Activity tokens are usually 80).")
    var tokenBytes: Int = 80

    @Option(help: "Read tokens (hex, one per line) from this file instead.")
    var tokensFile: String?

    @Option(help: "Fixed content-state JSON for every push.")
    var contentState: String = #"{"home":1,"away":0}"#

    @Option(help: "Content-state template with {{sequence}}, {{score}}, {{timestamp}} (encoded per push).")
    var template: String?

    @Option(help: "apns-priority: 1, 5 or 10.")
    var priority: Int = 5

    @Flag(help: "Print the summary as JSON.")
    var json = false

    @Flag(inversion: .prefixedNo, help: "Show a progress line (default: when stderr is a terminal).")
    var progress: Bool?

    public init() {}

    public func run() throws {
        SignalWaiter.blockTerminationSignals()
        let plan: LoadPlan
        var configuration: ClientConfiguration
        do {
            (configuration, plan) = try makePlan()
        } catch {
            printError("\(error)")
            throw ExitCode(64)
        }
        let showProgress = progress ?? (isatty(STDERR_FILENO) == 1)
        let report = try LoadRunner.run(
            client: configuration, plan: plan,
            progress: showProgress
                ? { sample in
                    let line = String(
                        format: "[%6.1fs] %d done  %.0f/s  in flight %d  connections %d  errors %d  p99 %.2f ms",
                        sample.elapsedSeconds, sample.completed, sample.pushesPerSecond, sample.inFlight,
                        sample.connections,
                        sample.errors, sample.p99Milliseconds)
                    FileHandle.standardError.write(Data((line + "\n").utf8))
                } : nil,
            shouldStop: { SignalWaiter.poll() })
        print(json ? report.json() : report.text())
    }

    private func makePlan() throws -> (ClientConfiguration, LoadPlan) {
        typealias Limits = ClientConfiguration.Limits
        guard (1...Limits.streamsPerConnection).contains(streams) else {
            throw UsageError(
                "--streams \(streams) must be 1...\(Limits.streamsPerConnection) (APNs allows 1000-1500 per connection)"
            )
        }
        guard (1...Limits.workers).contains(threads) else {
            throw UsageError("--threads \(threads) must be 1...\(Limits.workers)")
        }
        if let rate, !(rate >= LoadPlan.Limits.minimumRate && rate <= LoadPlan.Limits.maximumRate) {
            throw UsageError(
                "--rate \(rate) must be a number of pushes per second from \(LoadPlan.Limits.minimumRate) to \(Int(LoadPlan.Limits.maximumRate))"
            )
        }
        if let duration, !(duration > 0 && duration <= LoadPlan.Limits.longestDurationSeconds) {
            throw UsageError(
                "--duration \(duration) must be a number of seconds from 0 to \(Int(LoadPlan.Limits.longestDurationSeconds))"
            )
        }
        if let pushes, pushes <= 0 { throw UsageError("--pushes must be positive") }
        var configuration = try connection.makeClientConfiguration()
        configuration.workerCount = threads
        try connectionCount.apply(to: &configuration, streams: streams)
        configuration.maxConcurrentStreamsPerConnection = streams
        configuration.cpuAffinity = try cpus.map { try parseCPUList($0) }
        let tokenList: [DeviceToken]
        if let tokensFile {
            tokenList = try TokenList.load(path: tokensFile)
        } else {
            guard (1...LoadPlan.Limits.generatedTokens).contains(tokens) else {
                throw UsageError("--tokens \(tokens) must be 1...\(LoadPlan.Limits.generatedTokens)")
            }
            guard (DeviceToken.minimumByteCount...DeviceToken.maximumByteCount).contains(tokenBytes) else {
                throw UsageError(
                    "--token-bytes must be \(DeviceToken.minimumByteCount)...\(DeviceToken.maximumByteCount)")
            }
            tokenList = TokenList.generate(count: tokens, byteLength: tokenBytes)
        }
        let payload: LoadPayload
        if let template {
            payload = .template(try PayloadTemplate(contentState: template))
        } else {
            var content = LiveActivityContent(event: .update, timestamp: Int64(Date().timeIntervalSince1970))
            do {
                content.contentState = try RawJSON(validating: contentState)
            } catch {
                throw UsageError("--content-state is not a JSON object: \(error)")
            }
            payload = .fixed(try PushPayload(liveActivity: content))
        }
        guard let priority = PushPriority(rawValue: priority) else { throw UsageError("--priority must be 1, 5 or 10") }
        var plan = LoadPlan(
            pushes: pushes ?? (duration == nil ? 100_000 : nil),
            duration: duration.map { .milliseconds(Int64($0 * 1000)) },
            rate: rate, tokens: tokenList, payload: payload)
        plan.priority = priority
        do {
            try configuration.validate()
            try plan.validate()
        } catch {
            throw UsageError("\(error)")
        }
        return (configuration, plan)
    }
}

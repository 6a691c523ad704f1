import ArgumentParser
import FanfareClient
import FanfareCore
import FanfareIO
import FanfareLoad
import FanfareSimulator
import FanfareTLS
import Foundation

/// `fanfare demo`: the README's main job on embedded defaults. Starts the APNs simulator on loopback,
/// then sends a burst of Live Activity updates through the real client and prints what happened.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Start the built-in APNs simulator on loopback and push a burst of Live Activity updates to it."
    )

    @Option(help: "Pushes to send.")
    var pushes: Int = 200_000

    @Option(help: "Distinct activity tokens (80 bytes each, like real Live Activity tokens).")
    var tokens: Int = 10_000

    @Option(help: "Client connections.")
    var connections: Int = 4

    @Option(help: "Streams in flight per connection (the simulator allows 1000).")
    var streams: Int = 1000

    @Option(help: "Simulated APNs latency (e.g. 0, 20ms, uniform:10ms-30ms, longtail:20ms,200ms).")
    var latency: String = "uniform:5ms-25ms"

    @Option(help: "Inject failures: Reason:probability (repeatable).")
    var fault: [String] = ["Unregistered:0.001", "TooManyRequests:0.001"]

    func run() async throws {
        SignalWaiter.blockTerminationSignals()
        guard pushes > 0, tokens > 0, connections > 0, streams > 0 else {
            printError("--pushes, --tokens, --connections and --streams must be positive")
            throw ExitCode(64)
        }
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("fanfare-demo-\(getpid())").path
        defer { try? FileManager.default.removeItem(atPath: state) }

        // 1. The simulator, with a fresh CA, server certificate and provider key.
        let simulate = try SimulateCommand.parse([
            "--listen", "127.0.0.1:0", "--state-dir", state, "--latency", latency, "--cpus", CPUAffinity.cpuCount > 1 ? "1" : "0",
        ] + fault.flatMap { ["--fault", $0] })
        let simulator = try simulate.start()
        let port = simulator.boundAddress.port
        print("simulator: https://127.0.0.1:\(port) latency \(latency), faults \(fault.joined(separator: " "))")

        // 2. The client, authenticating with a provider token signed by the generated key.
        let keyPath = (state as NSString).appendingPathComponent("AuthKey_FANFARE001.p8")
        let caPath = (state as NSString).appendingPathComponent("ca.pem")
        let signer = try ProviderTokenSigner(privateKeyPEMFile: keyPath, keyID: "FANFARE001", teamID: "TEAMID0001")
        var configuration = ClientConfiguration(
            host: "127.0.0.1", port: port, tls: try TLSContext.client(caFile: caPath),
            providerTokens: ProviderTokenSource(signer: signer), topic: Topic.liveActivity(bundleID: "com.example.fanfare"))
        configuration.connectionsPerWorker = connections
        configuration.maxConcurrentStreamsPerConnection = streams
        configuration.cpuAffinity = [0]

        // 3. One encoded payload shared by every push (encode once, send many), through the same load
        //    runner as `fanfare load`: every push is counted once in the report.
        var content = LiveActivityContent(event: .update, timestamp: Int64(Date().timeIntervalSince1970))
        content.contentState = try RawJSON(validating: #"{"home":1,"away":0,"minute":63}"#)
        let plan = LoadPlan(
            pushes: pushes, duration: nil, rate: nil, tokens: TokenList.generate(count: tokens, byteLength: 80),
            payload: .fixed(try PushPayload(liveActivity: content)))
        print("sending \(pushes) pushes to \(tokens) tokens over \(connections) connections x \(streams) streams")
        let report = try LoadRunner.run(
            client: configuration, plan: plan,
            progress: { sample in
                print(
                    String(
                        format: "  %6.1fs  completed %d/%d  in flight %d  %.0f pushes/s  p99 %.1f ms", sample.elapsedSeconds,
                        sample.completed, pushes, sample.inFlight, sample.pushesPerSecond, sample.p99Milliseconds))
            },
            shouldStop: { SignalWaiter.poll() })
        simulator.shutdown()
        print("")
        print(report.text())
        print("")
        print("simulator saw:")
        print(simulator.statistics().summary())
    }
}

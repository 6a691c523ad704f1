import ArgumentParser
import FanfareClient
import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTLS
import Foundation
import Synchronization

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
        let tally = Tally()
        let client = try APNsClient(configuration: configuration, resultHandler: tally)

        // 3. One encoded payload shared by every push (encode once, send many).
        var content = LiveActivityContent(event: .update, timestamp: Int64(Date().timeIntervalSince1970))
        content.contentState = try RawJSON(validating: #"{"home":1,"away":0,"minute":63}"#)
        let payload = try PushPayload(liveActivity: content)
        var tokenList: [DeviceToken] = []
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<tokens {
            tokenList.append(try DeviceToken(bytes: (0..<80).map { _ in UInt8.random(in: 0...255, using: &generator) }))
        }

        print("sending \(pushes) pushes to \(tokens) tokens over \(connections) connections x \(streams) streams")
        let start = IOLoop.monotonicNanoseconds()
        var sent = 0
        var lastReport = start
        while sent < pushes || tally.completed < pushes {
            while sent < pushes {
                let job = PushJob(token: tokenList[sent % tokenList.count], payload: payload, priority: .normal, cookie: UInt64(sent))
                do {
                    try client.submit(job)
                    sent += 1
                } catch {
                    break  // back-pressure: let the worker catch up
                }
            }
            try await Task.sleep(for: .milliseconds(2))
            let now = IOLoop.monotonicNanoseconds()
            if now - lastReport > 500_000_000 {
                lastReport = now
                let stats = client.statistics
                let seconds = Double(now - start) / 1e9
                print(String(format: "  %6.1fs  completed %d/%d  in flight %d  %.0f pushes/s", seconds, tally.completed, pushes, stats.inFlight, Double(tally.completed) / seconds))
            }
            if SignalWaiter.poll() { break }
        }
        let elapsed = Double(IOLoop.monotonicNanoseconds() - start) / 1e9
        client.shutdown()
        simulator.shutdown()
        print("")
        print(String(format: "%d pushes in %.2f s: %.0f pushes/s", tally.completed, elapsed, Double(tally.completed) / elapsed))
        for (line, count) in tally.lines() { print("  \(line): \(count)") }
        print("")
        print("simulator saw:")
        print(simulator.statistics().summary())
    }
}

/// Counts results by disposition (worker threads call it; a lock per result is fine for a demo).
final class Tally: PushResultHandler {
    private let counts = Mutex<[String: Int]>([:])
    private let done = Atomic<Int>(0)

    var completed: Int { done.load(ordering: .relaxed) }

    func pushCompleted(_ result: PushResult) {
        let key: String
        switch result.disposition {
        case .delivered: key = "200 delivered"
        case .rejected(let status, let reason, let raw, let action, _):
            key = "\(status) \(reason?.rawValue ?? raw ?? "?") -> \(action.rawValue)"
        case .failed(let failure): key = "failed: \(failure)"
        }
        counts.withLock { $0[key, default: 0] += 1 }
        done.add(1, ordering: .relaxed)
    }

    func lines() -> [(String, Int)] {
        counts.withLock { $0.sorted { $0.value > $1.value }.map { ($0.key, $0.value) } }
    }
}

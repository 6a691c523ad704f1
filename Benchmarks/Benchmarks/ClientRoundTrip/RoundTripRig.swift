import Benchmark
import FanfareClient
import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTLS
import Dispatch
import Foundation
import Synchronization

/// A warmed-up client connected to a simulator, with a shared payload and a producer the benchmark releases
/// pushes to. Everything that allocates (keys, certificates, threads, the connection and its first streams)
/// happens in `init`, before measuring.
final class RoundTripRig: @unchecked Sendable {
    enum SimulatorPlacement { case inProcess, childProcess }

    static let pushesPerIteration = 1000
    static let pushesToWarmUp = 20_000
    static let streamsPerConnection = 100

    private let files: SimulatorFiles
    private let simulator: APNsSimulator?
    private let child: SimulatorChild?
    private let client: APNsClient
    private let producer: BatchProducer
    private let counter = CompletionCounter()
    private var sent = 0

    private static let live = Mutex<[RoundTripRig]>([])

    /// `broadcast`: every push is a publish on one broadcast channel, made on the simulator's management
    /// listener with `BroadcastChannelManager` during setup.
    init(simulator placement: SimulatorPlacement, broadcast: Bool = false) throws {
        files = try SimulatorFiles()
        let port: UInt16
        var managementPort: UInt16?
        switch placement {
        case .inProcess:
            let simulator = try files.makeSimulator(cpu: CPUAffinity.cpuCount > 1 ? 1 : 0, management: broadcast)
            managementPort = simulator.managementAddress?.port
            self.simulator = simulator
            child = nil
            port = simulator.boundAddress.port
        case .childProcess:
            let child = try SimulatorChild(directory: files.directory)
            self.child = child
            simulator = nil
            port = child.port
            managementPort = child.managementPort
        }

        let signer = try ProviderTokenSigner(
            privateKeyPEMFile: files.privateKeyFile, keyID: SimulatorFiles.keyID, teamID: SimulatorFiles.teamID)
        var configuration = ClientConfiguration(
            host: "127.0.0.1", port: port, tls: try TLSContext.client(caFile: files.caFile),
            providerTokens: ProviderTokenSource(signer: signer, refreshInterval: 60 * 60),
            topic: Topic.liveActivity(bundleID: SimulatorFiles.bundleID))
        configuration.workerCount = 1
        configuration.connectionsPerWorker = 1
        configuration.maxConcurrentStreamsPerConnection = Self.streamsPerConnection
        configuration.cpuAffinity = [0]

        // 64 activity tokens of 80 bytes and one Live Activity update shared by every push (encode once, send many).
        var generator = SplitMix(seed: 0xFA4FA4E)
        let tokens = try (0..<64).map { _ in try DeviceToken(bytes: (0..<80).map { _ in generator.nextByte() }) }
        let content = LiveActivityContent(
            event: .update, timestamp: 1_735_689_600,
            contentState: try RawJSON(validating: #"{"home":2,"away":1,"minute":63,"period":"2H"}"#),
            staleDate: 1_735_693_200)
        var channel: BroadcastChannelID?
        if broadcast {
            guard let managementPort, managementPort != 0 else { throw RigError("the simulator has no management listener") }
            channel = try Self.createChannel(
                ChannelManagementConfiguration(
                    host: "127.0.0.1", port: managementPort, tls: configuration.tls, providerTokens: configuration.providerTokens,
                    bundleID: SimulatorFiles.bundleID))
        }
        producer = BatchProducer(
            tokens: tokens, payload: try PushPayload(liveActivity: content, limit: PayloadLimits.broadcast), channel: channel)
        client = try APNsClient(configuration: configuration, resultHandler: counter, producers: [producer])

        // Warm-up: connect, get past the one-stream start, fill HPACK tables and every pool.
        guard sendBatch(Self.pushesToWarmUp, timeoutSeconds: 60) else {
            let reason = client.lastConnectionError ?? counter.problem ?? "no answer"
            shutDown()
            throw RigError("warm-up pushes did not complete (\(reason))")
        }
        guard counter.notDeliveredCount == 0 else {
            shutDown()
            throw RigError("warm-up pushes were not all delivered: \(counter.problem ?? "?")")
        }
        Self.live.withLock { $0.append(self) }
    }

    /// A storage-policy-0 channel, made through the client's channel manager (setup only).
    private static func createChannel(_ configuration: ChannelManagementConfiguration) throws -> BroadcastChannelID {
        let manager = try BroadcastChannelManager(configuration: configuration)
        defer { manager.shutdown() }
        let result = Mutex<Result<BroadcastChannelID, ChannelManagementError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            do throws(ChannelManagementError) {
                let channel = try await manager.create(storagePolicy: .noMessageStored)
                result.withLock { $0 = .success(channel) }
            } catch {
                result.withLock { $0 = .failure(error) }
            }
            done.signal()
        }
        guard done.wait(timeout: .now() + 30) == .success, let outcome = result.withLock({ $0 }) else {
            throw RigError("creating the broadcast channel did not finish")
        }
        return try outcome.get()
    }

    /// The measured part: `pushes` pushes from producer to answer. Nothing here allocates by itself.
    func send(pushes: Int, benchmark: Benchmark) {
        guard sendBatch(pushes, timeoutSeconds: 30) else {
            benchmark.error("pushes did not complete within 30 s: \(client.lastConnectionError ?? "no answer")")
            return
        }
        if counter.notDeliveredCount != 0 {
            benchmark.error("\(counter.notDeliveredCount) pushes were not delivered, e.g. \(counter.problem ?? "?")")
        }
    }

    private func sendBatch(_ count: Int, timeoutSeconds: Int) -> Bool {
        sent += count
        counter.expect(total: sent)
        producer.release(count)
        return counter.wait(seconds: timeoutSeconds)
    }

    private func shutDown() {
        client.shutdown()
        simulator?.shutdown()
        child?.stop()
        files.remove()
    }

    /// Benchmark teardown: the benchmark keeps its setup state alive, so stop threads and the child here.
    static func shutDownAll() {
        for rig in live.withLock({ rigs in defer { rigs = [] }; return rigs }) { rig.shutDown() }
    }
}

struct RigError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Deterministic token bytes.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func nextByte() -> UInt8 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return UInt8(truncatingIfNeeded: z ^ (z >> 31))
    }
}

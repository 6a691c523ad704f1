import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTLS
import Foundation

/// A throwaway directory with a localhost CA, the simulator's certificate and a provider key pair.
struct SimulatorFiles {
    static let bundleID = "com.example.fanfare"
    static let teamID = "TEAMID0001"
    static let keyID = "KEYID00001"

    let directory: String
    var caFile: String { directory + "/ca.pem" }
    var certificateFile: String { directory + "/server.pem" }
    var certificateKeyFile: String { directory + "/server-key.pem" }
    var privateKeyFile: String { directory + "/AuthKey_\(Self.keyID).p8" }
    var publicKeyFile: String { directory + "/AuthKey_\(Self.keyID).pub.pem" }

    /// Creates the directory and everything in it.
    init() throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("fanfare-bench-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        let chain = try CertificateAuthority.generateLocalhostChain(in: directory)
        precondition(chain.caCertificateFile == caFile && chain.certificateFile == certificateFile)
        try ProviderKeyGenerator.generate(privateKeyFile: privateKeyFile, publicKeyFile: publicKeyFile)
    }

    /// Uses files another process created.
    init(existing directory: String) {
        self.directory = directory
    }

    /// A simulator on 127.0.0.1 (a free port) that trusts the provider key, with its defaults (every token is
    /// accepted, no latency, 1000 streams per connection after the first accepted push).
    /// `management`: also the channel management listener (for the broadcast benchmark's channel).
    func makeSimulator(cpu: Int, management: Bool = false) throws -> APNsSimulator {
        var configuration = SimulatorConfiguration()
        configuration.bundleID = Self.bundleID
        configuration.teamID = Self.teamID
        configuration.keyID = Self.keyID
        var options = APNsSimulator.Options(
            listen: try SocketAddress(ip: "127.0.0.1", port: 0),
            tls: try TLSContext.server(certificateFile: certificateFile, privateKeyFile: certificateKeyFile),
            verifier: ES256ProviderTokenVerifier(try ProviderTokenVerifier(publicKeyPEMFile: publicKeyFile)))
        options.cpuAffinity = [cpu]
        if management { options.managementListen = try SocketAddress(ip: "127.0.0.1", port: 0) }
        return try APNsSimulator(configuration: configuration, options: options)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// The simulator in a child process, so that the benchmark process's malloc counts are the client's alone.
///
/// The child is this executable started again with `FANFARE_BENCH_SIMULATOR_DIR` set: the benchmark list then
/// turns into `run(directory:)`, which prints the port, serves until its stdin closes, and exits.
final class SimulatorChild {
    static let environmentKey = "FANFARE_BENCH_SIMULATOR_DIR"

    static var requestedDirectory: String? {
        ProcessInfo.processInfo.environment[environmentKey]
    }

    let port: UInt16
    /// The child's channel management listener (broadcast benchmarks make their channel there).
    let managementPort: UInt16
    private let process = Process()
    private let input = Pipe()

    init(directory: String) throws {
        var environment = ProcessInfo.processInfo.environment
        environment[Self.environmentKey] = directory
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: try Self.executablePath())
        process.arguments = []
        process.environment = environment
        process.standardInput = input
        process.standardOutput = output
        try process.run()

        // The child's first line: "port <n> <management port>".
        var line = Data()
        while true {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }  // the child exited before it said anything
            line.append(chunk)
            if line.contains(UInt8(ascii: "\n")) { break }
        }
        let text = String(decoding: line, as: UTF8.self)
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard words.count >= 3, words[0] == "port", let port = UInt16(words[1]), let managementPort = UInt16(words[2]) else {
            process.terminate()
            throw RigError("the simulator child process did not start: \(text.isEmpty ? "no output" : text)")
        }
        self.port = port
        self.managementPort = managementPort
    }

    /// Closing its stdin tells the child to shut down; then wait for it.
    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }

    private static func executablePath() throws -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { throw RigError("cannot read /proc/self/exe") }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The child's whole life. Never returns.
    static func run(directory: String) -> Never {
        let simulator: APNsSimulator
        do {
            simulator = try SimulatorFiles(existing: directory).makeSimulator(cpu: CPUAffinity.cpuCount > 1 ? 1 : 0, management: true)
        } catch {
            print("error \(error)")
            exit(1)
        }
        print("port \(simulator.boundAddress.port) \(simulator.managementAddress?.port ?? 0)")
        fflush(nil)  // all streams: the parent reads this line before anything else happens
        var byte: UInt8 = 0
        while read(STDIN_FILENO, &byte, 1) > 0 {}  // until the parent closes the pipe (or exits)
        simulator.shutdown()
        exit(0)
    }
}

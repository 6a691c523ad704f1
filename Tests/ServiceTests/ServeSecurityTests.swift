// The real `fanfare serve` binary's hardening (issue 25, review M3, M6, L2, L4): the API over HTTPS with a
// certificate the test makes, reached by curl trusting only the test's CA; TLS files it cannot use refused at
// start naming the file; the database from $FANFARE_DATABASE; the SQLite registry, its WAL and the simulator's
// log created 0600; `--simulator`'s state in a directory made by mkdtemp (0700, not named by the pid) and
// removed at exit; `fanfare simulate`'s state directory 0700.
import FanfareTLS
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite("fanfare serve hardening (child processes)", .ownThread)
struct ServeSecurityTests {
    static func makeDirectory(_ name: String) throws -> String {
        let directory = NSTemporaryDirectory() + "fanfare-\(name)-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    /// The permission bits of `path` (lstat: a symlink is not followed), nil if nothing is there.
    static func mode(_ path: String) -> mode_t? {
        var status = stat()
        guard lstat(path, &status) == 0 else { return nil }
        return status.st_mode & 0o7777
    }

    /// `curl` (Debian's, scripts/ensure-system-packages) with `arguments`; its exit status and what it printed.
    static func curl(_ arguments: [String], directory: String) async throws -> (status: Int32, output: String) {
        let path = ["/usr/bin/curl", "/bin/curl", "/usr/local/bin/curl"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
        let executable = try #require(path, "curl is missing: scripts/ensure-system-packages installs it")
        let output = directory + "/curl-\(UUID().uuidString.prefix(8)).out"
        let process = try ChildProcess(
            executable: executable, arguments: ["-sS", "--max-time", "60"] + arguments, directory: directory,
            standardOutput: output, standardError: output)
        let status = await process.waitForExit(timeout: Liveness.command) ?? -1
        return (status, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
    }

    @Test("--tls-cert / --tls-key: HTTPS with the test's CA (curl), the URL and the serving line say https")
    func servesHTTPS() async throws {
        let directory = try Self.makeDirectory("serve-tls")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let chain = try CertificateAuthority.generateLocalhostChain(in: directory + "/tls")
        let serve = try await ServeProcess(
            [
                "--simulator", "--listen", "127.0.0.1:0", "--database", directory + "/fanfare.db",
                "--tls-cert", chain.certificateFile, "--tls-key", chain.privateKeyFile,
            ], directory: directory)
        let base = "https://127.0.0.1:\(serve.port)"
        #expect(serve.output.contains("listening on \(base)"), "\(serve.output)")
        #expect(serve.errors.contains("url=\(base)"), "\(serve.errors)")
        let health = try await Self.curl(
            ["--cacert", chain.caCertificateFile, base + "/healthz"], directory: directory)
        #expect(health.status == 0 && health.output.contains(#""status""#), "\(health)")
        let registered = try await Self.curl(
            [
                "--cacert", chain.caCertificateFile, "-H", "Content-Type: application/json", "--data",
                registrationBody(0..<3, channel: "tls"), base + "/v1/tokens",
            ], directory: directory)
        #expect(registered.status == 0 && registered.output.contains(#""registered""#), "\(registered)")
        // A client that does not trust the CA is refused by the handshake (curl 60), plain HTTP gets no answer.
        let untrusted = try await Self.curl([base + "/healthz"], directory: directory)
        #expect(untrusted.status == 60, "\(untrusted)")
        let plain = try? await serve.client.get("/healthz")
        #expect(plain == nil || plain?.status != 200, "\(String(describing: plain))")
        serve.signal(SIGTERM)
        #expect(await serve.waitForExit() == 0, "\(serve.errors.suffix(2000))")
    }

    @Test("TLS files it cannot use, and only one of the two flags: exit 64 with a line naming the file")
    func refusesUnusableTLSFiles() async throws {
        let directory = try Self.makeDirectory("serve-tls-refuse")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let chain = try CertificateAuthority.generateLocalhostChain(in: directory + "/tls")
        let other = try CertificateAuthority.generateLocalhostChain(in: directory + "/other")
        let notPEM = directory + "/not-a-pem"
        try Data("not a certificate\n".utf8).write(to: URL(fileURLWithPath: notPEM))
        let missing = directory + "/missing.pem"
        let cases: [([String], String)] = [
            (["--tls-cert", chain.certificateFile], "--tls-cert and --tls-key go together"),
            (["--tls-key", chain.privateKeyFile], "--tls-cert and --tls-key go together"),
            (["--tls-cert", missing, "--tls-key", chain.privateKeyFile], "--tls-cert \(missing): cannot read it"),
            (["--tls-cert", notPEM, "--tls-key", chain.privateKeyFile], "--tls-cert \(notPEM)"),
            (["--tls-cert", chain.certificateFile, "--tls-key", missing], "--tls-key \(missing): cannot read it"),
            (["--tls-cert", chain.certificateFile, "--tls-key", notPEM], "--tls-key \(notPEM): not an unencrypted"),
            (
                ["--tls-cert", chain.certificateFile, "--tls-key", other.privateKeyFile],
                "--tls-key \(other.privateKeyFile) does not go with the certificate"
            ),
            (["--tls-cert", directory, "--tls-key", chain.privateKeyFile], "--tls-cert \(directory): cannot read it"),
        ]
        for (arguments, message) in cases {
            let run = try await ServeProcess.run(
                ["--simulator", "--listen", "127.0.0.1:0", "--database", directory + "/fanfare.db"] + arguments,
                directory: directory)
            #expect(run.status == 64, "\(arguments): \(run.errors)")
            #expect(run.errors.contains(message), "\(arguments): \(run.errors)")
        }
    }

    @Test("private files: $FANFARE_DATABASE's registry and WAL 0600, the simulator in a mkdtemp directory (0700)")
    func privateFiles() async throws {
        let directory = try Self.makeDirectory("serve-private")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let scratch = directory + "/tmp"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        let database = directory + "/from-environment.db"
        let log = directory + "/accepted.jsonl"
        let serve = try await ServeProcess(
            ["--simulator", "--listen", "127.0.0.1:0", "--simulator-log", log], directory: directory,
            environment: ["FANFARE_DATABASE": database, "TMPDIR": scratch])
        let client = serve.client
        #expect(serve.errors.contains("database=\(database)"), "\(serve.errors)")
        #expect(try await client.post("/v1/tokens", json: registrationBody(0..<3, channel: "p")).status == 200)
        let pushed = try await client.post(
            "/v1/push", json: #"{"token":"\#(tokenHex(1))","event":"update","content_state":{}}"#)
        #expect(pushed.json?["status"] as? Int == 200, "\(pushed)")

        #expect(Self.mode(database) == 0o600, "\(String(describing: Self.mode(database)))")
        #expect(Self.mode(database + "-wal") == 0o600, "\(String(describing: Self.mode(database + "-wal")))")
        let states = try FileManager.default.contentsOfDirectory(atPath: scratch).filter {
            $0.hasPrefix("fanfare-serve-")
        }
        #expect(states.count == 1, "\(states)")
        let state = scratch + "/" + (states.first ?? "")
        #expect(states.first != "fanfare-serve-\(serve.process.pid)", "a name anyone could guess and take first")
        #expect(Self.mode(state) == 0o700, "\(String(describing: Self.mode(state)))")
        #expect(FileManager.default.fileExists(atPath: state + "/ca.pem"))
        #expect(Self.mode(state + "/channels") ?? 0o600 == 0o600)

        serve.signal(SIGTERM)
        #expect(await serve.waitForExit() == 0, "\(serve.errors.suffix(2000))")
        #expect(Self.mode(log) == 0o600, "\(String(describing: Self.mode(log)))")
        #expect(!FileManager.default.fileExists(atPath: state), "the simulator's directory is removed at exit")
        #expect(Self.mode(database) == 0o600)
    }

    @Test("fanfare simulate makes its state directory 0700 (it holds the CA's and the provider's keys)")
    func simulatorStateDirectoryIsPrivate() async throws {
        let directory = try Self.makeDirectory("simulate-private")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let simulator = try await SimulateProcess([], directory: directory)
        #expect(Self.mode(simulator.stateDirectory) == 0o700)
        #expect(Self.mode(simulator.stateDirectory + "/AuthKey_FANFARE001.p8") == 0o600)
        await simulator.stop()
    }
}

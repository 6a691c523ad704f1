// API keys: missing, wrong or insufficient keys get 401/403 problem+json and change nothing; open routes stay
// open; the keyring file is parsed strictly; and no key reaches a log line.
import FanfareClient
import FanfareFanout
import FanfareService
import FanfareTestSupport
import Foundation
import Logging
import Synchronization
import Testing

@Suite("API keys", .ownThread)
struct AuthTests {
    static let keys = """
        # key                               scopes
        reader-key-0123456789abcdef         read
        writer-key-0123456789abcdef         register,publish
        admin-key-0123456789abcdef0         admin
        """

    @Test("missing, malformed, unknown and insufficient keys: 401 / 403 problem+json, nothing written")
    func refusals() async throws {
        let lines = LogCapture()
        let fixture = try await ServiceFixture { configuration in
            configuration.apiKeys = try APIKeyring(parsing: Self.keys, path: "keys")
            configuration.logger = Logger(label: "fanfare.service.test") { label in lines.handler(label: label) }
        }
        defer { fixture.removeDirectory() }
        let open = fixture.client
        let body = registrationBody(0..<3, channel: "c")

        let missing = try await open.post("/v1/tokens", json: body)
        _ = problem(missing, status: 401, code: "unauthorized")
        #expect(missing.header("www-authenticate")?.hasPrefix("Bearer") == true)
        let basic = try await open.post("/v1/tokens", json: body, headers: [("Authorization", "Basic dXNlcjpwYXNz")])
        _ = problem(basic, status: 401, code: "unauthorized")
        var wrong = open
        wrong.apiKey = "writer-key-0123456789abcdeX"
        _ = problem(try await wrong.post("/v1/tokens", json: body), status: 401, code: "unauthorized")
        _ = problem(try await wrong.get("/v1/waves"), status: 401, code: "unauthorized")

        var reader = open
        reader.apiKey = "reader-key-0123456789abcdef"
        _ = problem(try await reader.post("/v1/tokens", json: body), status: 403, code: "forbidden")
        _ = problem(
            try await reader.post("/v1/push", json: #"{"token":"\#(tokenHex(1))","event":"update"}"#), status: 403,
            code: "forbidden")
        #expect(try await reader.get("/v1/waves").status == 200)

        var writer = open
        writer.apiKey = "writer-key-0123456789abcdef"
        _ = problem(try await writer.get("/v1/tokens/\(tokenHex(0))"), status: 403, code: "forbidden")
        // Nothing of the refused requests was written.
        var admin = open
        admin.apiKey = "admin-key-0123456789abcdef0"
        _ = problem(try await admin.get("/v1/tokens/\(tokenHex(0))"), status: 404, code: "not_found")

        #expect(try await writer.post("/v1/tokens", json: body).status == 200)
        #expect(try await admin.get("/v1/tokens/\(tokenHex(0))").status == 200)
        // Open routes need no key.
        for path in ["/healthz", "/metrics", "/openapi.yaml", "/"] {
            #expect(try await open.get(path).status == 200, "\(path)")
        }
        try await fixture.stop()
        let log = lines.text
        for key in ["reader-key", "writer-key", "admin-key", "dXNlcjpwYXNz"] {
            #expect(!log.contains(key), "a key reached the log")
        }
    }

    @Test("the key file: comments, scopes, and errors that name the line but never the key")
    func keyFile() throws {
        let ring = try APIKeyring(parsing: Self.keys + "\n\n", path: "keys")
        #expect(ring.count == 3)
        #expect(ring.principal(presenting: Array("admin-key-0123456789abcdef0".utf8))?.scopes == [.admin])
        #expect(ring.principal(presenting: Array("admin-key-0123456789abcdef".utf8)) == nil)
        let cases: [(String, String)] = [
            ("short-key read", "16 to 256"),
            ("secret-key-0123456789 read,write", "unknown scope"),
            ("secret-key-0123456789", "expected a key and its scopes"),
            ("secret-key-0123456789 read\nsecret-key-0123456789 admin", "listed twice"),
            ("# nothing\n", "lists no keys"),
        ]
        for (text, message) in cases {
            #expect {
                _ = try APIKeyring(parsing: text, path: "keys")
            } throws: { error in
                let description = "\(error)"
                return description.contains(message) && !description.contains("secret-key")
            }
        }
    }

    @Test("beyond loopback without keys: refused with the reason")
    func loopbackOnly() throws {
        #expect(ServiceConfiguration.isLoopback("127.0.0.1"))
        #expect(ServiceConfiguration.isLoopback("::1"))
        #expect(ServiceConfiguration.isLoopback("localhost"))
        #expect(!ServiceConfiguration.isLoopback("0.0.0.0"))
        #expect(!ServiceConfiguration.isLoopback("10.0.0.1"))
        let fixture = ServiceFixtureConfiguration.make(host: "0.0.0.0")
        let problem = try #require(fixture.problem())
        #expect(problem.contains("without API keys") && problem.contains("--api-keys"))
    }
}

/// Log lines written through swift-log, kept for inspection.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])

    func handler(label: String) -> some LogHandler { CapturingHandler(label: label, capture: self) }

    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var text: String { lines.withLock { $0.joined(separator: "\n") } }

    struct CapturingHandler: LogHandler {
        let label: String
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            var merged = metadata
            if let extra = event.metadata { merged.merge(extra) { _, new in new } }
            capture.append("\(event.level) \(event.message) \(merged)")
        }
    }
}

/// A configuration to check without starting anything.
enum ServiceFixtureConfiguration {
    static func make(host: String) -> ServiceConfiguration {
        let keys = ServiceKeys.shared
        let client = FanfareClient.ClientConfiguration(
            host: "127.0.0.1", port: 1, tls: keys.clientTLS, providerTokens: .init(signer: keys.signer),
            topic: "com.example.fanfare.push-type.liveactivity")
        return ServiceConfiguration(host: host, port: 0, fanout: .init(client: client, bundleID: ServiceKeys.bundleID))
    }
}

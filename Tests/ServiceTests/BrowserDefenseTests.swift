// What keeps a web page from driving a keyless service on loopback (review M2): a write's body is read only as
// `Content-Type: application/json`, which a page can send only after the browser asked the service (CORS
// preflight, which it never allows), and without API keys only requests whose Host is a loopback name or address
// are answered, so a page that rebinds its DNS name to 127.0.0.1 gets 421. Nothing refused is written.
import FanfareService
import FanfareTestSupport
import Foundation
import Testing

@Suite("Browser defenses", .ownThread)
struct BrowserDefenseTests {
    static let update = #"{"event":"update","content_state":{"home":1}}"#

    /// What a registration, a publish and a push left behind: the token's ledger, the waves, the accepted log.
    static func nothingWritten(_ fixture: ServiceFixture) async throws {
        let client = fixture.client
        _ = problem(try await client.get("/v1/tokens/\(tokenHex(0))"), status: 404, code: "not_found")
        #expect((try await client.get("/v1/waves").json?["waves"] as? [Any])?.isEmpty == true)
        #expect(try await client.get("/v1/channels/m/broadcast").status == 404)
    }

    @Test("a write without Content-Type: application/json is 415, whatever else it sends; a DELETE needs none")
    func writesNeedJSON() async throws {
        let fixture = try await ServiceFixture(management: true)
        defer { fixture.removeDirectory() }
        let client = fixture.client
        let writes: [(String, String, String)] = [
            ("POST", "/v1/tokens", registrationBody(0..<3, channel: "m")),
            ("POST", "/v1/tokens/delete", #"{"tokens":["\#(tokenHex(0))"]}"#),
            ("POST", "/v1/channels/m/updates", Self.update),
            ("POST", "/v1/push", #"{"token":"\#(tokenHex(0))","event":"update","content_state":{}}"#),
            ("PUT", "/v1/channels/m/broadcast", #"{"storage_policy":0}"#),
        ]
        // No Content-Type (a fetch with a Blob body, "simple", no preflight), what forms send, and text/plain.
        let refused: [[(String, String)]] = [
            [], [("Content-Type", "text/plain;charset=UTF-8")], [("Content-Type", "application/x-www-form-urlencoded")],
            [("Content-Type", "multipart/form-data; boundary=x")],
        ]
        for (method, path, body) in writes {
            for headers in refused {
                let answer = try await client.send(method, path, headers: headers, body: Array(body.utf8))
                let document = problem(answer, status: 415, code: "unsupported_media_type")
                #expect(
                    (document["detail"] as? String)?.contains("application/json") == true,
                    "\(method) \(path) \(headers): \(answer)")
            }
            // An empty body without Content-Type is refused too: these routes take a body.
            _ = problem(try await client.send(method, path), status: 415, code: "unsupported_media_type")
        }
        try await Self.nothingWritten(fixture)

        // DELETE takes no body: without one it needs no Content-Type; a body it sends must be JSON.
        _ = problem(try await client.delete("/v1/channels/m/broadcast"), status: 404, code: "not_found")
        _ = problem(
            try await client.send("DELETE", "/v1/channels/m/broadcast", body: Array("{}".utf8)), status: 415,
            code: "unsupported_media_type")
        _ = problem(
            try await client.send(
                "DELETE", "/v1/channels/m/broadcast", headers: [("Content-Type", "application/json")],
                body: Array("{}".utf8)), status: 404, code: "not_found")

        // As JSON (with a charset parameter) the same writes work.
        let json = [("Content-Type", "application/json; charset=utf-8")]
        let registered = try await client.send(
            "POST", "/v1/tokens", headers: json, body: Array(registrationBody(0..<3, channel: "m").utf8))
        #expect(registered.status == 200, "\(registered)")
        let published = try await client.send(
            "POST", "/v1/channels/m/updates", headers: json, body: Array(Self.update.utf8))
        #expect(published.status == 202, "\(published)")
        try await fixture.stop()
    }

    @Test("keyless: a Host that is not loopback is 421 on every route; loopback names and addresses are answered")
    func keylessAnswersOnlyLoopbackHosts() async throws {
        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let client = fixture.client
        let port = client.port
        let foreign = [
            "evil.example", "evil.example:\(port)", "127.0.0.1.evil.example", "localhost.evil.example:\(port)",
            "10.0.0.1:\(port)", "0.0.0.0:\(port)", "[::2]:\(port)", "localhost:http", "127.0.0.1:\(port):1", "",
        ]
        for host in foreign {
            for path in ["/v1/waves", "/healthz", "/metrics", "/", "/v1/nothing-here"] {
                let answer = try await client.get(path, headers: [("Host", host)])
                _ = problem(answer, status: 421, code: "misdirected_request")
            }
            let write = try await client.post(
                "/v1/tokens", json: registrationBody(0..<3, channel: "m"), headers: [("Host", host)])
            _ = problem(write, status: 421, code: "misdirected_request")
        }
        // No Host at all (HTTP/1.0 style).
        let bare = try await client.send(
            "GET", "/healthz", raw: Array("GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n".utf8))
        _ = problem(bare, status: 421, code: "misdirected_request")
        try await Self.nothingWritten(fixture)

        for host in [
            "127.0.0.1:\(port)", "127.0.0.1", "127.8.9.10:\(port)", "localhost", "LocalHost:\(port)", "[::1]",
            "[::1]:\(port)",
        ] {
            let answer = try await client.get("/v1/waves", headers: [("Host", host)])
            #expect(answer.status == 200, "Host \(host): \(answer)")
        }
        try await fixture.stop()
    }

    @Test("with API keys there is no Host check (the service may be reached by any name)")
    func withKeysAnyHost() async throws {
        let fixture = try await ServiceFixture { configuration in
            configuration.apiKeys = try APIKeyring(parsing: "admin-key-0123456789abcdef0 admin", path: "keys")
        }
        defer { fixture.removeDirectory() }
        var client = fixture.client
        client.apiKey = "admin-key-0123456789abcdef0"
        #expect(try await client.get("/v1/waves", headers: [("Host", "fanfare.internal:8443")]).status == 200)
        #expect(try await client.get("/healthz", headers: [("Host", "evil.example")]).status == 200)
        try await fixture.stop()
    }
}

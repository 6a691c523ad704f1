// `HTTPProxy(url:)`: http://[user:password@]host:port only, every other shape a clear error that never repeats
// the credentials; and what the client configuration refuses with a proxy.
import FanfareClient
import FanfareIO
import FanfareTestHarness
import FanfareTestSupport
import Testing

@Suite(.ownThread) struct HTTPProxyURLTests {
    @Test func theShapesAProxyURLMayHave() throws {
        #expect(try HTTPProxy(url: "http://proxy.corp:3128") == HTTPProxy(host: "proxy.corp", port: 3128))
        #expect(try HTTPProxy(url: "HTTP://10.0.0.1:8080/") == HTTPProxy(host: "10.0.0.1", port: 8080))
        #expect(try HTTPProxy(url: "http://[::1]:3128") == HTTPProxy(host: "::1", port: 3128))
        let withCredentials = try HTTPProxy(url: "http://alice:p%40ss%3Aw%25rd@proxy:3128")
        #expect(withCredentials == HTTPProxy(host: "proxy", port: 3128, username: "alice", password: "p@ss:w%rd"))
        #expect(withCredentials.description == "http://proxy:3128 (with credentials)")
        #expect(try HTTPProxy(url: "http://bob:@proxy:1").password == "")
    }

    @Test(arguments: [
        ("proxy.corp:3128", "must be http://host:port"),
        ("https://proxy.corp:3128", "https:// proxies (TLS to the proxy) are not supported"),
        ("socks5://proxy.corp:1080", "only http:// proxies (HTTP CONNECT) are supported"),
        ("http://proxy.corp", "has no port"),
        ("http://proxy.corp:", "the port must be a number from 1 to 65535"),
        ("http://proxy.corp:0", "the port must be a number from 1 to 65535"),
        ("http://proxy.corp:70000", "the port must be a number from 1 to 65535"),
        ("http://proxy.corp:3128/path", "has a path, query or fragment"),
        ("http://:3128", "has no host"),
        ("http://pro xy:3128", "is not a host name"),
        ("http://::1:3128", "is not a host name"),
        ("http://[::1:3128", "unclosed '['"),
        ("http://alice@proxy:3128", "the credentials must be user:password"),
        ("http://alice:p%4@proxy:3128", "a '%' not followed by two hex digits"),
    ])
    func aBadURLSaysWhy(url: String, expected: String) {
        do {
            _ = try HTTPProxy(url: url)
            Issue.record("\(url) was accepted")
        } catch {
            #expect(error.description.contains(expected), "\(url): \(error)")
        }
    }

    @Test func credentialsAreNeverShown() {
        #expect(HTTPProxy.redacting("http://alice:secret@proxy:3128") == "http://***@proxy:3128")
        #expect(HTTPProxy.redacting("http://proxy:3128") == "http://proxy:3128")
        do {
            _ = try HTTPProxy(url: "http://alice:secret@proxy")
        } catch {
            #expect(!error.description.contains("secret"))
        }
    }

    @Test func theConfigurationChecksTheProxy() throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.proxy = HTTPProxy(host: "proxy", port: 3128, username: "alice", password: nil)
        #expect(throws: ClientConfigurationError.self) { try configuration.validate() }
        configuration.proxy = HTTPProxy(host: "proxy", port: 3128)
        try configuration.validate()
        configuration.connectAddresses = [try SocketAddress(ip: "127.0.0.1", port: 1)]
        #expect(
            throws: ClientConfigurationError.invalid(
                field: "connectAddresses", problem: "give connectAddresses or a proxy, not both")
        ) {
            try configuration.validate()
        }
        configuration.connectAddresses = nil
        configuration.host = "api.push.apple.com\r\nX-Injected: 1"
        #expect(throws: ClientConfigurationError.self) { try configuration.validate() }
        configuration.host = "api.push.apple.com"
        configuration.proxy = HTTPProxy(
            host: "proxy", port: 3128, username: "a", password: String(repeating: "p", count: 2000))
        #expect(throws: ClientConfigurationError.self) { try configuration.validate() }
    }
}

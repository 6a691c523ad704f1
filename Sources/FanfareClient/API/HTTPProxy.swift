import FanfareCore
import FanfareHTTP2

/// An HTTP proxy that APNs connections reach their host through, with CONNECT (RFC 9110 §9.3.6), as networks that
/// reach Apple only through a proxy need. The proxy is spoken to in plain HTTP/1.1; TLS runs end to end with APNs
/// through the tunnel (SNI and the certificate check are for the APNs host), so the proxy sees host and port only.
public struct HTTPProxy: Sendable, Equatable, CustomStringConvertible {
    /// Looked up like the APNs host (on the resolver thread, freshly for every connection).
    public var host: String
    public var port: UInt16
    /// Basic credentials (RFC 7617), sent as `Proxy-Authorization` with every CONNECT. Both or neither.
    public var username: String?
    public var password: String?

    /// The longest `username:password` sent.
    public static let maximumCredentialBytes = 1024

    public init(host: String, port: UInt16, username: String? = nil, password: String? = nil) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
    }

    /// `http://host:port` (an IPv6 literal in brackets); credentials are never shown (this goes into logs).
    public var description: String { "http://" + name + (username == nil ? "" : " (with credentials)") }

    /// `host:port`, as messages name the proxy.
    var name: String { ProxyTunnel.hostPort(host, port) }

    /// The tunnel a connection to `host`:`port` opens through this proxy.
    func tunnel(to host: String, port: UInt16) -> ProxyTunnel {
        var authorization: String?
        if let username, let password {
            authorization = "Basic " + Base64.encode("\(username):\(password)", alphabet: .standard, padded: true)
        }
        return ProxyTunnel(proxy: name, targetHost: host, targetPort: port, authorization: authorization)
    }

    /// Throws the first setting a CONNECT cannot carry: the host, the port, the credentials.
    public func validate() throws(ClientConfigurationError) {
        try Self.require(
            Self.isHostName(host), "'\(PrintableText.escaping(host, limit: 64))' is not a host name or address")
        try Self.require(port != 0, "the port must be 1...65535")
        try Self.require(
            (username == nil) == (password == nil), "give both a user name and a password, or neither")
        if let username, let password {
            try Self.require(
                !username.isEmpty && !username.contains(":"), "the user name must be non-empty, without ':'")
            try Self.require(
                username.utf8.count + 1 + password.utf8.count <= Self.maximumCredentialBytes,
                "the credentials are over \(Self.maximumCredentialBytes) bytes")
        }
    }

    /// `validate()`, and the host a CONNECT names: the request line carries it as it is, so no spaces or line breaks.
    func validate(target: String) throws(ClientConfigurationError) {
        try validate()
        try Self.require(
            Self.isHostName(target),
            "the host '\(PrintableText.escaping(target, limit: 64))' cannot go in a CONNECT line")
    }

    private static func require(_ condition: Bool, _ problem: String) throws(ClientConfigurationError) {
        if !condition { throw .invalid(field: "proxy", problem: problem) }
    }

    /// Letters, digits, `.-_`, and `:` `%` of an IPv6 literal (with its zone): nothing that ends a request line.
    static func isHostName(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 255
            && text.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"),
                    UInt8(ascii: ":"), UInt8(ascii: "%"):
                    return true
                default:
                    return false
                }
            }
    }
}

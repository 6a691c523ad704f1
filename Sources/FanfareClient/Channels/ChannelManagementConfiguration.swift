import FanfareCore
import FanfareHTTP2
import FanfareIO
import FanfareTLS

/// Where and how `BroadcastChannelManager` reaches APNs' channel management API (apns-spec.md §1.1, §8.2).
public struct ChannelManagementConfiguration: Sendable {
    /// Host for DNS, SNI, certificate checks and `:authority` (`api-manage-broadcast[.sandbox].push.apple.com`).
    public var host: String
    /// 2196 in production, 2195 in the sandbox (not 443).
    public var port: UInt16
    /// TLS settings (trust store; a client certificate for certificate authentication).
    public var tls: TLSContext
    /// The same provider-token source the push client uses (one JWT per team and key, shared); nil for
    /// certificate authentication.
    public var providerTokens: ProviderTokenSource?
    /// When set, connections sign with its current key instead of `providerTokens`, and one of an older key is
    /// retired before the next call (the fan-out engine passes its push client's, so a rotated key reaches channel
    /// management too).
    public var providerKeys: ProviderKeyRotation?
    /// The app's plain bundle id (`/1/apps/<bundle id>/channels`).
    public var bundleID: String
    public var addressFamilies: AddressFamilyPreference = .system
    /// Connect to these addresses instead of looking `host` up (`host` still names the server for TLS).
    public var connectAddresses: [SocketAddress]? = nil
    /// Reach `host` through this HTTP proxy (CONNECT), as `ClientConfiguration.proxy` does. Nil: directly.
    public var proxy: HTTPProxy? = nil
    /// Time allowed for one call, from the call to APNs' whole answer (connecting included).
    public var requestTimeout: Duration = .seconds(30)
    /// TCP connect + TLS handshake limit.
    public var connectTimeout: Duration = .seconds(10)
    /// The connection closes after this long without a call (an idle APNs connection may stop answering).
    public var idleTimeout: Duration = .seconds(60)
    /// The largest answer body read; a longer one fails its call (a list of 10,000 ids is about 300 KB).
    public var maximumResponseBody: Int = 2 << 20
    /// Calls in flight at once on the connection; more wait their turn.
    public var maximumConcurrentCalls: Int = 16

    /// APNs' management host and port of `environment`.
    public init(environment: APNsEndpoint, tls: TLSContext, providerTokens: ProviderTokenSource?, bundleID: String) {
        self.init(
            host: environment.channelManagementHost, port: UInt16(environment.channelManagementPort), tls: tls,
            providerTokens: providerTokens, bundleID: bundleID)
    }

    /// Another endpoint (a simulator's management port).
    public init(host: String, port: UInt16, tls: TLSContext, providerTokens: ProviderTokenSource?, bundleID: String) {
        self.host = host
        self.port = port
        self.tls = tls
        self.providerTokens = providerTokens
        self.bundleID = bundleID
    }

    /// Throws the first setting the manager cannot work with.
    public func validate() throws(ClientConfigurationError) {
        func require(_ condition: Bool, _ field: String, _ problem: String) throws(ClientConfigurationError) {
            if !condition { throw .invalid(field: field, problem: problem) }
        }
        try require(!host.isEmpty && !host.utf8.contains(0), "host", "must be a non-empty host name")
        try require(port != 0, "port", "must be 1...65535")
        try require(
            !bundleID.isEmpty && bundleID.utf8.count <= 255
                && bundleID.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") },
            "bundleID",
            "'\(PrintableText.escaping(bundleID, limit: 64))' must be a bundle id (printable ASCII, no spaces or '/')")
        for (name, value) in [
            ("requestTimeout", requestTimeout), ("connectTimeout", connectTimeout), ("idleTimeout", idleTimeout),
        ] {
            try require(
                value > .zero && value <= ClientConfiguration.Limits.longestDuration, name,
                "\(value) must be positive and at most a week")
        }
        try require(
            (1...(64 << 20)).contains(maximumResponseBody), "maximumResponseBody",
            "\(maximumResponseBody) must be 1...64 MiB")
        try require(
            (1...1024).contains(maximumConcurrentCalls), "maximumConcurrentCalls",
            "\(maximumConcurrentCalls) must be 1...1024")
        if let connectAddresses {
            try require(
                !addressFamilies.apply(to: connectAddresses).isEmpty, "connectAddresses",
                "none is of the families asked for")
        }
        if let proxy {
            try require(connectAddresses == nil, "connectAddresses", "give connectAddresses or a proxy, not both")
            try proxy.validate(target: host)
        }
    }

    /// What a connection looks up and dials: the proxy when there is one, else the management host.
    var dialHost: String { proxy?.host ?? host }
    var dialPort: UInt16 { proxy?.port ?? port }

    /// The tunnel each connection opens first, when there is a proxy.
    var tunnel: ProxyTunnel? { proxy?.tunnel(to: host, port: port) }
}

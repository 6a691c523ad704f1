import ArgumentParser
import Foundation
import FanfareClient
import FanfareCore
import FanfareIO
import FanfareTLS

/// Where to send and how to authenticate; shared by every command that talks to APNs.
public struct ConnectionOptions: ParsableArguments {
    @Option(help: "APNs endpoint as https://host[:port] (default: Apple's production host).")
    public var endpoint: String?

    @Flag(help: "Use Apple's development host api.sandbox.push.apple.com.")
    public var sandbox = false

    @Option(help: "A PEM file of extra CA certificates to trust (e.g. the simulator's ca.pem).")
    var caFile: String?

    @Option(
        help: "The provider key (.p8) used to sign JWTs (token authentication). Or its PEM text in $FANFARE_AUTH_KEY.")
    var authKey: String?

    @Option(help: "The 10-character key ID of --auth-key.")
    var keyId: String?

    @Option(help: "The 10-character Apple team ID.")
    var teamId: String?

    @Option(help: "The app's bundle ID; the topic becomes <bundle>.push-type.liveactivity.")
    public var bundleId: String?

    @Option(help: "Client certificate (PEM) for certificate authentication (not accepted by APNs for Live Activities).")
    var clientCert: String?

    @Option(help: "Private key (PEM) of --client-cert.")
    var clientKey: String?

    @Option(help: "Seconds to wait for APNs' answer to each push.")
    public var timeout: Double = 30

    @Option(
        help: "Address families to connect over: system (the resolver's order), prefer-ipv4, prefer-ipv6, ipv4 or ipv6."
    )
    var addressFamily: String = "system"

    @Option(
        help: """
            Reach APNs (pushes and channel management) through this HTTP proxy with CONNECT: http://host:port, or \
            http://user:password@host:port (visible in ps: give user:password in $FANFARE_PROXY_AUTH instead). Only \
            this flag sets a proxy: $HTTPS_PROXY and $https_proxy are not read. TLS still runs with APNs, through the \
            tunnel.
            """)
    var proxy: String?

    public init() {}

    func resolvedEndpoint() throws(UsageError) -> Endpoint {
        if let endpoint {
            if sandbox { throw UsageError("give either --endpoint or --sandbox, not both") }
            return try Endpoint(parsing: endpoint)
        }
        return sandbox ? .sandbox : .production
    }

    /// The channel management endpoint: `--endpoint` (a simulator's management port), else Apple's management
    /// host and port of production or `--sandbox` (apns-spec.md §1.1).
    func resolvedChannelManagementEndpoint() throws(UsageError) -> Endpoint {
        if let endpoint {
            if sandbox { throw UsageError("give either --endpoint or --sandbox, not both") }
            return try Endpoint(parsing: endpoint)
        }
        let environment: APNsEndpoint = sandbox ? .sandbox : .production
        return Endpoint(host: environment.channelManagementHost, port: UInt16(environment.channelManagementPort))
    }

    /// Builds the channel manager's configuration with the same flags, files and provider token as pushes.
    func makeChannelManagementConfiguration() throws -> ChannelManagementConfiguration {
        let endpoint = try resolvedChannelManagementEndpoint()
        let (tls, tokens, bundleID) = try makeAuthentication()
        var configuration = ChannelManagementConfiguration(
            host: endpoint.host, port: endpoint.port, tls: tls, providerTokens: tokens, bundleID: bundleID)
        configuration.requestTimeout = .milliseconds(Int64(timeout * 1000))
        configuration.addressFamilies = try Self.addressFamilies(addressFamily)
        configuration.proxy = try resolvedProxy()
        return configuration
    }

    /// Builds the client configuration, checking every file and identifier with a clear message.
    public func makeClientConfiguration() throws -> ClientConfiguration {
        let endpoint = try resolvedEndpoint()
        let (tls, tokens, bundleId) = try makeAuthentication()
        var configuration = ClientConfiguration(
            host: endpoint.host, port: endpoint.port, tls: tls, providerTokens: tokens,
            topic: Topic.liveActivity(bundleID: bundleId))
        configuration.bundleID = bundleId
        configuration.requestTimeout = .milliseconds(Int64(timeout * 1000))
        configuration.addressFamilies = try Self.addressFamilies(addressFamily)
        configuration.proxy = try resolvedProxy()
        return configuration
    }

    /// `--proxy`, with the credentials of `$FANFARE_PROXY_AUTH` when it has none of its own; nil without the flag
    /// (the variable alone sets nothing).
    public func resolvedProxy() throws(UsageError) -> HTTPProxy? {
        guard let proxy else { return nil }
        var parsed: HTTPProxy
        do {
            parsed = try HTTPProxy(url: proxy)
        } catch {
            throw UsageError("--proxy '\(HTTPProxy.redacting(proxy))': \(error)")
        }
        if let credentials = ProcessInfo.processInfo.environment[Self.proxyAuthVariable], !credentials.isEmpty {
            guard parsed.username == nil else {
                throw UsageError("--proxy has credentials and so has $\(Self.proxyAuthVariable): give them once")
            }
            guard let colon = credentials.firstIndex(of: ":") else {
                throw UsageError("$\(Self.proxyAuthVariable) must be user:password")
            }
            parsed.username = String(credentials[..<colon])
            parsed.password = String(credentials[credentials.index(after: colon)...])
        }
        do {
            try parsed.validate()
        } catch {
            let problem = if case .invalid(_, let problem) = error { problem } else { "\(error)" }
            throw UsageError("--proxy '\(HTTPProxy.redacting(proxy))': \(problem)")
        }
        return parsed
    }

    /// Trust store, client certificate, provider token and bundle id, checked with a clear message each.
    private func makeAuthentication() throws -> (TLSContext, ProviderTokenSource?, String) {
        guard timeout > 0 && timeout <= 3600 else { throw UsageError("--timeout must be between 0 and 3600 seconds") }
        guard let bundleId else { throw UsageError("give --bundle-id (the app's bundle ID, e.g. com.example.app)") }
        guard !bundleId.isEmpty, !bundleId.contains(where: { $0 == " " || $0 == "/" }) else {
            throw UsageError("--bundle-id '\(bundleId)' is not a bundle identifier (e.g. com.example.app)")
        }
        if (clientCert == nil) != (clientKey == nil) {
            throw UsageError("--client-cert and --client-key go together")
        }
        let tls = try TLSContext.client(caFile: caFile, certificateFile: clientCert, privateKeyFile: clientKey)
        var tokens: ProviderTokenSource?
        // The key's PEM text may come from the environment (a secret store), never from a flag's value.
        let environmentKey = ProcessInfo.processInfo.environment[Self.authKeyVariable].flatMap { $0.isEmpty ? nil : $0 }
        if authKey != nil || environmentKey != nil {
            let source = authKey ?? "$\(Self.authKeyVariable)"
            guard let keyId else { throw UsageError("\(source) needs --key-id (the 10-character key ID)") }
            guard let teamId else { throw UsageError("\(source) needs --team-id (the 10-character team ID)") }
            let signer =
                if let authKey {
                    try ProviderTokenSigner(privateKeyPEMFile: authKey, keyID: keyId, teamID: teamId)
                } else {
                    try ProviderTokenSigner(privateKeyPEM: environmentKey ?? "", keyID: keyId, teamID: teamId)
                }
            tokens = ProviderTokenSource(signer: signer)
        } else if clientCert == nil {
            throw UsageError("give --auth-key with --key-id and --team-id (token authentication), or --client-cert")
        }
        return (tls, tokens, bundleId)
    }

    /// The environment variable that may hold the provider key's PEM text instead of `--auth-key`.
    static let authKeyVariable = "FANFARE_AUTH_KEY"
    /// The environment variable that may hold `--proxy`'s `user:password`, out of sight of ps.
    static let proxyAuthVariable = "FANFARE_PROXY_AUTH"

    /// Whether any flag that points at APNs or authenticates to it was given (`serve --simulator` takes none).
    public var namesAPNs: Bool {
        endpoint != nil || sandbox || caFile != nil || authKey != nil || keyId != nil || teamId != nil
            || clientCert != nil
            || clientKey != nil
    }

    /// `--address-family` as the client takes it.
    public func resolvedAddressFamilies() throws(UsageError) -> AddressFamilyPreference {
        try Self.addressFamilies(addressFamily)
    }

    static func addressFamilies(_ text: String) throws(UsageError) -> AddressFamilyPreference {
        switch text {
        case "system": return .system
        case "prefer-ipv4": return .preferIPv4
        case "prefer-ipv6": return .preferIPv6
        case "ipv4": return .ipv4Only
        case "ipv6": return .ipv6Only
        default: throw UsageError("--address-family '\(text)' must be system, prefer-ipv4, prefer-ipv6, ipv4 or ipv6")
        }
    }
}

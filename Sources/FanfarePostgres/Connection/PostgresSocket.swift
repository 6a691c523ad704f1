import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// The TCP connection to PostgreSQL, made here rather than by postgres-nio so that it notices a database host that
/// went silent (powered off, partitioned away: no reset ever comes) within about half a minute instead of the
/// kernel's defaults (two hours of idleness before the first keepalive probe, about 15 minutes of retransmissions):
///
/// - keepalive: a connection without traffic is probed after `keepaliveIdleSeconds`, then every
///   `keepaliveIntervalSeconds` (`keepaliveProbes` unanswered probes close it when no user timeout applies);
/// - TCP_USER_TIMEOUT: once the host has acknowledged nothing for `userTimeoutMilliseconds` (probes unanswered,
///   or data sent), Linux closes the connection: about 30 s either way.
///
/// Either way the connection fails with an error, the call on it fails `.unavailable` and the next call opens a new
/// one. A server that is up but slow (a long statement, a frozen process whose kernel still acknowledges) is not
/// affected: `PostgresTokenStore.callTimeout` bounds that.
enum PostgresSocket {
    static let keepaliveIdleSeconds: Int = 10
    static let keepaliveIntervalSeconds: Int = 5
    static let keepaliveProbes: Int = 3
    static let userTimeoutMilliseconds: Int = 30_000
    /// How long the TCP connection may take to establish (and, in postgres-nio, the TLS and startup handshake).
    static let connectTimeout = TimeAmount.seconds(10)

    /// The socket options every connection is made with (level, option, value), as `getsockopt` reads them back.
    static let options: [(option: ChannelOptions.Types.SocketOption, value: Int)] = [
        (.socketOption(.so_keepalive), 1),
        (.tcpOption(.init(rawValue: TCP_KEEPIDLE)), keepaliveIdleSeconds),
        (.tcpOption(.init(rawValue: TCP_KEEPINTVL)), keepaliveIntervalSeconds),
        (.tcpOption(.init(rawValue: TCP_KEEPCNT)), keepaliveProbes),
        (.tcpOption(.init(rawValue: CInt(TCP_USER_TIMEOUT))), userTimeoutMilliseconds),
    ]

    /// A connected channel to `host:port` on `eventLoop` with `options` set, no handlers yet (postgres-nio adds
    /// its own).
    static func connect(host: String, port: Int, on eventLoop: any EventLoop) -> EventLoopFuture<any Channel> {
        var bootstrap = ClientBootstrap(group: eventLoop).connectTimeout(connectTimeout)
        for (option, value) in options { bootstrap = bootstrap.channelOption(option, value: value) }
        return bootstrap.connect(host: host, port: port)
    }

    /// Whether `host` is an IPv4 or IPv6 address (no server name to send or check: the certificate's IP address
    /// entries are matched against the peer's address instead).
    static func isIPAddress(_ host: String) -> Bool {
        var ipv4 = in_addr()
        var ipv6 = in6_addr()
        return host.withCString { inet_pton(AF_INET, $0, &ipv4) == 1 || inet_pton(AF_INET6, $0, &ipv6) == 1 }
    }
}

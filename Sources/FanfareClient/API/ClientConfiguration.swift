import FanfareCore
import FanfareTLS

/// Where and how the client connects, and the limits it keeps. Defaults follow apns-spec.md §1.
public struct ClientConfiguration: Sendable {
    /// Host name used for DNS, SNI and certificate checks (`api.push.apple.com` in production).
    public var host: String
    public var port: UInt16
    /// TLS settings shared by every connection (trust store, optional client certificate).
    public var tls: TLSContext
    /// Provider-token (JWT) authentication; nil for certificate authentication.
    public var providerTokens: ProviderTokenSource?
    /// `apns-topic` for every request (Live Activities: `<bundle>.push-type.liveactivity`).
    public var topic: String
    /// `apns-push-type` for every request.
    public var pushType: String = "liveactivity"

    /// Worker threads, each with its own io_uring ring and connections (thread-per-core).
    public var workerCount: Int = 1
    /// Connections per worker.
    public var connectionsPerWorker: Int = 1
    /// Our own cap on concurrent streams per connection; the server's SETTINGS may lower it further.
    public var maxConcurrentStreamsPerConnection: Int = 1000
    /// Send exactly one request on a fresh token-auth connection and wait for its 200 before fanning out
    /// (APNs starts such connections at one stream).
    public var firstRequestAlone: Bool = true
    /// Pushes waiting for a stream per worker; beyond this, `submit` reports back-pressure.
    public var pendingCapacityPerWorker: Int = 1 << 16
    /// Cross-thread inbox size per worker.
    public var inboxCapacityPerWorker: Int = 1 << 14

    /// Time allowed for one push from submission to its answer, unless the push sets its own.
    public var requestTimeout: Duration = .seconds(30)
    /// TCP connect + TLS handshake limit.
    public var connectTimeout: Duration = .seconds(10)
    /// Send an HTTP/2 PING after this much silence on a connection ...
    public var pingInterval: Duration = .seconds(60)
    /// ... and drop the connection if nothing arrives within this time after the PING.
    public var pingTimeout: Duration = .seconds(10)
    /// Reconnect back-off: doubles from the minimum to the maximum, with jitter.
    public var reconnectBackoffMinimum: Duration = .milliseconds(100)
    public var reconnectBackoffMaximum: Duration = .seconds(30)
    /// Drain a connection and open a fresh one after this many streams (HTTP/2 stream ids run out at 2^31).
    public var rotateAfterStreams: Int = 1_000_000_000
    /// How many times one push may be re-sent after its connection failed or refused it unprocessed
    /// (GOAWAY, REFUSED_STREAM, connection loss, ExpiredProviderToken).
    public var maxResends: Int = 5
    /// Re-send pushes whose connection ended after they were sent but before APNs answered (they may have
    /// been processed, so a resend may deliver twice; such results carry `possibleDuplicate`). Off by
    /// default: they end as `.failed(.unconfirmed)` for the caller to decide.
    public var resendUnconfirmed: Bool = false
    /// Pin worker `i` to CPU `cpuAffinity[i % count]` when set.
    public var cpuAffinity: [Int]? = nil
    /// Connection buffers.
    public var buffers: TransportBufferSizes = TransportBufferSizes()

    public init(host: String, port: UInt16 = 443, tls: TLSContext, providerTokens: ProviderTokenSource?, topic: String) {
        self.host = host
        self.port = port
        self.tls = tls
        self.providerTokens = providerTokens
        self.topic = topic
    }
}

import FanfareHTTP2

extension Duration {
    /// Whole nanoseconds, saturating (control plane only).
    var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        if seconds < 0 { return 0 }
        let whole = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if whole.overflow { return .max }
        return whole.partialValue &+ UInt64(attoseconds / 1_000_000_000)
    }
}

/// A client configuration that cannot work, found when the client is created.
public enum ClientConfigurationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The fixed header fields (host, topic, push type, provider token) leave no room in one request's
    /// header block.
    case headersTooLarge(bytes: Int, limit: Int)

    public var description: String {
        switch self {
        case .headersTooLarge(let bytes, let limit):
            return "request headers could take \(bytes) bytes, more than the \(limit) one request may use: shorten the topic or host"
        }
    }
}

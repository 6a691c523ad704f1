/// An HTTP CONNECT tunnel (RFC 9110 §9.3.6) that a `SecureTransport` opens through a proxy before TLS: the
/// request it sends and the proxy's answer as it arrives. TLS then runs end to end with the tunnel's far end;
/// the proxy sees only the host and port.
public struct ProxyTunnel: Sendable {
    /// The proxy as configured (`host:port`, never credentials): messages name it.
    public let proxy: String
    /// The far end, `host:port` (`[v6]:port`).
    public let target: String
    /// `CONNECT target HTTP/1.1`, `Host`, and `Proxy-Authorization` when given.
    public let request: [UInt8]
    /// Whether the request carries credentials (a 407 then means they were refused).
    public let sendsCredentials: Bool
    var head = ProxyResponseHead()

    /// `authorization` is the whole `Proxy-Authorization` value (`Basic …`). The caller checked that the names hold
    /// no spaces or control characters.
    public init(proxy: String, targetHost: String, targetPort: UInt16, authorization: String?) {
        self.proxy = proxy
        target = Self.hostPort(targetHost, targetPort)
        var text = "CONNECT \(target) HTTP/1.1\r\nHost: \(target)\r\n"
        if let authorization { text += "Proxy-Authorization: \(authorization)\r\n" }
        text += "\r\n"
        request = Array(text.utf8)
        sendsCredentials = authorization != nil
    }

    /// `host:port`, an IPv6 literal in brackets.
    public static func hostPort(_ host: String, _ port: UInt16) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// Why the proxy's final answer `status` did not open the tunnel, for the transport's close reason.
    func refusal(status: Int, reason: String) -> String {
        var text = "proxy \(proxy) refused CONNECT \(target): \(status)"
        if !reason.isEmpty { text += " \(reason)" }
        switch status {
        case 407:
            text += sendsCredentials ? " (it refused the credentials given)" : " (it wants credentials)"
        case 403:
            text += " (its rules do not allow this host or port)"
        case 502, 503, 504:
            text += " (it could not reach \(target))"
        default:
            break
        }
        return text
    }
}

// What went wrong on an established or handshaking TLS connection, in words.

/// A fatal TLS error on one connection. After it, flush `takeCiphertext` (it may hold an alert for
/// the peer) and close the socket; the connection cannot recover.
public struct TLSFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// We rejected the peer's certificate (untrusted CA, wrong host name, expired...): a
        /// configuration problem, retrying will not help.
        case peerCertificateRejected
        /// The handshake finished without agreeing on HTTP/2 (`h2`) through ALPN.
        case applicationProtocolNotNegotiated
        /// Anything else: an alert from the peer, a malformed record, a renegotiation attempt.
        case protocolError
    }

    public let kind: Kind
    /// One line, e.g. `certificate verify failed: unable to get local issuer certificate (peer 'localhost')`.
    public let message: String

    public init(kind: Kind, message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

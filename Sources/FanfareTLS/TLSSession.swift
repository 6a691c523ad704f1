// A resumable TLS session, handed from one client connection to the next to skip a full handshake.
import COpenSSL

/// An `SSL_SESSION` taken from a finished client connection (`TLSConnection.session`) and offered
/// on the next connection to the same server (`TLSConnection(client:serverName:resuming:)`).
/// OpenSSL sessions are reference counted and not modified once handed out, so they can move
/// between threads.
public final class TLSSession: @unchecked Sendable {
    /// `SSL_SESSION*`, one reference owned by this object.
    let pointer: OpaquePointer

    init(owning pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        SSL_SESSION_free(pointer)
    }
}

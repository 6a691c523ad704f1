/// Where a client session writes its frames: the transport's plaintext staging buffer in production
/// (`SecureTransport`), an in-memory pipe in tests. Frames are written in place: reserve, write, commit.
///
/// A base class rather than a protocol so the session can hold it unretained and call it without reference
/// counting (see `HTTP2ClientSessionDelegate`). Subclasses override every member.
open class HTTP2FrameSink {
    public init() {}

    /// The most one reservation may ask for.
    open var plaintextCapacity: Int { fatalError("\(Self.self) must override plaintextCapacity") }
    /// True while enough is waiting to be sent that no new requests should be written.
    open var isBackedUp: Bool { fatalError("\(Self.self) must override isBackedUp") }
    /// Room for `count` bytes, or nil once the connection is closing (the frame is then dropped).
    open func reservePlaintext(_ count: Int) -> UnsafeMutableRawPointer? {
        fatalError("\(Self.self) must override reservePlaintext")
    }
    /// The first `count` reserved bytes are a frame to send.
    open func commitPlaintext(_ count: Int) { fatalError("\(Self.self) must override commitPlaintext") }
    /// Asks for a flush (and so a `produce`) soon.
    open func setNeedsFlush() { fatalError("\(Self.self) must override setNeedsFlush") }
}

/// What a client session reports to its owner (subclass it and override every method). Every call happens
/// on the loop thread, from inside `HTTP2ClientSession.receive`, `produce` or `cancel`.
///
/// A class rather than a protocol: the session calls it several times per request through an unretained
/// reference, and a protocol existential cannot be held that way (each call through one cost a
/// retain/release pair). Requests are identified by the owner's own small integers (its slot indices,
/// `0..<capacity`).
open class HTTP2ClientSessionDelegate {
    public init() {}

    /// Writes the request's header fields into its HEADERS block (a pending table-size update is already in).
    open func http2WriteRequestHeaders(request: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter) {
        fatalError("\(Self.self) must override http2WriteRequestHeaders")
    }

    /// The request body; it must stay unchanged until the stream closes.
    open func http2RequestBody(request: Int) -> UnsafeRawBufferPointer {
        fatalError("\(Self.self) must override http2RequestBody")
    }

    /// One field of a response header block (informational and trailer blocks included).
    open func http2ResponseHeader(request: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {}

    open func http2ResponseData(request: Int, bytes: UnsafeRawBufferPointer) {}

    /// The stream is over and the request number is free again. `errorCode` is NO_ERROR after a complete
    /// response. `processed` is false when the server certainly did not act on the request: its HEADERS
    /// were never written, it was refused (REFUSED_STREAM), or it was above the last stream id of a GOAWAY.
    /// It is true when the server answered, or when the request went out and may have been acted on
    /// (reset with another code, or the connection ended before an answer: see `connectionLost`).
    open func http2StreamClosed(request: Int, errorCode: UInt32, processed: Bool) {
        fatalError("\(Self.self) must override http2StreamClosed")
    }

    /// The server's SETTINGS arrived (and were acknowledged); nil means no stream limit.
    open func http2RemoteSettingsChanged(maxConcurrentStreams: Int?) {}

    /// A GOAWAY arrived; streams above `lastStreamID` are closed unprocessed right after this call.
    open func http2GoAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: UnsafeRawBufferPointer) {}
}

/// What a server session reports to its owner (subclass it and override every method). Every call happens on
/// the loop thread, from inside `HTTP2ServerSession.receive`, `produce`, `respond` or `connectionLost`.
///
/// A class rather than a protocol for the reason `HTTP2ClientSessionDelegate` gives: the session calls it
/// several times per request through an unretained reference. Streams are identified by the session's own
/// small integers (`0..<capacity`), handed out when a stream opens and free again after `http2StreamClosed`.
open class HTTP2ServerSessionDelegate {
    public init() {}

    /// A client opened a stream (its HEADERS arrived, within the stream limit). Return false to refuse it: the
    /// session resets it with REFUSED_STREAM and reports nothing more about it.
    open func http2StreamOpened(stream: Int, streamID: Int32) -> Bool {
        fatalError("\(Self.self) must override http2StreamOpened")
    }

    /// One field of the request's header block (in order; trailers are decoded but not reported).
    open func http2RequestHeader(stream: Int, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {}

    /// Request body bytes (padding removed).
    open func http2RequestData(stream: Int, bytes: UnsafeRawBufferPointer) {}

    /// The request is complete (END_STREAM arrived): answer it with `respond`, now or later.
    open func http2RequestEnded(stream: Int) {
        fatalError("\(Self.self) must override http2RequestEnded")
    }

    /// Writes the response's header fields, `:status` first, into its HEADERS block.
    open func http2WriteResponseHeaders(stream: Int, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter) {
        fatalError("\(Self.self) must override http2WriteResponseHeaders")
    }

    /// The response body (empty: none); it must stay unchanged until the stream closes.
    open func http2ResponseBody(stream: Int) -> UnsafeRawBufferPointer {
        fatalError("\(Self.self) must override http2ResponseBody")
    }

    /// The stream is over and its number is free again: `errorCode` is NO_ERROR once the response's END_STREAM
    /// was written, otherwise the code of the client's RST_STREAM, of ours, or of the connection's end.
    open func http2StreamClosed(stream: Int, errorCode: UInt32) {
        fatalError("\(Self.self) must override http2StreamClosed")
    }

    /// A RST_STREAM left for `streamID` (REFUSED_STREAM for streams above the limit or refused by the owner).
    open func http2ResetSent(streamID: Int32, errorCode: UInt32) {}

    /// The request on `streamID` was malformed (RFC 9113 §8.1.1: `problem` says how) and was reset with
    /// PROTOCOL_ERROR; its `http2StreamClosed` follows.
    open func http2MalformedRequest(streamID: Int32, problem: StaticString) {}
}

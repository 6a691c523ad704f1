/// What the connection hands its session from `HTTP2Connection.nextFrame`: a frame of one of the session's
/// streams, a whole header block, or news the session acts on. Everything else the connection did itself. The
/// buffers point into the read (or the connection's own buffers) and are valid until the next `nextFrame`.
enum HTTP2InboundFrame {
    /// DATA on the session's stream number `stream`, padding removed; the connection window has counted
    /// `received` (the whole payload), the stream's window is for the session to count
    /// (`HTTP2Connection.receiveStreamData`) once it knows the stream may still receive.
    case data(stream: Int, streamID: Int32, data: UnsafeRawBufferPointer, received: Int, endsStream: Bool)
    /// A whole header block (HEADERS and its CONTINUATIONs), to decode whatever the stream: the HPACK tables must
    /// stay in step. `stream` is nil when no stream of the session has the id (closed, or new on a server).
    case headers(stream: Int?, streamID: Int32, block: UnsafeRawBufferPointer, endsStream: Bool)
    /// RST_STREAM on the session's stream number `stream`.
    case reset(stream: Int, errorCode: UInt32)
    /// The peer's SETTINGS were applied and acknowledged. `streamWindowsGrew`: a larger
    /// SETTINGS_INITIAL_WINDOW_SIZE opened every stream's send window further.
    case settings(streamWindowsGrew: Bool)
    /// The peer acknowledged one of our SETTINGS frames (`HTTP2Connection.unacknowledgedSettings` is one less).
    case settingsAcknowledged
    case goAway(lastStreamID: Int32, errorCode: UInt32, debug: UnsafeRawBufferPointer)
    /// A WINDOW_UPDATE opened the connection's send window or an open stream's.
    case windowOpened
}

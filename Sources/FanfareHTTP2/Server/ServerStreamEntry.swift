/// The server session's per-stream state (in an `HTTP2StreamTable`, indexed by the session's stream number).
struct ServerStreamEntry: HTTP2StreamEntry {
    enum Phase: UInt8 {
        /// Not in use.
        case idle
        /// HEADERS arrived; the request is still coming (DATA or trailers owed).
        case receiving
        /// END_STREAM arrived (half-closed remote); waiting for `respond`.
        case awaitingResponse
        /// `respond` was called: waiting in the response queue for `produce`.
        case queued
        /// Out of the queue, its response being written (in no list).
        case writing
        /// Response HEADERS written; body DATA waits in the blocked list for window.
        case blocked
    }

    var phase: Phase = .idle
    /// The request's END_STREAM arrived (a response may be queued before it, then the stream ends with
    /// RST_STREAM NO_ERROR, §8.1).
    var requestEnded = false
    var streamID: Int32 = 0
    /// What the client lets us send on this stream (its SETTINGS_INITIAL_WINDOW_SIZE and WINDOW_UPDATEs).
    var sendWindow: Int32 = 0
    var bodySent: Int32 = 0
    /// Request DATA received and not yet given back with WINDOW_UPDATE.
    var receivedUnacknowledged: Int32 = 0
    /// The request's `content-length` (-1: none) and the DATA received so far, which must match it (§8.1.1).
    var contentLength: Int64 = -1
    var bodyReceived: Int64 = 0
    /// Links into the response queue or the blocked list (never both).
    var next: Int32 = -1
    var previous: Int32 = -1

    init() {}
}

typealias ServerStreamTable = HTTP2StreamTable<ServerStreamEntry>

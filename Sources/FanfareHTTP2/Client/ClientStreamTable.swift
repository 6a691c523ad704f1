/// The client session's per-request stream state (in an `HTTP2StreamTable`, indexed by request number).
struct ClientStreamEntry: HTTP2StreamEntry {
    enum Phase: UInt8 {
        /// Not in use.
        case idle
        /// Waiting in the send queue; no stream id yet.
        case queued
        /// HEADERS sent; DATA still owed (after its batch's HEADERS, or waiting for window) in the blocked list.
        case blocked
        /// Request fully sent (END_STREAM); waiting for the response.
        case open
    }

    var phase: Phase = .idle
    var streamID: Int32 = 0
    var sendWindow: Int32 = 0
    var payloadSent: Int32 = 0
    var receivedUnacknowledged: Int32 = 0
    /// Links into the send queue or the blocked list (never both).
    var next: Int32 = -1
    var previous: Int32 = -1
    /// Report every response header of this request, even when the session reports only `:status`.
    var reportsHeaders = false

    init() {}
}

typealias ClientStreamTable = HTTP2StreamTable<ClientStreamEntry>

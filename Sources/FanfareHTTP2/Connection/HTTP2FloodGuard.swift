/// What a peer may make us do for nothing before the connection ends with ENHANCE_YOUR_CALM (RFC 9113 §10.5),
/// kept in one place for both roles as nghttp2 keeps its glitch limit: frames in a row that carry nothing (empty
/// DATA without END_STREAM, empty header block fragments, frames of unknown types: each is legal, and a peer can
/// send them without end), and streams the peer resets beyond those we answered (a "rapid reset" flood: streams
/// opened and cancelled at once make a server work without bound; a client is never asked, as a server can only
/// reset streams we opened). Both counts start over when the connection does useful work: a response written (a
/// server) or received (a client). Control frames owed to a peer that does not read are bounded by
/// `HTTP2ControlFrames`, endless header blocks by `HTTP2HeaderBlockBuffer`.
struct HTTP2FloodGuard {
    let maxEmptyFrames: Int
    let maxResetsBeyondAnswers: Int
    private var emptyFrames = 0
    private var resetCredit: Int

    init(maxEmptyFrames: Int, maxResetsBeyondAnswers: Int) {
        precondition(maxEmptyFrames > 0 && maxResetsBeyondAnswers > 0)
        self.maxEmptyFrames = maxEmptyFrames
        self.maxResetsBeyondAnswers = maxResetsBeyondAnswers
        resetCredit = maxResetsBeyondAnswers
    }

    /// A frame that carries nothing arrived.
    @inline(__always)
    mutating func countEmptyFrame() throws(HTTP2ConnectionError) {
        emptyFrames += 1
        if emptyFrames > maxEmptyFrames {
            throw HTTP2ConnectionError(
                HTTP2ErrorCode.enhanceYourCalm, "over \(maxEmptyFrames) frames in a row that carry nothing")
        }
    }

    /// The peer reset one of its streams before we answered it.
    @inline(__always)
    mutating func countReset() throws(HTTP2ConnectionError) {
        resetCredit -= 1
        guard resetCredit >= 0 else {
            throw HTTP2ConnectionError(
                HTTP2ErrorCode.enhanceYourCalm, "over \(maxResetsBeyondAnswers) streams reset beyond those answered")
        }
    }

    /// A response went out (server) or came in (client): the peer may reset one more stream, and the frames
    /// that carry nothing count from zero again.
    @inline(__always)
    mutating func answered() {
        if resetCredit < maxResetsBeyondAnswers { resetCredit += 1 }
        emptyFrames = 0
    }
}

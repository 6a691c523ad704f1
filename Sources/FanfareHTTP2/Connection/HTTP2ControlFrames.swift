#if canImport(Glibc)
import Glibc
#endif

/// Writes the frames a session owes its peer outside requests and responses (SETTINGS and its ACK, PING ACK,
/// WINDOW_UPDATE, RST_STREAM, GOAWAY) straight into the transport's staging buffer, and counts those written
/// while the transport is backed up: a peer that makes us owe it frames without reading them is flooding us
/// (§10.5), and past `maxQueued` the session ends the connection with ENHANCE_YOUR_CALM, as nghttp2 does.
struct HTTP2ControlFrames {
    private let sink: HTTP2Unretained<HTTP2FrameSink>
    let maxQueued: Int
    private(set) var writtenWhileBackedUp = 0

    init(sink: HTTP2FrameSink, maxQueued: Int) {
        precondition(maxQueued > 0)
        self.sink = HTTP2Unretained(sink)
        self.maxQueued = maxQueued
    }

    /// The peer reads again (the transport drained): the count starts over.
    @inline(__always)
    mutating func transportDrained() {
        if !sink.with({ $0.isBackedUp }) { writtenWhileBackedUp = 0 }
    }

    /// Past the bound: the caller ends the connection.
    @inline(__always)
    func checkBound() throws(HTTP2ConnectionError) {
        if writtenWhileBackedUp > maxQueued {
            throw HTTP2ConnectionError(
                HTTP2ErrorCode.enhanceYourCalm, "the peer made us queue over \(maxQueued) frames without reading them")
        }
    }

    /// Writes one frame at once (the owner flushes after the read or produce that wrote it); dropped when the
    /// transport is closing.
    @inline(__always)
    mutating func write(
        type: HTTP2FrameType, flags: UInt8, streamID: Int32, payloadLength: Int,
        _ payload: (UnsafeMutableRawPointer) -> Void
    ) {
        let total = HTTP2Limits.frameHeaderSize + payloadLength
        sink.with { sink in
            guard let base = sink.reservePlaintext(total) else { return }
            if sink.isBackedUp { writtenWhileBackedUp += 1 }
            HTTP2FrameHeader.write(to: base, length: payloadLength, type: type, flags: flags, streamID: streamID)
            payload(base + HTTP2Limits.frameHeaderSize)
            sink.commitPlaintext(total)
        }
    }

    mutating func writeSettings(_ settings: [(UInt16, UInt32)]) {
        write(type: .settings, flags: 0, streamID: 0, payloadLength: 6 * settings.count) { cursor in
            for (index, (identifier, value)) in settings.enumerated() {
                HTTP2FrameHeader.writeUInt16(identifier, to: cursor + 6 * index)
                HTTP2FrameHeader.writeUInt32(value, to: cursor + 6 * index + 2)
            }
        }
    }

    /// One setting, without building an array (SETTINGS_MAX_CONCURRENT_STREAMS changes on a hot connection).
    mutating func writeSetting(_ identifier: UInt16, _ value: UInt32) {
        write(type: .settings, flags: 0, streamID: 0, payloadLength: 6) { cursor in
            HTTP2FrameHeader.writeUInt16(identifier, to: cursor)
            HTTP2FrameHeader.writeUInt32(value, to: cursor + 2)
        }
    }

    mutating func writeSettingsAck() {
        write(type: .settings, flags: HTTP2FrameFlag.ack, streamID: 0, payloadLength: 0) { _ in }
    }

    mutating func writePing(ack: Bool, opaque: UnsafeRawPointer?) {
        write(type: .ping, flags: ack ? HTTP2FrameFlag.ack : 0, streamID: 0, payloadLength: 8) {
            if let opaque {
                $0.copyMemory(from: opaque, byteCount: 8)
            } else {
                $0.storeBytes(of: UInt64(0), as: UInt64.self)
            }
        }
    }

    mutating func writeWindowUpdate(streamID: Int32, increment: Int) {
        write(type: .windowUpdate, flags: 0, streamID: streamID, payloadLength: 4) {
            HTTP2FrameHeader.writeUInt32(UInt32(increment), to: $0)
        }
    }

    mutating func writeReset(streamID: Int32, errorCode: UInt32) {
        write(type: .rstStream, flags: 0, streamID: streamID, payloadLength: 4) {
            HTTP2FrameHeader.writeUInt32(errorCode, to: $0)
        }
    }

    /// GOAWAY with up to 256 bytes of debug data.
    mutating func writeGoAway(lastStreamID: Int32, errorCode: UInt32, debug: UnsafeRawBufferPointer) {
        let debugCount = min(debug.count, 256)
        write(type: .goAway, flags: 0, streamID: 0, payloadLength: 8 + debugCount) { payload in
            HTTP2FrameHeader.writeUInt32(UInt32(bitPattern: lastStreamID), to: payload)
            HTTP2FrameHeader.writeUInt32(errorCode, to: payload + 4)
            if let base = debug.baseAddress, debugCount > 0 {
                (payload + 8).copyMemory(from: base, byteCount: debugCount)
            }
        }
    }

    mutating func writeGoAway(lastStreamID: Int32, errorCode: UInt32, debug: String) {
        var text = debug
        text.withUTF8 {
            writeGoAway(lastStreamID: lastStreamID, errorCode: errorCode, debug: UnsafeRawBufferPointer($0))
        }
    }
}

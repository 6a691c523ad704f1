/// Checks on frame payloads both sides read the same way (RFC 9113 §6).
enum HTTP2FramePayload {
    /// Strips the PADDED (and PRIORITY) fields of a DATA or HEADERS payload.
    @inline(__always)
    static func unpadded(
        _ payload: UnsafeRawBufferPointer, flags: UInt8, priorityBytes: Int
    ) throws(HTTP2ConnectionError) -> UnsafeRawBufferPointer {
        var start = 0
        var end = payload.count
        if flags & HTTP2FrameFlag.padded != 0 {
            guard end >= 1 else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "padded frame without a pad length")
            }
            let padding = Int(payload[0])
            start = 1
            guard padding <= end - start - priorityBytes else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "padding longer than the frame")
            }
            end -= padding
        }
        guard end - start >= priorityBytes else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "frame too short for its priority fields")
        }
        start += priorityBytes
        return UnsafeRawBufferPointer(rebasing: payload[start..<end])
    }

    /// The parameters of a SETTINGS frame that is not an ACK, checked as §6.5.2 requires of every peer
    /// (ENABLE_PUSH 0 or 1, INITIAL_WINDOW_SIZE ≤ 2^31-1, MAX_FRAME_SIZE within its range); each one goes to
    /// `setting(identifier, value)` in order, unknown identifiers included (the caller ignores them).
    static func forEachSetting(
        _ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32,
        _ setting: (UInt16, UInt32) throws(HTTP2ConnectionError) -> Void
    ) throws(HTTP2ConnectionError) {
        guard streamID == 0 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "SETTINGS on stream \(streamID)")
        }
        guard payload.count % 6 == 0 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "SETTINGS of \(payload.count) bytes")
        }
        var offset = 0
        while offset < payload.count {
            let identifier = HTTP2FrameHeader.readUInt16(payload.baseAddress! + offset)
            let value = HTTP2FrameHeader.readUInt32(payload.baseAddress! + offset + 2)
            offset += 6
            try check(identifier, value)
            try setting(identifier, value)
        }
    }

    private static func check(_ identifier: UInt16, _ value: UInt32) throws(HTTP2ConnectionError) {
        switch identifier {
        case HTTP2SettingID.enablePush:
            guard value <= 1 else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "SETTINGS_ENABLE_PUSH \(value)")
            }
        case HTTP2SettingID.initialWindowSize:
            guard value <= UInt32(HTTP2Limits.maxWindowSize) else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.flowControlError, "SETTINGS_INITIAL_WINDOW_SIZE \(value)")
            }
        case HTTP2SettingID.maxFrameSize:
            let range = UInt32(HTTP2Limits.defaultMaxFrameSize)...UInt32(HTTP2Limits.maxFrameSizeCeiling)
            guard range.contains(value) else {
                throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "SETTINGS_MAX_FRAME_SIZE \(value)")
            }
        default:
            break
        }
    }

    /// A PING (§6.7): on stream 0, 8 bytes. True when it is an acknowledgement (nothing to answer).
    @inline(__always)
    static func isPingAcknowledgement(
        _ payload: UnsafeRawBufferPointer, flags: UInt8, streamID: Int32
    ) throws(HTTP2ConnectionError) -> Bool {
        guard streamID == 0 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "PING on stream \(streamID)")
        }
        guard payload.count == 8 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "PING of \(payload.count) bytes")
        }
        return flags & HTTP2FrameFlag.ack != 0
    }

    /// A GOAWAY (§6.8): on stream 0, at least 8 bytes; its last stream id, error code and debug data.
    static func goAway(
        _ payload: UnsafeRawBufferPointer, streamID: Int32
    ) throws(HTTP2ConnectionError) -> (lastStreamID: Int32, errorCode: UInt32, debug: UnsafeRawBufferPointer) {
        guard streamID == 0 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "GOAWAY on stream \(streamID)")
        }
        guard payload.count >= 8 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "GOAWAY of \(payload.count) bytes")
        }
        let last = Int32(bitPattern: HTTP2FrameHeader.readUInt32(payload.baseAddress!) & 0x7fff_ffff)
        let code = HTTP2FrameHeader.readUInt32(payload.baseAddress! + 4)
        return (last, code, UnsafeRawBufferPointer(rebasing: payload[8...]))
    }

    /// The increment of a WINDOW_UPDATE (§6.9): 4 bytes, reserved bit ignored, never 0.
    @inline(__always)
    static func windowIncrement(
        _ payload: UnsafeRawBufferPointer, streamID: Int32
    ) throws(HTTP2ConnectionError) -> Int {
        guard payload.count == 4 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "WINDOW_UPDATE of \(payload.count) bytes")
        }
        let increment = Int(HTTP2FrameHeader.readUInt32(payload.baseAddress!) & 0x7fff_ffff)
        guard increment > 0 else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.protocolError, "WINDOW_UPDATE of 0 on stream \(streamID)")
        }
        return increment
    }
}

/// A receive window we announced (the connection's, or one stream's): DATA must stay inside it (§6.9.1), and
/// what was received goes back to the peer with WINDOW_UPDATE once half of the window is used.
enum HTTP2ReceiveWindow {
    /// Counts `received` bytes (the whole payload, padding included) against `window`, of which
    /// `unacknowledged` is already used. Returns the WINDOW_UPDATE increment to send now, or 0; throws
    /// FLOW_CONTROL_ERROR when the peer sent beyond the window.
    @inline(__always)
    static func receive(
        _ received: Int, window: Int, unacknowledged: inout Int, sendsUpdate: Bool = true,
        _ what: @autoclosure () -> String
    ) throws(HTTP2ConnectionError) -> Int {
        guard received <= window - unacknowledged else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.flowControlError, "DATA beyond \(what())'s receive window")
        }
        unacknowledged += received
        guard sendsUpdate && unacknowledged >= window / 2 else { return 0 }
        let increment = unacknowledged
        unacknowledged = 0
        return increment
    }
}

/// HTTP/2 frame vocabulary (RFC 9113 §4, §6, §7) for Fanfare's own client framing.

/// Frame types the client sends or understands; anything else is ignored, as §5.5 requires.
public enum HTTP2FrameType: UInt8, Sendable {
    case data = 0x0
    case headers = 0x1
    case priority = 0x2
    case rstStream = 0x3
    case settings = 0x4
    case pushPromise = 0x5
    case ping = 0x6
    case goAway = 0x7
    case windowUpdate = 0x8
    case continuation = 0x9
}

/// Frame flag bits (their meaning depends on the frame type).
public enum HTTP2FrameFlag {
    public static let endStream: UInt8 = 0x1
    public static let ack: UInt8 = 0x1
    public static let endHeaders: UInt8 = 0x4
    public static let padded: UInt8 = 0x8
    public static let priority: UInt8 = 0x20
}

/// Error codes carried by RST_STREAM and GOAWAY (§7).
public enum HTTP2ErrorCode {
    public static let noError: UInt32 = 0x0
    public static let protocolError: UInt32 = 0x1
    public static let internalError: UInt32 = 0x2
    public static let flowControlError: UInt32 = 0x3
    public static let settingsTimeout: UInt32 = 0x4
    public static let streamClosed: UInt32 = 0x5
    public static let frameSizeError: UInt32 = 0x6
    public static let refusedStream: UInt32 = 0x7
    public static let cancel: UInt32 = 0x8
    public static let compressionError: UInt32 = 0x9
    public static let connectError: UInt32 = 0xa
    public static let enhanceYourCalm: UInt32 = 0xb
    public static let inadequateSecurity: UInt32 = 0xc
    public static let http11Required: UInt32 = 0xd

    /// The RFC's name for `code` (unknown codes as hex).
    public static func name(_ code: UInt32) -> String {
        let names = [
            "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT", "STREAM_CLOSED",
            "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
        ]
        return code < names.count ? names[Int(code)] : "error 0x\(String(code, radix: 16))"
    }
}

/// SETTINGS identifiers (§6.5.2).
public enum HTTP2SettingID {
    public static let headerTableSize: UInt16 = 0x1
    public static let enablePush: UInt16 = 0x2
    public static let maxConcurrentStreams: UInt16 = 0x3
    public static let initialWindowSize: UInt16 = 0x4
    public static let maxFrameSize: UInt16 = 0x5
    public static let maxHeaderListSize: UInt16 = 0x6
}

/// Protocol limits that are not settings.
public enum HTTP2Limits {
    public static let frameHeaderSize = 9
    /// Every peer must accept frames this large (SETTINGS_MAX_FRAME_SIZE starts here).
    public static let defaultMaxFrameSize = 16_384
    public static let maxFrameSizeCeiling = 16_777_215
    public static let defaultWindowSize = 65_535
    public static let maxWindowSize = 2_147_483_647
    public static let maxStreamID: Int32 = 2_147_483_647
    /// The client connection preface (§3.4).
    public static let clientPreface: StaticString = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
}

/// Reads and writes the 9-byte frame header and the big-endian fields inside frames.
public enum HTTP2FrameHeader {
    @inline(__always)
    public static func write(
        to destination: UnsafeMutableRawPointer, length: Int, type: HTTP2FrameType, flags: UInt8, streamID: Int32
    ) {
        assert(length >= 0 && length <= HTTP2Limits.maxFrameSizeCeiling && streamID >= 0)
        destination.storeBytes(of: UInt8(truncatingIfNeeded: length >> 16), toByteOffset: 0, as: UInt8.self)
        destination.storeBytes(of: UInt8(truncatingIfNeeded: length >> 8), toByteOffset: 1, as: UInt8.self)
        destination.storeBytes(of: UInt8(truncatingIfNeeded: length), toByteOffset: 2, as: UInt8.self)
        destination.storeBytes(of: type.rawValue, toByteOffset: 3, as: UInt8.self)
        destination.storeBytes(of: flags, toByteOffset: 4, as: UInt8.self)
        writeUInt32(UInt32(bitPattern: streamID), to: destination + 5)
    }

    @inline(__always)
    public static func writeUInt32(_ value: UInt32, to destination: UnsafeMutableRawPointer) {
        destination.storeBytes(of: value.bigEndian, as: UInt32.self)
    }

    @inline(__always)
    public static func writeUInt16(_ value: UInt16, to destination: UnsafeMutableRawPointer) {
        destination.storeBytes(of: value.bigEndian, as: UInt16.self)
    }

    @inline(__always)
    public static func readUInt32(_ source: UnsafeRawPointer) -> UInt32 {
        UInt32(bigEndian: source.loadUnaligned(as: UInt32.self))
    }

    @inline(__always)
    public static func readUInt16(_ source: UnsafeRawPointer) -> UInt16 {
        UInt16(bigEndian: source.loadUnaligned(as: UInt16.self))
    }

    /// Length, type byte, flags and stream id (reserved bit cleared) of the header at `source`.
    @inline(__always)
    public static func read(_ source: UnsafeRawPointer) -> (length: Int, type: UInt8, flags: UInt8, streamID: Int32) {
        let length =
            Int(source.load(fromByteOffset: 0, as: UInt8.self)) << 16
            | Int(source.load(fromByteOffset: 1, as: UInt8.self)) << 8
            | Int(source.load(fromByteOffset: 2, as: UInt8.self))
        let stream = Int32(bitPattern: readUInt32(source + 5) & 0x7fff_ffff)
        return (
            length, source.load(fromByteOffset: 3, as: UInt8.self), source.load(fromByteOffset: 4, as: UInt8.self),
            stream
        )
    }
}

/// A connection error found in what the peer sent: the session answers it with GOAWAY and the connection
/// closes (RFC 9113 §5.4.1).
public struct HTTP2ConnectionError: Error, Sendable, CustomStringConvertible {
    public let code: UInt32
    public let message: String

    public init(_ code: UInt32, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(HTTP2ErrorCode.name(code)): \(message)" }
}

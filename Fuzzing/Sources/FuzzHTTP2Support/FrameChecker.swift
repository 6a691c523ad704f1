// What both session fuzz targets need: a transport that checks every frame the session writes, and frame
// builders for prefaces and seeds.
import FanfareHTTP2
import FuzzSupport

/// A staging buffer that checks every frame written to it is whole and one that `side` may send.
public final class FrameChecker: HTTP2FrameSink {
    public enum Side: String, Sendable {
        case client, server
    }

    static let capacity = 64 * 1024
    public var backedUp = false
    private let side: Side
    private let scratch = UnsafeMutableRawPointer.allocate(byteCount: FrameChecker.capacity, alignment: 16)
    private var pending: [UInt8] = []

    public init(side: Side) {
        self.side = side
    }

    deinit { scratch.deallocate() }

    public override var plaintextCapacity: Int { Self.capacity }
    public override var isBackedUp: Bool { backedUp }

    public override func reservePlaintext(_ count: Int) -> UnsafeMutableRawPointer? {
        require(count > 0 && count <= Self.capacity, "reservation of \(count) bytes")
        return scratch
    }

    public override func commitPlaintext(_ count: Int) {
        require(count > 0 && count <= Self.capacity, "commit of \(count) bytes")
        pending.append(contentsOf: UnsafeRawBufferPointer(start: scratch, count: count))
    }

    public override func setNeedsFlush() {}

    /// A client session starts with the connection preface, then frames.
    public func checkPreface() {
        let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
        require(pending.starts(with: preface), "the session did not start with the preface")
        pending.removeFirst(preface.count)
        checkFrames()
    }

    /// Everything written so far is whole frames `side` may send.
    public func checkFrames() {
        var offset = 0
        while offset < pending.count {
            require(pending.count - offset >= 9, "a partial frame header was written")
            let length = Int(pending[offset]) << 16 | Int(pending[offset + 1]) << 8 | Int(pending[offset + 2])
            let type = pending[offset + 3]
            let streamID = (UInt32(pending[offset + 5]) << 24 | UInt32(pending[offset + 6]) << 16
                | UInt32(pending[offset + 7]) << 8 | UInt32(pending[offset + 8])) & 0x7fff_ffff
            require(pending.count - offset - 9 >= length, "a partial frame was written")
            // A client's DATA may use a larger SETTINGS_MAX_FRAME_SIZE the server announced.
            require(
                length <= HTTP2Limits.defaultMaxFrameSize || (side == .client && type == 0),
                "a \(length)-byte frame of type \(type)")
            switch HTTP2FrameType(rawValue: type) {
            case .data, .headers:
                require(streamID & 1 == 1, "DATA/HEADERS on stream \(streamID)")
            case .rstStream:
                require(streamID & 1 == 1 && length == 4, "RST_STREAM on \(streamID), \(length) bytes")
            case .settings:
                require(streamID == 0 && length % 6 == 0, "SETTINGS on \(streamID), \(length) bytes")
            case .ping:
                require(streamID == 0 && length == 8, "PING on \(streamID), \(length) bytes")
            case .goAway:
                require(streamID == 0 && length >= 8, "GOAWAY on \(streamID), \(length) bytes")
            case .windowUpdate:
                require(length == 4, "WINDOW_UPDATE of \(length) bytes")
                let increment = Int(pending[offset + 9] & 0x7f) << 24 | Int(pending[offset + 10]) << 16
                    | Int(pending[offset + 11]) << 8 | Int(pending[offset + 12])
                require(increment > 0, "WINDOW_UPDATE of 0 on stream \(streamID)")
            default:
                require(false, "a \(side.rawValue) never sends frame type \(type)")
            }
            offset += 9 + length
        }
        pending.removeAll(keepingCapacity: true)
    }
}

// MARK: - Frames, for prefaces and seeds

public func frame(_ type: HTTP2FrameType, flags: UInt8 = 0, stream: UInt32 = 0, _ payload: [UInt8] = []) -> [UInt8] {
    let length = payload.count
    return [UInt8(length >> 16), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF), type.rawValue, flags]
        + [UInt8(stream >> 24), UInt8(stream >> 16 & 0xFF), UInt8(stream >> 8 & 0xFF), UInt8(stream & 0xFF)] + payload
}

public func uint32(_ value: UInt32) -> [UInt8] { [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }

public func setting(_ identifier: UInt16, _ value: UInt32) -> [UInt8] { [UInt8(identifier >> 8), UInt8(identifier & 0xFF)] + uint32(value) }

/// Cuts decrypted bytes into whole frames (RFC 9113 §4.1), whatever the split across reads: frames inside one
/// read are handed out in place, a frame that straddles reads is gathered in a buffer allocated once. The
/// connection core reads through it for both sessions; we never raise SETTINGS_MAX_FRAME_SIZE, so a frame is at
/// most 16 KiB + 9.
struct HTTP2FrameReader: ~Copyable {
    private let buffer: UnsafeMutableRawPointer
    private var count = 0
    private static let capacity = HTTP2Limits.frameHeaderSize + HTTP2Limits.defaultMaxFrameSize

    init() {
        buffer = .allocate(byteCount: Self.capacity, alignment: 16)
    }

    deinit { buffer.deallocate() }

    /// The next whole frame of `bytes` (its header, then its payload), which then starts after it; nil once no
    /// whole frame is left (a partial one is kept for the next read). A frame inside `bytes` is handed out in
    /// place, one that straddled reads from the buffer; either stays valid until the next call. A frame longer
    /// than our SETTINGS_MAX_FRAME_SIZE is a FRAME_SIZE_ERROR (§4.2) before any of it is read.
    @inline(__always)
    mutating func next(_ bytes: inout UnsafeRawBufferPointer) throws(HTTP2ConnectionError) -> UnsafeRawPointer? {
        let header = HTTP2Limits.frameHeaderSize
        if count == 0, bytes.count >= header, let start = bytes.baseAddress {
            let length = try Self.checkedLength(start)
            if bytes.count >= header + length {
                bytes = UnsafeRawBufferPointer(rebasing: bytes[(header + length)...])
                return UnsafeRawPointer(start)
            }
        }
        return try gather(&bytes)
    }

    /// Copies what `bytes` holds of the frame that straddles reads; returns the frame once it is whole.
    private mutating func gather(
        _ bytes: inout UnsafeRawBufferPointer
    ) throws(HTTP2ConnectionError) -> UnsafeRawPointer? {
        let header = HTTP2Limits.frameHeaderSize
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return nil }
        var taken = 0
        if count < header {
            taken = min(header - count, bytes.count)
            (buffer + count).copyMemory(from: source, byteCount: taken)
            count += taken
        }
        if count >= header {
            let rest = min(header + (try Self.checkedLength(buffer)) - count, bytes.count - taken)
            (buffer + count).copyMemory(from: source + taken, byteCount: rest)
            count += rest
            taken += rest
        }
        bytes = UnsafeRawBufferPointer(rebasing: bytes[taken...])
        guard count >= header, count == header + HTTP2FrameHeader.read(buffer).length else { return nil }
        count = 0
        return UnsafeRawPointer(buffer)
    }

    @inline(__always)
    private static func checkedLength(_ header: UnsafeRawPointer) throws(HTTP2ConnectionError) -> Int {
        let length = HTTP2FrameHeader.read(header).length
        guard length <= HTTP2Limits.defaultMaxFrameSize else {
            throw HTTP2ConnectionError(
                HTTP2ErrorCode.frameSizeError, "a \(length)-byte frame exceeds our SETTINGS_MAX_FRAME_SIZE")
        }
        return length
    }
}

/// A header block continued in CONTINUATION frames (§6.10), gathered up to a bound allocated once. While one
/// is open, any frame but its CONTINUATION is a PROTOCOL_ERROR (the sessions check `stream`).
struct HTTP2HeaderBlockBuffer: ~Copyable {
    private let storage: UnsafeMutableRawPointer
    let capacity: Int
    private(set) var count = 0
    /// The stream whose block is being gathered; 0 = none.
    private(set) var stream: Int32 = 0
    private(set) var endsStream = false
    private(set) var flags: UInt8 = 0

    init(capacity: Int) {
        self.capacity = capacity
        storage = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { storage.deallocate() }

    var isOpen: Bool { stream != 0 }

    /// HEADERS without END_HEADERS: starts gathering with its fragment. `flags` is kept for the owner.
    mutating func begin(
        stream: Int32, endsStream: Bool, flags: UInt8 = 0, fragment: UnsafeRawBufferPointer
    ) throws(HTTP2ConnectionError) {
        self.stream = stream
        self.endsStream = endsStream
        self.flags = flags
        count = 0
        try append(fragment)
    }

    /// A CONTINUATION's fragment. Over `capacity` the peer is sending an endless block: ENHANCE_YOUR_CALM.
    mutating func append(_ fragment: UnsafeRawBufferPointer) throws(HTTP2ConnectionError) {
        guard count + fragment.count <= capacity else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.enhanceYourCalm, "a header block over \(capacity) bytes")
        }
        if let source = fragment.baseAddress, fragment.count > 0 {
            (storage + count).copyMemory(from: source, byteCount: fragment.count)
        }
        count += fragment.count
    }

    /// The gathered block; gathering is over (the next HEADERS may begin another).
    mutating func finish() -> UnsafeRawBufferPointer {
        stream = 0
        return UnsafeRawBufferPointer(start: storage, count: count)
    }
}

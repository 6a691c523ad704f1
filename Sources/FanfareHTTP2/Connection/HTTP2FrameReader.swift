/// Cuts decrypted bytes into whole frames (RFC 9113 §4.1), whatever the split across reads: frames inside one
/// read are handed out in place, a frame that straddles reads is gathered in a buffer allocated once. Both
/// sessions read through it; we never raise SETTINGS_MAX_FRAME_SIZE, so a frame is at most 16 KiB + 9.
struct HTTP2FrameReader: ~Copyable {
    private let buffer: UnsafeMutableRawPointer
    private var count = 0
    private static let capacity = HTTP2Limits.frameHeaderSize + HTTP2Limits.defaultMaxFrameSize

    init() {
        buffer = .allocate(byteCount: Self.capacity, alignment: 16)
    }

    deinit { buffer.deallocate() }

    /// Calls `frame` with the start of each whole frame in `bytes` (header, then its payload), in order.
    /// A frame longer than our SETTINGS_MAX_FRAME_SIZE is a FRAME_SIZE_ERROR (§4.2) before any of it is read.
    @inline(__always)
    mutating func read(
        _ bytes: UnsafeRawBufferPointer, _ frame: (UnsafeRawPointer) throws(HTTP2ConnectionError) -> Void
    ) throws(HTTP2ConnectionError) {
        guard var cursor = bytes.baseAddress else { return }
        var remaining = bytes.count
        let header = HTTP2Limits.frameHeaderSize
        if count > 0 {
            // Finish the frame that straddled the previous read.
            if count < header {
                let take = min(header - count, remaining)
                (buffer + count).copyMemory(from: cursor, byteCount: take)
                count += take
                cursor += take
                remaining -= take
                if count < header { return }
            }
            let length = try Self.checkedLength(buffer)
            let take = min(header + length - count, remaining)
            (buffer + count).copyMemory(from: cursor, byteCount: take)
            count += take
            cursor += take
            remaining -= take
            if count < header + length { return }
            count = 0
            try frame(UnsafeRawPointer(buffer))
        }
        while remaining >= header {
            let length = try Self.checkedLength(cursor)
            guard remaining >= header + length else { break }
            try frame(cursor)
            cursor += header + length
            remaining -= header + length
        }
        if remaining > 0 {
            buffer.copyMemory(from: cursor, byteCount: remaining)
            count = remaining
        }
    }

    @inline(__always)
    private static func checkedLength(_ header: UnsafeRawPointer) throws(HTTP2ConnectionError) -> Int {
        let length = HTTP2FrameHeader.read(header).length
        guard length <= HTTP2Limits.defaultMaxFrameSize else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.frameSizeError, "a \(length)-byte frame exceeds our SETTINGS_MAX_FRAME_SIZE")
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
    mutating func begin(stream: Int32, endsStream: Bool, flags: UInt8 = 0, fragment: UnsafeRawBufferPointer) throws(HTTP2ConnectionError) {
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

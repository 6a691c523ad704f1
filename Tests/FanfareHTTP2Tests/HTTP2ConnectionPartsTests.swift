@testable import FanfareHTTP2
import FanfareTestSupport
import Testing

/// Parts of the connection core both sessions share, on their own: the frame reader (frames cut anywhere come
/// out whole and in order) and the flood guard's counts.
@Suite("HTTP/2 connection parts: frame reader, flood guard", .ownThread)
struct HTTP2ConnectionPartsTests {
    private static let frames: [[UInt8]] = [
        rawFrame(type: HTTP2FrameType.settings.rawValue, payload: [0, 3, 0, 0, 0, 100]),
        rawFrame(type: HTTP2FrameType.data.rawValue, stream: 1),
        rawFrame(type: HTTP2FrameType.data.rawValue, stream: 1, payload: Array(repeating: 7, count: 300)),
        rawFrame(type: HTTP2FrameType.ping.rawValue, payload: [1, 2, 3, 4, 5, 6, 7, 8]),
        rawFrame(type: HTTP2FrameType.data.rawValue, stream: 3, payload: (0..<16_384).map { UInt8($0 & 0xff) }),
        rawFrame(type: 0x42),
    ]

    /// Reads `bytes` cut at `cuts` (ascending offsets); the frames handed out, copied, or the error.
    private func read(_ bytes: [UInt8], cuts: [Int]) -> Result<[[UInt8]], HTTP2ConnectionError> {
        var reader = HTTP2FrameReader()
        var handedOut: [[UInt8]] = []
        var start = 0
        for end in cuts + [bytes.count] {
            let result: Result<Void, HTTP2ConnectionError> = bytes[start..<end].withUnsafeBytes { piece in
                var rest = piece
                do throws(HTTP2ConnectionError) {
                    while let frame = try reader.next(&rest) {
                        let length = HTTP2FrameHeader.read(frame).length + HTTP2Limits.frameHeaderSize
                        handedOut.append(Array(UnsafeRawBufferPointer(start: frame, count: length)))
                    }
                    return rest.isEmpty ? .success(()) : .failure(HTTP2ConnectionError(0, "bytes left unread"))
                } catch {
                    return .failure(error)
                }
            }
            if case .failure(let error) = result { return .failure(error) }
            start = end
        }
        return .success(handedOut)
    }

    @Test("frames cut at any one place, or byte by byte, come out whole and in order")
    func framesAcrossReads() throws {
        let bytes = Self.frames.flatMap { $0 }
        #expect(try read(bytes, cuts: []).get() == Self.frames)
        for cut in 1..<bytes.count where cut < 400 || cut % 97 == 0 || cut > bytes.count - 40 {
            #expect(try read(bytes, cuts: [cut]).get() == Self.frames, "cut at \(cut)")
        }
        #expect(try read(bytes, cuts: Array(1..<bytes.count)).get() == Self.frames)
    }

    @Test("a frame over SETTINGS_MAX_FRAME_SIZE is a FRAME_SIZE_ERROR as soon as its header is whole")
    func oversizedFrame() {
        let header = Array(rawFrame(type: HTTP2FrameType.data.rawValue, stream: 1).prefix(9))
        var oversized = header
        oversized[1] = 0x40  // 16,385 bytes
        oversized[2] = 0x01
        for cuts in [[], [4], [8], Array(1..<9)] {
            guard case .failure(let error) = read(oversized, cuts: cuts) else {
                Issue.record("no error with cuts \(cuts)")
                continue
            }
            #expect(error.code == HTTP2ErrorCode.frameSizeError)
        }
    }

    @Test("the flood guard: empty frames to the bound, then ENHANCE_YOUR_CALM; an answer starts the count over")
    func emptyFrames() throws {
        var guardrail = HTTP2FloodGuard(maxEmptyFrames: 3, maxResetsBeyondAnswers: 2)
        for _ in 0..<3 { try guardrail.countEmptyFrame() }
        guardrail.answered()
        for _ in 0..<3 { try guardrail.countEmptyFrame() }
        do throws(HTTP2ConnectionError) {
            try guardrail.countEmptyFrame()
            Issue.record("the fourth empty frame passed")
        } catch {
            #expect(error.code == HTTP2ErrorCode.enhanceYourCalm)
        }
    }

    @Test("the flood guard: resets beyond answers to the bound; answers give credit back, never above the bound")
    func resetsBeyondAnswers() throws {
        var guardrail = HTTP2FloodGuard(maxEmptyFrames: 3, maxResetsBeyondAnswers: 2)
        for _ in 0..<5 { guardrail.answered() }  // credit stays at 2
        try guardrail.countReset()
        try guardrail.countReset()
        guardrail.answered()
        try guardrail.countReset()
        do throws(HTTP2ConnectionError) {
            try guardrail.countReset()
            Issue.record("a reset beyond the bound passed")
        } catch {
            #expect(error.code == HTTP2ErrorCode.enhanceYourCalm)
        }
    }
}

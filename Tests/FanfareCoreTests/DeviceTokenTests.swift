import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("DeviceToken", .ownThread)
struct DeviceTokenTests {
    /// `byteCount` bytes 0, 1, 2, … as lowercase hex.
    static func sequentialHex(byteCount: Int) -> String {
        (0..<byteCount).map { index -> String in
            let byte = UInt8(truncatingIfNeeded: index &* 37 &+ 11)
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }

    @Test("parses 32-, 80- and 100-byte tokens and round-trips them", arguments: [32, 54, 80, 100])
    func parsesValidLengths(byteCount: Int) throws {
        let hex = Self.sequentialHex(byteCount: byteCount)
        let token = try DeviceToken(hex: hex)
        #expect(token.byteCount == byteCount)
        #expect(token.hexCount == 2 * byteCount)
        #expect(token.hexString == hex)
        #expect(token.description == hex)
        token.withUnsafeBytes { bytes in
            #expect(bytes.count == byteCount)
            #expect(bytes.first == 11)
            #expect(bytes[1] == 48)
        }
    }

    @Test("uppercase and mixed-case hex parse to the same token; output is lowercase")
    func caseInsensitive() throws {
        let lower = Self.sequentialHex(byteCount: 80)
        let upper = try DeviceToken(hex: lower.uppercased())
        let mixed = try DeviceToken(hex: Substring(lower.prefix(80).uppercased() + lower.dropFirst(80)))
        let expected = try DeviceToken(hex: lower)
        #expect(upper == expected)
        #expect(mixed == expected)
        #expect(upper.hexString == lower)
    }

    @Test("every parse error, in order of checking")
    func parseErrors() {
        let valid64 = Self.sequentialHex(byteCount: 32)
        #expect(throws: DeviceTokenError.empty) { try DeviceToken(hex: "") }
        #expect(throws: DeviceTokenError.oddLength(63)) { try DeviceToken(hex: valid64.dropLast()) }
        #expect(throws: DeviceTokenError.oddLength(3)) { try DeviceToken(hex: "abc") }
        #expect(throws: DeviceTokenError.invalidCharacter("g", offset: 12)) {
            try DeviceToken(hex: "0123456789abg" + valid64)
        }
        // An invalid character wins over an odd length: it is the more useful message.
        #expect(throws: DeviceTokenError.invalidCharacter("x", offset: 2)) { try DeviceToken(hex: "abx") }
        #expect(throws: DeviceTokenError.invalidCharacter("é", offset: 4)) { try DeviceToken(hex: "abcdé" + valid64) }
        #expect(throws: DeviceTokenError.invalidCharacter(" ", offset: 8)) { try DeviceToken(hex: "01234567 89") }
        #expect(throws: DeviceTokenError.invalidCharacter("<", offset: 0)) { try DeviceToken(hex: "<\(valid64)>") }
        #expect(throws: DeviceTokenError.tooShort(bytes: 31)) { try DeviceToken(hex: valid64.dropLast(2)) }
        #expect(throws: DeviceTokenError.tooShort(bytes: 1)) { try DeviceToken(hex: "ab") }
        #expect(throws: DeviceTokenError.tooLong(bytes: 101)) {
            try DeviceToken(hex: Self.sequentialHex(byteCount: 101))
        }
        #expect(throws: DeviceTokenError.tooLong(bytes: 400)) {
            try DeviceToken(hex: String(repeating: "ab", count: 400))
        }
    }

    @Test("init(hexUTF8:) parses bytes exactly like init(hex:)")
    func fromUTF8Bytes() throws {
        func parse(_ bytes: [UInt8]) throws -> DeviceToken {
            try bytes.withUnsafeBytes { try DeviceToken(hexUTF8: $0) }
        }
        let hex = Self.sequentialHex(byteCount: 80)
        #expect(try parse(Array(hex.uppercased().utf8)) == (try DeviceToken(hex: hex)))
        let valid64 = Self.sequentialHex(byteCount: 32)
        for bad in ["", "abc", "0123456789abg" + valid64, "abcdé" + valid64, valid64.dropLast(2) + "", "ab"] {
            var fromString: DeviceTokenError?
            do { _ = try DeviceToken(hex: bad) } catch { fromString = error }
            #expect(throws: fromString!) { try parse(Array(bad.utf8)) }
        }
        #expect(throws: DeviceTokenError.invalidCharacter("\u{FFFD}", offset: 2)) {
            try parse([0x61, 0x62, 0xFF, 0x63])
        }
    }

    @Test("error descriptions say what is wrong and what is expected")
    func errorDescriptions() {
        #expect(
            DeviceTokenError.invalidCharacter("g", offset: 12).description
                == "device token has an invalid character 'g' at offset 12; expected hex digits")
        #expect(
            DeviceTokenError.invalidCharacter("\n", offset: 3).description
                == "device token has an invalid character U+000A at offset 3; expected hex digits")
        #expect(
            DeviceTokenError.empty.description
                == "device token is empty; expected 32 to 100 bytes (64 to 200 hex digits)")
        #expect(
            DeviceTokenError.tooShort(bytes: 16).description
                == "device token is too short (16 bytes); expected 32 to 100 bytes (64 to 200 hex digits)")
        #expect(
            DeviceTokenError.tooLong(bytes: 101).description
                == "device token is too long (101 bytes); expected 32 to 100 bytes (64 to 200 hex digits)")
        #expect(DeviceTokenError.oddLength(63).description.contains("odd number of hex digits (63)"))
    }

    @Test("init(bytes:) checks the length and matches the hex form")
    func fromBytes() throws {
        let bytes = (0..<80).map { UInt8($0) }
        let token = try DeviceToken(bytes: bytes)
        #expect(token.byteCount == 80)
        #expect(try DeviceToken(hex: token.hexString) == token)
        #expect(token.hexString.hasPrefix("000102030405"))
        #expect(throws: DeviceTokenError.empty) { try DeviceToken(bytes: [UInt8]()) }
        #expect(throws: DeviceTokenError.tooShort(bytes: 31)) { try DeviceToken(bytes: bytes.prefix(31)) }
        #expect(throws: DeviceTokenError.tooLong(bytes: 101)) {
            try DeviceToken(bytes: [UInt8](repeating: 7, count: 101))
        }
        #expect(try DeviceToken(bytes: bytes.prefix(32)).byteCount == DeviceToken.minimumByteCount)
        #expect(try DeviceToken(bytes: [UInt8](repeating: 1, count: 100)).byteCount == DeviceToken.maximumByteCount)
    }

    @Test("equality and hashing use the used bytes and the length")
    func hashable() throws {
        let zeros32 = try DeviceToken(bytes: [UInt8](repeating: 0, count: 32))
        let zeros33 = try DeviceToken(bytes: [UInt8](repeating: 0, count: 33))
        #expect(zeros32 != zeros33)  // same stored bytes, different length
        let a = try TestSupport.token(byteCount: 80, seed: 1)
        let b = try TestSupport.token(byteCount: 80, seed: 2)
        let aAgain = try DeviceToken(hex: a.hexString.uppercased())
        #expect(a == aAgain)
        #expect(a != b)
        #expect(a.hashValue == aAgain.hashValue)
        let set: Set<DeviceToken> = [a, b, aAgain, zeros32, zeros33]
        #expect(set.count == 4)
    }

    @Test("writeLowercaseHex writes exactly hexCount bytes")
    func writeHex() throws {
        let token = try DeviceToken(hex: "ABCDEF" + Self.sequentialHex(byteCount: 77))
        var buffer = [UInt8](repeating: 0xEE, count: token.hexCount + 8)
        let written = buffer.withUnsafeMutableBytes { token.writeLowercaseHex(to: $0.baseAddress!) }
        #expect(written == 160)
        #expect(String(decoding: buffer[0..<written], as: UTF8.self) == token.hexString)
        #expect(buffer[0..<6] == Array("abcdef".utf8)[...])
        #expect(buffer[written...].allSatisfy { $0 == 0xEE })  // nothing past the end
    }

    @Test("shardHash depends only on the first 16 bytes and spreads tokens over shards")
    func shardHash() throws {
        var bytes = (0..<80).map { UInt8($0) }
        let base = try DeviceToken(bytes: bytes)
        bytes[40] ^= 0xFF
        #expect(try DeviceToken(bytes: bytes).shardHash == base.shardHash)  // tail ignored
        bytes[3] ^= 0x01
        #expect(try DeviceToken(bytes: bytes).shardHash != base.shardHash)
        bytes[3] ^= 0x01
        bytes[15] ^= 0x80
        #expect(try DeviceToken(bytes: bytes).shardHash != base.shardHash)

        // Even sequential (non-random) tokens land evenly in 8 shards.
        var counts = [Int](repeating: 0, count: 8)
        for index in 0..<8000 {
            var tokenBytes = [UInt8](repeating: 0, count: 32)
            tokenBytes[0] = UInt8(truncatingIfNeeded: index)
            tokenBytes[1] = UInt8(truncatingIfNeeded: index >> 8)
            counts[Int(try DeviceToken(bytes: tokenBytes).shardHash & 7)] += 1
        }
        #expect(counts.allSatisfy { $0 > 850 && $0 < 1150 }, "shard counts: \(counts)")
    }

    @Test("stores tokens inline, without a heap reference")
    func inlineLayout() {
        #expect(MemoryLayout<DeviceToken>.size == 101)
        #expect(_isPOD(DeviceToken.self))
    }
}

import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("name-based UUIDs (version 5) and wave push ids", .ownThread)
struct NameBasedUUIDTests {
    /// A token whose byte i is (seed + 13 i) mod 256.
    static func token(_ byteCount: Int, seed: Int) throws -> DeviceToken {
        try DeviceToken(bytes: (0..<byteCount).map { UInt8(truncatingIfNeeded: seed + 13 * $0) })
    }

    @Test("RFC 9562 Appendix A.4: www.example.com in the DNS namespace")
    func rfcExample() {
        let name = Array("www.example.com".utf8)
        let uuid = name.withUnsafeBytes { NameBasedUUID(namespace: .dnsNamespace, name: $0) }
        #expect(uuid.text == "2ed6657d-e927-568b-95e1-2665a8aea6a2")
        #expect(uuid.version == 5)
    }

    @Test("the wave namespace is the v5 UUID of its URL in the URL namespace, as documented")
    func waveNamespace() {
        let url = Array("https://github.com/fanfare/apns-id/wave".utf8)
        let derived = url.withUnsafeBytes { NameBasedUUID(namespace: .urlNamespace, name: $0) }
        #expect(derived == NameBasedUUID.waveNamespace)
        #expect(NameBasedUUID.waveNamespace.text == "314bf00d-1ac8-5df6-b187-865dac19318b")
        #expect(NameBasedUUID.urlNamespace.text == "6ba7b811-9dad-11d1-80b4-00c04fd430c8")
        #expect(NameBasedUUID.dnsNamespace.text == "6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    }

    // Python, with ns = uuid.UUID("314bf00d-1ac8-5df6-b187-865dac19318b") and
    // token = bytes((seed + 13 * i) & 0xff for i in range(length)):
    // uuid.UUID(bytes=hashlib.sha1(ns.bytes + wave.to_bytes(8, "big") + token).digest()[:16], version=5)
    @Test(
        "wave push ids match Python's hashlib/uuid",
        arguments: [
            (UInt64(1), 32, 0, "48b0cb3c-4d24-5b24-b2a6-1ac463393d73"),
            (UInt64(1), 32, 1, "ec4c4956-67e2-5430-8a99-1a7dc162fbe6"),
            (UInt64(2), 32, 0, "0b69b5f5-2ca6-5c23-8014-c30c3b389de9"),
            (UInt64(0x0123_4567_89AB_CDEF), 80, 5, "9ad4bba8-2b05-54df-8d31-c311c3a6a3a3"),
            (UInt64(0), 80, 5, "9b19747d-f1a8-5bdb-8c63-c35f9b9062e1"),
            (UInt64.max, 100, 9, "00f429ce-740b-5396-a010-7ddfba165f64"),
        ])
    func waveKnownAnswers(wave: UInt64, tokenLength: Int, seed: Int, expected: String) throws {
        #expect(NameBasedUUID(wave: wave, token: try Self.token(tokenLength, seed: seed)).text == expected)
    }

    @Test("same wave and token give the same id; another wave or token gives another; always version 5, variant 10")
    func determinism() throws {
        var seen = Set<String>()
        // namespace 16 + wave 8 + token: 40 bytes fill one block exactly, 95 is the last length in two blocks
        let lengths = [32, 39, 40, 41, 80, 95, 96, 100]
        for length in lengths {
            for seed in 0..<10 {
                let token = try Self.token(length, seed: seed)
                for wave in [UInt64(0), 1, 1 << 32, .max] {
                    let id = NameBasedUUID(wave: wave, token: token)
                    #expect(id == NameBasedUUID(wave: wave, token: token))
                    #expect(id.version == 5)
                    #expect(id.low >> 62 == 0b10, "RFC 9562 variant")
                    let text = Array(id.text.utf8)
                    #expect(text[14] == UInt8(ascii: "5") && Set("89ab".utf8).contains(text[19]))
                    #expect(text.withUnsafeBytes { APNsIDGenerator.isValidAPNsID($0, requireLowercase: true) })
                    seen.insert(id.text)
                }
            }
        }
        #expect(seen.count == lengths.count * 10 * 4, "every (wave, token) pair has its own id")
        // Tokens that differ only in length differ.
        let short = try DeviceToken(bytes: [UInt8](repeating: 7, count: 32))
        let long = try DeviceToken(bytes: [UInt8](repeating: 7, count: 33))
        #expect(NameBasedUUID(wave: 1, token: short) != NameBasedUUID(wave: 1, token: long))
    }

    @Test("write(to:) writes exactly 36 bytes, the same as the random generator's layout")
    func writesInPlace() {
        var buffer = [UInt8](repeating: 0xEE, count: 40)
        buffer.withUnsafeMutableBytes { NameBasedUUID.waveNamespace.write(to: $0.baseAddress! + 2) }
        #expect(buffer[0..<2] == [0xEE, 0xEE])
        #expect(buffer[38...] == [0xEE, 0xEE])
        #expect(String(decoding: buffer[2..<38], as: UTF8.self) == "314bf00d-1ac8-5df6-b187-865dac19318b")
    }
}

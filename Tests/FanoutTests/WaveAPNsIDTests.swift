import FanfareClient
import FanfareCore
import FanfareTestSupport
import Testing

/// A wave push's apns-id is hashed with OpenSSL's SHA-1 on the per-push path; FanfareCore's pure-Swift
/// `NameBasedUUID(wave:token:)` (checked against Python's hashlib in FanfareCoreTests) is the reference it must
/// equal, for every token length and wave id.
@Suite("wave apns-ids: OpenSSL's SHA-1 gives the pure-Swift reference's ids", .ownThread)
struct WaveAPNsIDTests {
    @Test("PushIdentifier.waveID equals NameBasedUUID(wave:token:) for tokens of 32 to 100 bytes")
    func matchesReference() throws {
        var random = SplitMix64(seed: 7)
        for length in DeviceToken.minimumByteCount...DeviceToken.maximumByteCount {
            let token = try DeviceToken(bytes: (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) })
            for wave in [UInt64(0), 1, random.next(), .max] {
                let id = PushIdentifier.waveID(wave: wave, token: token)
                #expect(
                    id.description == NameBasedUUID(wave: wave, token: token).text, "length \(length), wave \(wave)")
            }
        }
    }

    @Test("a known answer (Python's hashlib/uuid, as in NameBasedUUIDTests)")
    func knownAnswer() throws {
        let token = try DeviceToken(bytes: (0..<80).map { UInt8(truncatingIfNeeded: 5 + 13 * $0) })
        #expect(
            PushIdentifier.waveID(wave: 0x0123_4567_89AB_CDEF, token: token).description
                == "9ad4bba8-2b05-54df-8d31-c311c3a6a3a3")
    }
}

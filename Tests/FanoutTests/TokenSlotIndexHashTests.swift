// The token index hashes every byte of a token: tokens that share their first 16 bytes (the part the shard
// hash reads) still spread over the table, so registering them stays linear.
import FanfareCore
@testable import FanfareFanout
import FanfareTestSupport
import Testing

@Suite("TokenSlotIndex hashing", .ownThread)
struct TokenIndexHashTests {
    @Test("10,000 tokens sharing a 30-byte prefix land in as many home cells as random ones would")
    func sharedPrefixesSpread() throws {
        let mask = (1 << 15) - 1
        var homes = Set<Int>()
        for index in 0..<10_000 {
            var bytes = [UInt8](repeating: 0xA1, count: 32)
            bytes[30] = UInt8(index >> 8)
            bytes[31] = UInt8(index & 0xFF)
            homes.insert(TokenSlotIndex.home(try DeviceToken(bytes: bytes), mask: mask))
        }
        // 10,000 random keys in 32,768 cells occupy about 8,600 distinct ones; the old prefix-only hash put
        // them all in one.
        #expect(homes.count > 8_000, "\(homes.count) distinct home cells")
    }
}

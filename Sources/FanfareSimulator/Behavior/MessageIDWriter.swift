/// Writes random version-4 UUIDs in APNs' canonical lowercase 8-4-4-4-12 form into caller buffers
/// (the `apns-id` a 200 carries when the request had none, and the sandbox `apns-unique-id`).
public enum MessageIDWriter {
    public static let byteCount = 36

    /// Writes 36 bytes at the start of `buffer`.
    public static func writeRandomUUID<R: RandomNumberGenerator>(
        into buffer: UnsafeMutableRawBufferPointer, using random: inout R
    ) {
        precondition(buffer.count >= byteCount, "a UUID needs 36 bytes")
        var high = random.next()
        var low = random.next()
        high = (high & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000  // version 4
        low = (low & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000  // RFC 4122 variant
        let digits: StaticString = "0123456789abcdef"
        digits.withUTF8Buffer { hex in
            var position = 0
            for nibble in 0..<32 {
                if nibble == 8 || nibble == 12 || nibble == 16 || nibble == 20 {
                    buffer[position] = UInt8(ascii: "-")
                    position += 1
                }
                let word = nibble < 16 ? high : low
                let shift = UInt64(60 - 4 * (nibble % 16))
                buffer[position] = hex[Int((word >> shift) & 0xF)]
                position += 1
            }
            assert(position == byteCount)
        }
    }
}

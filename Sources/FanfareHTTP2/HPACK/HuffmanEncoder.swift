/// Sizes of Huffman-encoded strings (RFC 7541 §5.2), to decide whether Huffman is shorter before writing.
public enum HPACKHuffman {
    /// Bits the Huffman code of `bytes` takes (before padding).
    public static func bitCount(_ bytes: UnsafeRawBufferPointer) -> Int {
        let symbols = HuffmanEncodingTable.shared.symbols
        var bits = 0
        for byte in bytes {
            bits &+= Int(truncatingIfNeeded: symbols[Int(byte)] & 0xFF)
        }
        return bits
    }

    /// Bits the code of the lowercase hex text of `bytes` takes (2 hex digits per byte) — no hex text is built.
    public static func bitCount(hexOf bytes: UnsafeRawBufferPointer) -> Int {
        let hexPairs = HuffmanEncodingTable.shared.hexPairs
        var bits = 0
        for byte in bytes {
            bits &+= Int(truncatingIfNeeded: hexPairs[Int(byte)] & 0xFF)
        }
        return bits
    }

    /// Octets of a Huffman string of `bitCount` bits once padded.
    @inline(__always)
    public static func byteCount(bitCount: Int) -> Int { (bitCount + 7) >> 3 }
}

/// Packs Huffman codes MSB-first into raw memory through a 64-bit accumulator.
///
/// Only complete octets are stored (whole 32-bit words as they fill up, the rest in `finish`), so nothing past
/// the final padded octet is ever written; the caller sizes the destination with `HPACKHuffman.bitCount` (no
/// bounds are checked here). (Branch-free 8-octet stores of the accumulator after every symbol measured slower:
/// they put the store position on the dependency chain.)
public struct HuffmanBitWriter {
    private let start: UnsafeMutableRawPointer
    private var cursor: UnsafeMutableRawPointer
    /// The low `pendingBits` bits are the code not yet stored; higher bits are stale.
    private var accumulator: UInt64 = 0
    /// Fewer than 32 between calls, so a 30-bit code always fits the accumulator.
    private var pendingBits = 0

    public init(destination: UnsafeMutableRawPointer) {
        start = destination
        cursor = destination
    }

    /// One symbol.
    public mutating func append(_ byte: UInt8) {
        let entry = HuffmanEncodingTable.shared.symbols[Int(byte)]
        var state = State(self)
        state.push(code: entry >> 8, length: Int(truncatingIfNeeded: entry & 0xFF))
        state.save(to: &self)
    }

    /// Each byte a symbol.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        let symbols = HuffmanEncodingTable.shared.symbols
        var state = State(self)
        for byte in bytes {
            let entry = symbols[Int(byte)]
            state.push(code: entry >> 8, length: Int(truncatingIfNeeded: entry & 0xFF))
        }
        state.save(to: &self)
    }

    /// The lowercase hex digits of each byte (two symbols per byte, one table lookup). Two bytes (four digits,
    /// at most 24 bits, combined off the accumulator's dependency chain) go in per push.
    public mutating func appendHex(of bytes: UnsafeRawBufferPointer) {
        let hexPairs = HuffmanEncodingTable.shared.hexPairs
        var state = State(self)
        var position = 0
        while bytes.count - position >= 2 {
            let first = hexPairs[Int(bytes[position])]
            let second = hexPairs[Int(bytes[position + 1])]
            let secondLength = second & 0xFF
            let code = UInt64(first >> 8) &<< UInt64(secondLength) | UInt64(second >> 8)
            state.push(code: code, length: Int(truncatingIfNeeded: (first & 0xFF) + secondLength))
            position += 2
        }
        if position < bytes.count {
            let entry = hexPairs[Int(bytes[position])]
            state.push(code: UInt64(entry >> 8), length: Int(truncatingIfNeeded: entry & 0xFF))
        }
        state.save(to: &self)
    }

    /// `appendHex(of:)` four bytes (eight digits, at most 48 bits) per step, each step one unaligned 8-byte
    /// store of everything pending. Stores reach up to 8 bytes past the last complete byte: the caller
    /// guarantees that much slack after the string (`HPACKBlockWriter` checks it; later bytes overwrite it).
    public mutating func appendHexWithSlack(of bytes: UnsafeRawBufferPointer) {
        let hexPairs = HuffmanEncodingTable.shared.hexPairs
        var cursor = self.cursor
        var accumulator = self.accumulator
        var pending = pendingBits
        var position = 0
        // Bring the pending bits under 8 first (exact mode keeps up to 31), so 48 more always fit.
        while pending >= 8 {
            pending -= 8
            cursor.storeBytes(of: UInt8(truncatingIfNeeded: accumulator &>> UInt64(pending)), as: UInt8.self)
            cursor += 1
        }
        while bytes.count - position >= 4 {
            let p0 = hexPairs[Int(bytes[position])], p1 = hexPairs[Int(bytes[position + 1])]
            let p2 = hexPairs[Int(bytes[position + 2])], p3 = hexPairs[Int(bytes[position + 3])]
            let l1 = p1 & 0xFF, l2 = p2 & 0xFF, l3 = p3 & 0xFF
            // Four codes of at most 12 bits each, combined independently of the accumulator.
            let code =
                UInt64(p0 >> 8) &<< UInt64(l1 + l2 + l3) | UInt64(p1 >> 8) &<< UInt64(l2 + l3)
                | UInt64(p2 >> 8) &<< UInt64(l3) | UInt64(p3 >> 8)
            let length = Int(truncatingIfNeeded: (p0 & 0xFF) + l1 + l2 + l3)
            accumulator = accumulator &<< UInt64(length) | code
            pending += length
            assert(pending <= 64)
            cursor.storeBytes(of: (accumulator &<< UInt64(64 - pending)).bigEndian, as: UInt64.self)
            cursor += pending >> 3
            pending &= 7
            position += 4
        }
        self.cursor = cursor
        self.accumulator = accumulator
        self.pendingBits = pending
        if position < bytes.count { appendHex(of: UnsafeRawBufferPointer(rebasing: bytes[position...])) }
    }

    /// Pads with 1-bits (EOS prefix) to a byte boundary, flushes, returns bytes written since init.
    /// The writer may go on with a new string after this.
    public mutating func finish() -> Int {
        let padding = (8 - (pendingBits & 7)) & 7
        accumulator = accumulator &<< UInt64(padding) | ((1 &<< UInt64(padding)) - 1)
        var bits = pendingBits + padding
        while bits >= 8 {
            bits -= 8
            cursor.storeBytes(of: UInt8(truncatingIfNeeded: accumulator &>> UInt64(bits)), as: UInt8.self)
            cursor += 1
        }
        pendingBits = 0
        return cursor - start
    }

    /// The writer's state in locals, so loops keep it in registers (stores through `cursor` could alias `self`).
    private struct State {
        var cursor: UnsafeMutableRawPointer
        var accumulator: UInt64
        var pendingBits: Int

        @inline(__always)
        init(_ writer: HuffmanBitWriter) {
            cursor = writer.cursor
            accumulator = writer.accumulator
            pendingBits = writer.pendingBits
        }

        @inline(__always)
        func save(to writer: inout HuffmanBitWriter) {
            writer.cursor = cursor
            writer.accumulator = accumulator
            writer.pendingBits = pendingBits
        }

        /// Stores a 32-bit word once one is complete (pending stays under 32, so up to 32 new bits fit).
        @inline(__always)
        mutating func push(code: UInt64, length: Int) {
            assert(length > 0 && length <= 32 && pendingBits < 32)
            accumulator = accumulator &<< UInt64(length) | code
            pendingBits += length
            if pendingBits >= 32 {
                pendingBits -= 32
                let word = UInt32(truncatingIfNeeded: accumulator &>> UInt64(pendingBits))
                cursor.storeBytes(of: word.bigEndian, as: UInt32.self)
                cursor += 4
            }
        }
    }
}

/// The Huffman decoder's state machine, built once from `HuffmanCode` and never freed.
///
/// A state is an internal node of the code tree (the root is state 0); the 257 leaves leave 256 internal nodes,
/// so a state fits in a byte. From each state there is one transition per input nibble: the state reached after
/// those 4 bits, and the symbol completed on the way, if any. No code is shorter than 5 bits, so a nibble
/// completes at most one symbol. Immutable after the (thread-safe) lazy initialization of `shared`.
struct HuffmanDecodingTable: @unchecked Sendable {
    /// `stateCount * 16` transitions of 4 octets, the one for `nibble` from `state` at octet offset
    /// `state << 6 | nibble << 2`. Each is packed as: bits 0-13 the next state's row offset (`state << 6`, so the
    /// next load is one AND away from this one: the latency chain of the decoder), bits 14-21 the emitted symbol,
    /// bit 22 set when a symbol is emitted (so it can be added to the output count), and the flags below.
    let transitions: UnsafePointer<UInt32>

    static let stateCount = 256
    static let rowOffsetMask: UInt32 = 0x3FC0
    static let symbolShift: UInt32 = 14
    static let emitShift: UInt32 = 22
    /// The transition completes a symbol (bits 14-21).
    static let emits: UInt32 = 1 << 22
    /// The state reached is a valid end: the bits since the last symbol are at most 7 ones (EOS padding).
    static let accepts: UInt32 = 1 << 23
    /// The transition completes EOS, which must never appear in a string.
    static let fails: UInt32 = 1 << 24

    /// The transition for `nibble` from the state whose row starts at `rowOffset`.
    @inline(__always)
    func transition(rowOffset: Int, nibble: Int) -> UInt32 {
        // The nibble's part of the address does not depend on the previous transition; only the row does.
        UnsafeRawPointer(transitions + nibble).load(fromByteOffset: rowOffset, as: UInt32.self)
    }

    static let shared = HuffmanDecodingTable()

    private init() {
        // The code tree: children[node * 2 + bit] is an internal node (>= 0) or a leaf, ~symbol (< 0).
        var children = [Int](repeating: Int.min, count: Self.stateCount * 2)
        var nodeCount = 1
        for symbol in 0..<HuffmanCode.symbolCount {
            let code = Int(HuffmanCode.codes[symbol])
            let length = Int(HuffmanCode.bitLengths[symbol])
            var node = 0
            for position in stride(from: length - 1, through: 0, by: -1) {
                let slot = node * 2 + (code >> position) & 1
                if position == 0 {
                    precondition(children[slot] == Int.min, "Huffman code is not a prefix code")
                    children[slot] = ~symbol
                } else {
                    if children[slot] == Int.min {
                        children[slot] = nodeCount
                        nodeCount += 1
                    }
                    precondition(children[slot] >= 0, "Huffman code is not a prefix code")
                    node = children[slot]
                }
            }
        }
        precondition(nodeCount == Self.stateCount && !children.contains(Int.min), "Huffman code is not complete")

        // A node is a valid place to end when the path from the root is all ones and at most 7 bits long.
        var paddingDepth = [Int](repeating: -1, count: Self.stateCount)  // -1: path has a zero
        paddingDepth[0] = 0
        var onesNode = 0
        while children[onesNode * 2 + 1] >= 0 {
            let next = children[onesNode * 2 + 1]
            paddingDepth[next] = paddingDepth[onesNode] + 1
            onesNode = next
        }

        let transitions = UnsafeMutablePointer<UInt32>.allocate(capacity: Self.stateCount * 16)
        for state in 0..<Self.stateCount {
            for nibble in 0..<16 {
                var node = state
                var flags: UInt32 = 0
                var symbol = 0
                for position in stride(from: 3, through: 0, by: -1) {
                    let child = children[node * 2 + (nibble >> position) & 1]
                    if child >= 0 {
                        node = child
                        continue
                    }
                    if ~child == HuffmanCode.endOfString {
                        flags |= Self.fails
                    } else {
                        flags |= Self.emits
                        symbol = ~child
                    }
                    node = 0
                }
                if (0...7).contains(paddingDepth[node]) { flags |= Self.accepts }
                transitions[state << 4 | nibble] = UInt32(node) << 6 | UInt32(symbol) << Self.symbolShift | flags
            }
        }
        self.transitions = UnsafePointer(transitions)
    }
}

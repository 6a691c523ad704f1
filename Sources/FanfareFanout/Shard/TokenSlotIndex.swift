import FanfareCore

/// Token → slot, open addressing with linear probing over `UInt32` cells (8 bytes per token at the
/// 50% load it keeps). Used by registration, unregistration and invalidation, never per push.
struct TokenSlotIndex {
    private static let empty: UInt32 = 0
    private static let deleted: UInt32 = .max
    /// Cells hold `slot + 1`; 0 is empty, `.max` a deleted cell.
    private var cells: [UInt32]
    private var mask: Int
    private(set) var count = 0
    private var used = 0  // live + deleted cells

    init(capacity: Int = 1024) {
        var size = 16
        while size < capacity * 2 { size <<= 1 }
        cells = Array(repeating: Self.empty, count: size)
        mask = size - 1
    }

    /// A hash of every byte of the token. The shard hash reads only the first 16 bytes (enough for random
    /// tokens, and it runs per push); the index hashes them all, so tokens that share a prefix (sequential
    /// test tokens, or a caller of the service registering such tokens on purpose) do not pile up in one
    /// probe run and make registration quadratic.
    @inline(__always)
    static func home(_ token: DeviceToken, mask: Int) -> Int {
        Int(truncatingIfNeeded: TokenHash.of(token)) & mask
    }

    func find(_ token: DeviceToken, in table: TokenTable) -> UInt32? {
        var position = Self.home(token, mask: mask)
        while true {
            let cell = cells[position]
            if cell == Self.empty { return nil }
            if cell != Self.deleted && table.matches(cell - 1, token) { return cell - 1 }
            position = (position + 1) & mask
        }
    }

    /// Adds `token` → `slot`; the token must not be present.
    mutating func insert(_ token: DeviceToken, slot: UInt32, in table: TokenTable) {
        assert(find(token, in: table) == nil, "token indexed twice")
        if (used + 1) * 2 > cells.count { rebuild(capacity: (count + 1) * 3 / 2, table: table) }
        var position = Self.home(token, mask: mask)
        while cells[position] != Self.empty && cells[position] != Self.deleted {
            position = (position + 1) & mask
        }
        if cells[position] == Self.empty { used += 1 }
        cells[position] = slot + 1
        count += 1
    }

    /// Removes `token`; returns its slot if it was there.
    @discardableResult
    mutating func remove(_ token: DeviceToken, in table: TokenTable) -> UInt32? {
        var position = Self.home(token, mask: mask)
        while true {
            let cell = cells[position]
            if cell == Self.empty { return nil }
            if cell != Self.deleted && table.matches(cell - 1, token) {
                cells[position] = Self.deleted
                count -= 1
                return cell - 1
            }
            position = (position + 1) & mask
        }
    }

    private mutating func rebuild(capacity: Int, table: TokenTable) {
        let old = cells
        var size = 16
        while size < capacity * 2 { size <<= 1 }
        cells = Array(repeating: Self.empty, count: size)
        mask = size - 1
        used = 0
        count = 0
        for cell in old where cell != Self.empty && cell != Self.deleted {
            let token = table.token(cell - 1)
            var position = Self.home(token, mask: mask)
            while cells[position] != Self.empty { position = (position + 1) & mask }
            cells[position] = cell
            used += 1
            count += 1
        }
    }

    var bytesUsed: Int { cells.capacity * 4 }
}

/// Which operation an SQE carries; the loop needs it to account for resources of dropped completions.
enum OperationKind: UInt8 {
    case connect = 1
    case accept
    case recv
    case send
    case close
    /// The loop's own read of the waker's eventfd.
    case wakeRead
    /// `cancel(fd:)` and the shutdown cancel: the loop's own, never delivered to a handler.
    case cancel
}

/// The 64-bit `user_data` of an SQE, so a completion is dispatched without lookup or allocation.
///
/// Layout, high to low: `[tag:8][kind:8][generation:24][slot:24]`. The kind is never 0xFF, so the value
/// never equals liburing's reserved `LIBURING_UDATA_TIMEOUT` (all ones).
struct OperationToken {
    static let slotBits: UInt64 = 24
    static let slotMask: UInt32 = 0xFF_FFFF
    static let generationMask: UInt32 = 0xFF_FFFF
    /// The slot index used for the loop's own operations (no handler).
    static let internalSlot: UInt32 = 0xFF_FFFF
    /// Handler slots are 0 ..< maxSlots.
    static let maxSlots = Int(internalSlot)

    let raw: UInt64

    init(raw: UInt64) { self.raw = raw }

    init(slot: UInt32, generation: UInt32, kind: OperationKind, tag: UInt8) {
        assert(slot <= Self.slotMask && generation <= Self.generationMask)
        raw =
            UInt64(slot)
            | UInt64(generation) << Self.slotBits
            | UInt64(kind.rawValue) << 48
            | UInt64(tag) << 56
    }

    var slot: UInt32 { UInt32(truncatingIfNeeded: raw) & Self.slotMask }
    var generation: UInt32 { UInt32(truncatingIfNeeded: raw >> Self.slotBits) & Self.generationMask }
    var kindRawValue: UInt8 { UInt8(truncatingIfNeeded: raw >> 48) }
    var kind: OperationKind? { OperationKind(rawValue: kindRawValue) }
    var tag: UInt8 { UInt8(truncatingIfNeeded: raw >> 56) }
}

/// One entry of the loop's handler table.
struct HandlerSlot {
    enum State: UInt8 {
        case free
        case registered
        /// Unregistered, but the kernel still holds operations for it: the handler (and so its buffers)
        /// stays alive, and its completions are dropped, until the last one arrives.
        case draining
    }

    var handler: (any IOHandler)?
    /// Bumped each time the slot is freed, so IDs and timers of a previous tenant are recognised as stale.
    var generation: UInt32 = 0
    /// Operations submitted for this slot whose final completion has not arrived yet.
    var inFlight: Int32 = 0
    var state: State = .free
    /// `addTickHandler` was called (and not undone).
    var wantsTick = false
    /// The loop's tick list holds an entry for this tenant (it may be stale until compaction).
    var tickEntryPresent = false
}

/// The slot table: strong references to handlers, indexed by the slot number carried in `user_data`.
///
/// Growing happens only in `register` (control plane); lookups are array indexing.
struct HandlerTable {
    private(set) var slots = ContiguousArray<HandlerSlot>()
    private var freeIndices = ContiguousArray<UInt32>()
    private(set) var registeredCount = 0

    init(reservingCapacity capacity: Int) {
        slots.reserveCapacity(capacity)
        freeIndices.reserveCapacity(capacity)
    }

    mutating func add(_ handler: any IOHandler) -> IOHandlerID {
        let index: Int
        if let reused = freeIndices.popLast() {
            index = Int(reused)
        } else {
            precondition(slots.count < OperationToken.maxSlots, "IOLoop: more than \(OperationToken.maxSlots) handlers")
            slots.append(HandlerSlot())
            index = slots.count - 1
        }
        assert(slots[index].state == .free && slots[index].handler == nil && slots[index].inFlight == 0)
        slots[index].handler = handler
        slots[index].state = .registered
        slots[index].wantsTick = false
        slots[index].tickEntryPresent = false
        registeredCount += 1
        return IOHandlerID(index: UInt32(index), generation: slots[index].generation)
    }

    func isRegistered(_ id: IOHandlerID) -> Bool {
        let index = Int(id.index)
        return index < slots.count && slots[index].generation == id.generation && slots[index].state == .registered
    }

    func registeredHandler(index: Int, generation: UInt32) -> (any IOHandler)? {
        guard index < slots.count, slots[index].generation == generation, slots[index].state == .registered else {
            return nil
        }
        return slots[index].handler
    }

    /// Marks the slot unregistered. Returns true when it has nothing in flight and can be freed right away.
    mutating func beginUnregister(index: Int) -> Bool {
        assert(slots[index].state == .registered)
        registeredCount -= 1
        slots[index].state = .draining
        slots[index].wantsTick = false
        return slots[index].inFlight == 0
    }

    /// Frees a drained slot and hands back its handler, so the caller releases it outside this access
    /// (the handler's deinit may call back into the loop).
    mutating func free(index: Int) -> (any IOHandler)? {
        assert(slots[index].state == .draining && slots[index].inFlight == 0)
        let handler = slots[index].handler
        slots[index].handler = nil
        slots[index].state = .free
        slots[index].generation = (slots[index].generation &+ 1) & OperationToken.generationMask
        slots[index].wantsTick = false
        slots[index].tickEntryPresent = false
        freeIndices.append(UInt32(index))
        return handler
    }

    mutating func operationStarted(index: Int) {
        slots[index].inFlight += 1
    }

    /// Accounts a final completion; returns the slot's state at that moment.
    mutating func operationFinished(index: Int) -> HandlerSlot.State {
        assert(slots[index].inFlight > 0)
        slots[index].inFlight -= 1
        return slots[index].state
    }

    func inFlight(index: Int) -> Int32 { slots[index].inFlight }

    func state(index: Int) -> HandlerSlot.State { slots[index].state }

    func generation(index: Int) -> UInt32 { slots[index].generation }

    // MARK: - Tick list bookkeeping

    /// Returns true when the caller must append an entry to the tick list.
    mutating func setWantsTick(_ id: IOHandlerID, _ wants: Bool) -> Bool {
        let index = Int(id.index)
        slots[index].wantsTick = wants
        guard wants, !slots[index].tickEntryPresent else { return false }
        slots[index].tickEntryPresent = true
        return true
    }

    /// A tick-list entry is live when its tenant is still registered and still wants ticks.
    func tickEntryIsLive(_ id: IOHandlerID) -> Bool {
        isRegistered(id) && slots[Int(id.index)].wantsTick
    }

    /// Called when compaction drops a dead tick-list entry.
    mutating func tickEntryRemoved(_ id: IOHandlerID) {
        let index = Int(id.index)
        if index < slots.count && slots[index].generation == id.generation {
            slots[index].tickEntryPresent = false
        }
    }
}

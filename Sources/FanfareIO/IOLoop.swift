import CURing
import Glibc

/// One io_uring ring, owned and driven by exactly one thread. Not Sendable; only `waker` crosses threads.
///
/// Design (after TigerBeetle's `src/io/linux.zig` and liburing's `examples/proxy.c`):
/// - Operations are queued as SQEs when requested and submitted in one batch per tick, together with the
///   wait (`io_uring_submit_and_wait_timeout`): one syscall per tick when a tick has one thing to do.
/// - `user_data` packs (handler slot, slot generation, operation kind, caller tag), so a completion is
///   dispatched by indexing the handler table: no lookup, no allocation.
/// - Each tick has two phases: CQEs are copied out in batches of 256 and the CQ head is advanced once per
///   batch, and only then are handlers called. Handlers may queue more operations. When more of the tick's
///   work follows (further completions, due timers), what a handler queued is submitted right after it
///   returns (`submitsEagerly`): a connection's reply leaves while the loop goes on with the others, so the
///   peer works in parallel with this thread instead of waiting for the whole tick (measured: without it a
///   client and a server on two cores ran strictly in turn). Otherwise it goes out with the next wait.
/// - Completions that arrive while a tick runs are dispatched in the same tick for up to `drainTimeLimit`.
/// - Timers live in the loop (a binary min-heap), not in the kernel; the wait is bounded by the earliest
///   deadline.
/// - Cross-thread wake-ups go through an eventfd whose read is kept armed in the ring (see `IOWaker`).
///
/// Buffers passed to operations belong to the caller and must stay valid until the operation's completion
/// has been delivered. A connect address is the exception: the loop copies it.
///
/// Unregistering a handler that still has operations in flight does not free its slot: the loop keeps the
/// handler (and so the buffers it owns) alive, drops those completions after accounting for them (an fd
/// delivered by a dropped accept is closed), and frees the slot after the last one. So cancel or close the
/// handler's sockets before unregistering, or its slot may wait forever for a recv that never completes.
public final class IOLoop {
    /// CQEs copied out of the ring per batch.
    static let reapBatch = 256
    /// Connect addresses copied per tick before a submit is forced (the kernel copies them at submission).
    static let connectAddressSlots = 64
    /// How long a tick keeps taking completions that arrived after it started (ns).
    static let drainTimeLimit: UInt64 = 1_000_000
    /// The default bound on a wait in `run(until:)`.
    public static let defaultMaxWait: UInt64 = 1_000_000_000

    let ring: UnsafeMutablePointer<io_uring>
    /// The `IORING_SETUP_*` flags the ring was created with (after any fallback).
    public let setupFlags: UInt32
    /// `IORING_FEAT_*` reported by the kernel.
    public let features: UInt32
    public let submissionQueueEntries: UInt32
    public let completionQueueEntries: UInt32
    /// One line for logs: sizes and the flags that were accepted.
    public let ringDescription: String
    /// Wakes this loop from any thread.
    public let waker: IOWaker

    let owner: pthread_t
    let cqePointers: UnsafeMutablePointer<UnsafeMutablePointer<io_uring_cqe>?>
    @exclusivity(unchecked) var staged: CompletionQueue
    @exclusivity(unchecked) var handlers: HandlerTable
    @exclusivity(unchecked) var timers: TimerHeap
    @exclusivity(unchecked) var tickList = ContiguousArray<IOHandlerID>()
    @exclusivity(unchecked) var wakeTarget: IOHandlerID?
    @exclusivity(unchecked) var wakeTag: UInt8 = 0
    let wakeBuffer: UnsafeMutablePointer<UInt64>
    @exclusivity(unchecked) var wakeReadArmed = false
    @exclusivity(unchecked) var wakeReadFailures = 0
    let connectAddresses: UnsafeMutablePointer<sockaddr_storage>
    @exclusivity(unchecked) var connectAddressesUsed = 0
    @exclusivity(unchecked) var inTick = false
    @exclusivity(unchecked) var shuttingDown = false
    @exclusivity(unchecked) var shutdownCancelInFlight = false

    /// Submit what a completion handler or timer queued as soon as it returns (one `io_uring_enter`, no
    /// wait) rather than with the next tick's wait. A reply then leaves while the rest of the tick runs, so
    /// the peer works in parallel instead of in turn with this thread.
    @exclusivity(unchecked) public var submitsEagerly = true

    /// Monotonic nanoseconds, read once per tick after the wait (and again when the tick takes completions
    /// that arrived while it ran).
    @inlinable public var now: UInt64 { clockReading }
    /// `now`'s storage. Other modules read it through the inlinable getter: `@exclusivity(unchecked)` only
    /// covers accesses compiled in this module, and a direct cross-module read would be checked at run time.
    @exclusivity(unchecked) @usableFromInline var clockReading: UInt64
    /// How many times the loop called into liburing to submit (each is at most one `io_uring_enter` when
    /// the kernel accepts the batch). Steady state: one per tick, plus one per eager submit.
    @exclusivity(unchecked) public internal(set) var submitCalls: UInt64 = 0
    /// Operations handed to the ring whose final completion has not been reaped (includes the loop's own
    /// eventfd read and cancels).
    @exclusivity(unchecked) public internal(set) var inFlightOperations = 0
    /// Completions that arrived for a handler that had been unregistered.
    @exclusivity(unchecked) public internal(set) var droppedCompletions: UInt64 = 0
    /// Ticks run so far.
    @exclusivity(unchecked) public internal(set) var ticks: UInt64 = 0
    /// Ticks that entered the kernel to submit and gather completions and then dispatched every completion there
    /// was: after such a tick, an operation still in flight that was submitted before it had nothing to complete
    /// with (a receive: its socket was empty) at `collectedAt`.
    @exclusivity(unchecked) public internal(set) var collections: UInt64 = 0
    /// The clock when the last of `collections` entered the kernel.
    @exclusivity(unchecked) public internal(set) var collectedAt: UInt64 = 0

    /// Creates the ring on the calling thread, which becomes the loop's owner.
    ///
    /// - Parameters:
    ///   - entries: SQ size; the CQ gets 4x (IORING_SETUP_CQSIZE).
    ///   - timerCapacity: timers that can be pending before the timer table has to grow.
    ///   - ringSetup: which setup flags to try (default: the best the kernel takes).
    public init(entries: UInt32 = 1024, timerCapacity: Int = 1024, ringSetup: IORingSetup = .automatic) throws(IOError)
    {
        precondition(entries > 0, "IOLoop: entries must be positive")
        let waker = try IOWaker()
        let ring = UnsafeMutablePointer<io_uring>.allocate(capacity: 1)
        ring.initialize(to: io_uring())
        let configuration: RingConfiguration
        do {
            configuration = try RingSetup.create(ring: ring, entries: entries, setup: ringSetup)
        } catch {
            ring.deallocate()
            throw error
        }
        self.ring = ring
        self.waker = waker
        setupFlags = configuration.flags
        features = configuration.features
        submissionQueueEntries = configuration.submissionEntries
        completionQueueEntries = configuration.completionEntries
        ringDescription = configuration.summary
        owner = pthread_self()
        cqePointers = .allocate(capacity: IOLoop.reapBatch)
        cqePointers.initialize(repeating: nil, count: IOLoop.reapBatch)
        staged = CompletionQueue(capacity: Int(configuration.completionEntries) + IOLoop.reapBatch)
        handlers = HandlerTable(reservingCapacity: 64)
        timers = TimerHeap(capacity: timerCapacity)
        tickList.reserveCapacity(64)
        wakeBuffer = .allocate(capacity: 1)
        wakeBuffer.initialize(to: 0)
        connectAddresses = .allocate(capacity: IOLoop.connectAddressSlots)
        connectAddresses.initialize(repeating: sockaddr_storage(), count: IOLoop.connectAddressSlots)
        clockReading = IOLoop.monotonicNanoseconds()
        armWakeRead()
    }

    deinit {
        assertOwner()
        shuttingDown = true
        waker.retire()
        drainSilently()
        io_uring_queue_exit(ring)
        ring.deallocate()
        cqePointers.deallocate()
        wakeBuffer.deallocate()
        connectAddresses.deallocate()
        // `handlers` (and with it every handler and its buffers) is released after this body, once the
        // kernel can no longer touch those buffers.
    }

    /// Debug check that the loop is used only on the thread that created it.
    @inline(__always)
    func assertOwner(_ function: StaticString = #function) {
        assert(pthread_equal(owner, pthread_self()) != 0, "IOLoop.\(function) called off the loop's thread")
    }

    // MARK: - Handlers

    /// Adds a handler to the slot table (strong reference). May allocate when the table grows.
    public func register(_ handler: any IOHandler) -> IOHandlerID {
        assertOwner()
        return handlers.add(handler)
    }

    /// Removes a handler: no more completions, timers or ticks are delivered to it. Stale IDs are ignored.
    /// If operations are still in flight, the loop keeps the handler alive until they complete (see the
    /// type's documentation).
    public func unregister(_ id: IOHandlerID) {
        assertOwner()
        guard handlers.isRegistered(id) else { return }
        if wakeTarget == id { wakeTarget = nil }
        if handlers.beginUnregister(index: Int(id.index)) {
            let released = handlers.free(index: Int(id.index))
            // Released here, after the table access has ended: its deinit may call into the loop.
            withExtendedLifetime(released) {}
        }
    }

    /// True while `id` is registered (not unregistered, not a previous tenant of the slot).
    public func isRegistered(_ id: IOHandlerID) -> Bool {
        handlers.isRegistered(id)
    }

    /// Registered handlers (draining ones excluded).
    public var registeredHandlerCount: Int { handlers.registeredCount }

    /// Operations in flight for one handler (useful before unregistering).
    public func inFlightOperations(for id: IOHandlerID) -> Int {
        guard Int(id.index) < handlers.slots.count, handlers.generation(index: Int(id.index)) == id.generation else {
            return 0
        }
        return Int(handlers.inFlight(index: Int(id.index)))
    }

    /// The handler whose `ioCompleted(tag:result: 0, flags: 0)` runs on the loop thread after `waker.wake()`.
    public func setWakeHandler(_ handler: IOHandlerID, tag: UInt8) {
        assertOwner()
        precondition(handlers.isRegistered(handler), "IOLoop.setWakeHandler: \(handler) is not registered")
        wakeTarget = handler
        wakeTag = tag
    }

    /// Calls `handler.tick(loop:)` at the end of every tick until removed or unregistered.
    public func addTickHandler(_ handler: IOHandlerID) {
        assertOwner()
        precondition(handlers.isRegistered(handler), "IOLoop.addTickHandler: \(handler) is not registered")
        if handlers.setWantsTick(handler, true) {
            tickList.append(handler)
        }
    }

    public func removeTickHandler(_ handler: IOHandlerID) {
        assertOwner()
        guard handlers.isRegistered(handler) else { return }
        _ = handlers.setWantsTick(handler, false)
    }

    // MARK: - Timers

    /// Fires `timerFired(tag:cookie:)` on `handler` once `now >= deadline` (monotonic nanoseconds).
    /// Timers with equal deadlines fire in the order they were scheduled.
    @discardableResult
    public func schedule(at deadline: UInt64, handler: IOHandlerID, tag: UInt8, cookie: UInt64) -> IOTimerID {
        assertOwner()
        precondition(handlers.isRegistered(handler), "IOLoop.schedule: \(handler) is not registered")
        return timers.insert(
            deadline: deadline, handlerIndex: handler.index, handlerGeneration: handler.generation,
            tag: tag, cookie: cookie)
    }

    /// Cancels a pending timer. Returns false (harmlessly) if it already fired or was cancelled.
    @discardableResult
    public func cancelTimer(_ id: IOTimerID) -> Bool {
        assertOwner()
        return timers.cancel(id)
    }

    /// Timers waiting to fire.
    public var pendingTimerCount: Int { timers.count }

    // MARK: - Running

    /// One tick: submit everything queued and wait (up to `maxWait` ns, less if a timer is due sooner, not
    /// at all if work is already pending) for at least one completion; reap and dispatch all ready CQEs;
    /// run the wake handler if woken; fire due timers; run tick handlers.
    /// Returns the number of events delivered (completions, wake-ups and timers).
    @discardableResult
    public func runOnce(maxWait: UInt64) throws(IOError) -> Int {
        assertOwner()
        precondition(!inTick, "IOLoop.runOnce is not reentrant: it was called from a handler")
        inTick = true
        defer { inTick = false }
        ticks &+= 1
        if !wakeReadArmed && !shuttingDown { armWakeRead() }

        let start = IOLoop.monotonicNanoseconds()
        var wait = maxWait
        if let deadline = timers.earliestDeadline {
            wait = deadline <= start ? 0 : min(wait, deadline - start)
        }
        if !staged.isEmpty || io_uring_cq_ready(ring) > 0 { wait = 0 }
        if wait > 0 && !waker.prepareToSleep() { wait = 0 }  // a wake-up is already pending

        let (failure, gathered) = enter(wait: wait, start: start)
        let woken = waker.takeNotification()
        if let failure {
            if woken { waker.wake() }  // keep it for the next tick (no syscall: the loop is awake)
            throw failure
        }
        clockReading = IOLoop.monotonicNanoseconds()
        let enteredAt = clockReading
        if io_uring_sq_ready(ring) == 0 { connectAddressesUsed = 0 }

        var handled = drainCompletions()
        if gathered && staged.isEmpty && io_uring_cq_ready(ring) == 0 {
            collections &+= 1
            collectedAt = enteredAt
        }
        if woken, let target = wakeTarget,
            let handler = handlers.registeredHandler(index: Int(target.index), generation: target.generation)
        {
            handler.ioCompleted(tag: wakeTag, result: 0, flags: 0, loop: self)
            handled += 1
        }
        handled += fireDueTimers()
        runTickHandlers()
        return handled
    }

    /// Runs ticks until `shouldStop` returns true (checked before every tick), each waiting at most one second.
    public func run(until shouldStop: () -> Bool) throws(IOError) {
        try run(maxWait: IOLoop.defaultMaxWait, until: shouldStop)
    }

    /// Runs ticks until `shouldStop` returns true (checked before every tick).
    public func run(maxWait: UInt64, until shouldStop: () -> Bool) throws(IOError) {
        while !shouldStop() {
            try runOnce(maxWait: maxWait)
        }
    }

    /// Cancels every operation in flight and runs ticks (handlers see `-ECANCELED` and may clean up) until
    /// nothing is in flight or `timeout` ns pass. The loop should not be used for new work afterwards.
    public func shutdown(timeout: UInt64 = 1_000_000_000) throws(IOError) {
        assertOwner()
        precondition(!inTick, "IOLoop.shutdown called from a handler")
        shuttingDown = true
        let deadline = IOLoop.monotonicNanoseconds() &+ timeout
        while inFlightOperations > 0 && IOLoop.monotonicNanoseconds() < deadline {
            if !shutdownCancelInFlight && inFlightOperations > 0 {
                queueCancelEverything()
            }
            try runOnce(maxWait: 10_000_000)
        }
    }

    /// Submits and waits. Returns an error only for failures other than timeout, signal or a busy CQ, and
    /// whether the kernel was entered to gather completions (which runs deferred task work: every completion
    /// due by then is visible).
    private func enter(wait: UInt64, start: UInt64) -> (IOError?, gathered: Bool) {
        var remaining = wait
        while true {
            let result: Int32
            if remaining == 0 {
                // Nothing to submit and completions already visible: no syscall needed for this tick.
                if io_uring_sq_ready(ring) == 0 && io_uring_cq_ready(ring) > 0 { return (nil, false) }
                submitCalls &+= 1
                // GETEVENTS also runs deferred task work (DEFER_TASKRUN), so ready completions appear.
                result = io_uring_submit_and_get_events(ring)
            } else {
                var timeout = __kernel_timespec(
                    tv_sec: Int64(remaining / 1_000_000_000), tv_nsec: Int64(remaining % 1_000_000_000))
                var cqe: UnsafeMutablePointer<io_uring_cqe>? = nil
                submitCalls &+= 1
                result = io_uring_submit_and_wait_timeout(ring, &cqe, 1, &timeout, nil)
            }
            if result >= 0 || result == -ETIME { return (nil, true) }
            switch -result {
            case EINTR:
                // A signal: retry for what is left of the wait.
                let elapsed = IOLoop.monotonicNanoseconds() &- start
                remaining = elapsed >= wait ? 0 : wait - elapsed
            case EBUSY, EAGAIN:
                // The CQ is overcommitted: reap this tick, and the queued SQEs go out with the next one.
                return (nil, false)
            default:
                return (IOError(operation: "io_uring_enter (submit and wait)", errno: -result), false)
            }
        }
    }

    // MARK: - Completions

    /// Copies up to `limit` (at most one batch) ready CQEs into `staged` and advances the CQ head once.
    @discardableResult
    func reapIntoStaging(limit: Int) -> Int {
        let wanted = min(limit, IOLoop.reapBatch)
        guard wanted > 0 else { return 0 }
        let count = Int(io_uring_peek_batch_cqe(ring, cqePointers, UInt32(wanted)))
        for i in 0..<count {
            let cqe = cqePointers[i]!
            staged.append(
                CompletionRecord(userData: cqe.pointee.user_data, result: cqe.pointee.res, flags: cqe.pointee.flags))
        }
        io_uring_cq_advance(ring, UInt32(count))
        return count
    }

    /// Reaps and dispatches ready completions, at most one CQ's worth per tick so timers and tick
    /// handlers are not starved by a flood.
    private func drainCompletions() -> Int {
        var handled = 0
        var budget = Int(completionQueueEntries)
        let tickStart = now
        var reapedOnce = false
        while true {
            if staged.isEmpty {
                guard budget > 0 else { break }
                if reapedOnce {
                    // Completions that arrived while this tick ran (often the inline results of eager submits)
                    // are taken too, for a short while only: timers and tick handlers must not wait behind them.
                    guard io_uring_cq_ready(ring) > 0 else { break }
                    let clock = IOLoop.monotonicNanoseconds()
                    guard clock &- tickStart <= IOLoop.drainTimeLimit else { break }
                    clockReading = clock  // they may be younger than the tick
                }
                let reaped = reapIntoStaging(limit: min(budget, staged.freeSpace))
                guard reaped > 0 else { break }
                reapedOnce = true
                budget -= reaped
            }
            while let completion = staged.popFirst() {
                handled += dispatch(completion)
                // Only when more of this tick's work follows: otherwise the tick's own submit comes soon enough.
                if submitsEagerly && (!staged.isEmpty || io_uring_cq_ready(ring) > 0 || timerDue) { submitEagerly() }
            }
        }
        return handled
    }

    /// A timer is due now (it fires later in this tick).
    private var timerDue: Bool {
        guard let deadline = timers.earliestDeadline else { return false }
        return deadline <= now
    }

    /// Hands what a handler just queued to the kernel now (see `submitsEagerly`).
    @inline(__always)
    func submitEagerly() {
        guard io_uring_sq_ready(ring) > 0 else { return }
        submitQueuedNow()
    }

    /// Delivers one completion. Returns 1 if a handler was called.
    private func dispatch(_ completion: CompletionRecord) -> Int {
        let token = OperationToken(raw: completion.userData)
        let final = completion.flags & IORING_CQE_F_MORE == 0
        if final { inFlightOperations -= 1 }
        if token.slot == OperationToken.internalSlot {
            completeInternal(token, result: completion.result)
            return 0
        }
        let index = Int(token.slot)
        guard index < handlers.slots.count, handlers.generation(index: index) == token.generation else {
            // Cannot happen (a slot is reused only after its last completion); accounted and dropped anyway.
            assertionFailure("IOLoop: completion for a stale handler slot \(token.slot)")
            dropCompletion(token, result: completion.result)
            return 0
        }
        let state = final ? handlers.operationFinished(index: index) : handlers.state(index: index)
        switch state {
        case .registered:
            guard let handler = handlers.slots[index].handler else {
                preconditionFailure("IOLoop: registered slot \(index) has no handler")
            }
            handler.ioCompleted(tag: token.tag, result: completion.result, flags: completion.flags, loop: self)
            return 1
        case .draining:
            dropCompletion(token, result: completion.result)
            if final && handlers.inFlight(index: index) == 0 {
                let released = handlers.free(index: index)
                withExtendedLifetime(released) {}
            }
            return 0
        case .free:
            assertionFailure("IOLoop: completion for free handler slot \(index)")
            dropCompletion(token, result: completion.result)
            return 0
        }
    }

    /// Accounts for the resources of a completion nobody will see.
    private func dropCompletion(_ token: OperationToken, result: Int32) {
        droppedCompletions &+= 1
        // An accepted connection that no handler will adopt: close it instead of leaking the fd.
        if token.kind == .accept && result >= 0 {
            Glibc.close(result)
        }
    }

    private func completeInternal(_ token: OperationToken, result: Int32) {
        switch token.kind {
        case .wakeRead?:
            wakeReadArmed = false
            if result >= 0 || result == -EAGAIN || result == -EINTR || result == -ECANCELED {
                wakeReadFailures = 0
            } else {
                wakeReadFailures += 1
                assertionFailure("IOLoop: the waker's eventfd read failed: \(IOError.describe(errno: -result))")
            }
            if !shuttingDown { armWakeRead() }
        case .cancel?:
            shutdownCancelInFlight = false
        default:
            assertionFailure("IOLoop: unexpected internal completion kind \(token.kindRawValue)")
        }
    }

    /// Keeps one 8-byte read of the waker's eventfd in the ring; its completion ends a sleeping wait.
    func armWakeRead() {
        // A read that keeps failing is not re-armed forever; the loop then notices wake-ups at its next tick.
        guard !wakeReadArmed, wakeReadFailures < 3 else { return }
        let sqe = nextSQE()
        io_uring_prep_read(sqe, waker.eventFD, wakeBuffer, UInt32(MemoryLayout<UInt64>.size), 0)
        io_uring_sqe_set_data64(
            sqe, OperationToken(slot: OperationToken.internalSlot, generation: 0, kind: .wakeRead, tag: 0).raw)
        wakeReadArmed = true
        inFlightOperations += 1
    }

    private func fireDueTimers() -> Int {
        guard timers.count > 0 else { return 0 }
        let limit = timers.nextSequence
        var fired = 0
        while let due = timers.popDue(now: now, sequenceLimit: limit) {
            guard
                let handler = handlers.registeredHandler(
                    index: Int(due.handlerIndex), generation: due.handlerGeneration)
            else {
                continue  // its handler was unregistered
            }
            handler.timerFired(tag: due.tag, cookie: due.cookie, loop: self)
            fired += 1
            if submitsEagerly && timerDue { submitEagerly() }
        }
        return fired
    }

    private func runTickHandlers() {
        let count = tickList.count  // handlers added during this pass start next tick
        var sawDeadEntry = false
        var i = 0
        while i < count {
            let id = tickList[i]
            i += 1
            if handlers.tickEntryIsLive(id),
                let handler = handlers.registeredHandler(index: Int(id.index), generation: id.generation)
            {
                handler.tick(loop: self)
            } else {
                sawDeadEntry = true
            }
        }
        if sawDeadEntry { compactTickList() }
    }

    private func compactTickList() {
        var kept = 0
        for i in 0..<tickList.count {
            let id = tickList[i]
            if handlers.tickEntryIsLive(id) {
                tickList[kept] = id
                kept += 1
            } else {
                handlers.tickEntryRemoved(id)
            }
        }
        tickList.removeLast(tickList.count - kept)
    }

    // MARK: - Shutdown

    /// Queues one cancel that matches every request in the ring (IORING_ASYNC_CANCEL_ANY, 5.19+).
    func queueCancelEverything() {
        let sqe = nextSQE()
        io_uring_prep_cancel64(sqe, 0, Int32(IORING_ASYNC_CANCEL_ANY))
        io_uring_sqe_set_data64(
            sqe, OperationToken(slot: OperationToken.internalSlot, generation: 0, kind: .cancel, tag: 0).raw)
        inFlightOperations += 1
        shutdownCancelInFlight = true
    }

    /// In deinit: cancel everything and wait (bounded) for the completions without calling any handler,
    /// so no kernel operation still points into a handler's buffers when the handlers are released.
    private func drainSilently() {
        guard inFlightOperations > 0 else { return }
        queueCancelEverything()
        let deadline = IOLoop.monotonicNanoseconds() &+ 2_000_000_000
        while inFlightOperations > 0 && IOLoop.monotonicNanoseconds() < deadline {
            var timeout = __kernel_timespec(tv_sec: 0, tv_nsec: 10_000_000)
            var cqe: UnsafeMutablePointer<io_uring_cqe>? = nil
            let result = io_uring_submit_and_wait_timeout(ring, &cqe, 1, &timeout, nil)
            if result < 0 && result != -ETIME && result != -EINTR && result != -EBUSY && result != -EAGAIN {
                return  // e.g. not the owner thread under SINGLE_ISSUER: let queue_exit cancel the rest
            }
            while reapIntoStaging(limit: staged.freeSpace) > 0 || !staged.isEmpty {
                while let completion = staged.popFirst() {
                    let token = OperationToken(raw: completion.userData)
                    guard completion.flags & IORING_CQE_F_MORE == 0 else {
                        if token.kind == .accept && completion.result >= 0 { Glibc.close(completion.result) }
                        continue
                    }
                    inFlightOperations -= 1
                    if token.slot != OperationToken.internalSlot, Int(token.slot) < handlers.slots.count {
                        _ = handlers.operationFinished(index: Int(token.slot))
                    }
                    if token.kind == .accept && completion.result >= 0 { Glibc.close(completion.result) }
                }
            }
        }
    }
}

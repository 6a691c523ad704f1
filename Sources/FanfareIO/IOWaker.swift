import CURing
import Glibc
import Synchronization

/// Wakes an `IOLoop` from any thread, writing its eventfd only when the loop is (about to be) asleep.
///
/// The loop keeps an eventfd read armed in its ring. Producers call `wake()` after publishing work (e.g.
/// after pushing to an MPSC queue). A three-state flag decides whether a syscall is needed:
/// - `awake`: the loop is running a tick; `wake()` just marks `notified` (no syscall), and the loop sees
///   it before it would sleep.
/// - `sleeping`: the loop is blocked in the kernel (or about to be); `wake()` marks `notified` and writes
///   the eventfd, once per sleep however many producers call it.
/// - `notified`: a wake-up is pending; `wake()` does nothing.
/// The loop swaps the flag back to `awake` after every wait and, if it was `notified`, calls the wake
/// handler. All transitions are read-modify-write with acquire-release ordering, so work published before
/// `wake()` is visible to the wake handler.
public final class IOWaker: Sendable {
    static let awake: UInt8 = 0
    static let sleeping: UInt8 = 1
    static let notified: UInt8 = 2

    /// Owned by the waker, not the loop: a producer may still hold the waker after the loop is gone.
    let eventFD: Int32
    private let state = Atomic<UInt8>(IOWaker.awake)
    private let writes = Atomic<UInt64>(0)

    init() throws(IOError) {
        let fd = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard fd >= 0 else {
            throw IOError(operation: "eventfd", errno: Glibc.errno)
        }
        eventFD = fd
    }

    deinit {
        Glibc.close(eventFD)
    }

    /// Asks the loop to run its wake handler soon. Safe from any thread; cheap when the loop is awake.
    public func wake() {
        let previous = state.exchange(IOWaker.notified, ordering: .acquiringAndReleasing)
        if previous == IOWaker.sleeping {
            // Counted first, so whoever the write wakes already sees the count.
            writes.wrappingAdd(1, ordering: .relaxed)
            var one: UInt64 = 1
            // EAGAIN (counter saturated) still leaves the eventfd readable, which is all that matters.
            _ = Glibc.write(eventFD, &one, MemoryLayout<UInt64>.size)
        }
    }

    /// How many times `wake()` had to write the eventfd (for tests and stats).
    public var eventFDWrites: UInt64 { writes.load(ordering: .relaxed) }

    /// True while the loop is blocked waiting (or about to block).
    public var isLoopSleeping: Bool { state.load(ordering: .acquiring) == IOWaker.sleeping }

    // MARK: - Loop side

    /// Loop thread, before a blocking wait: returns false if a wake-up is already pending (do not block).
    func prepareToSleep() -> Bool {
        state.compareExchange(
            expected: IOWaker.awake, desired: IOWaker.sleeping, ordering: .acquiringAndReleasing
        ).exchanged
    }

    /// Loop thread, after every wait: returns true if `wake()` was called since the previous call.
    func takeNotification() -> Bool {
        state.exchange(IOWaker.awake, ordering: .acquiringAndReleasing) == IOWaker.notified
    }

    /// Loop thread, when the loop goes away: later `wake()` calls never write the eventfd.
    func retire() {
        state.store(IOWaker.notified, ordering: .releasing)
    }
}

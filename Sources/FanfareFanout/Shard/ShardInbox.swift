import FanfareIO
import Synchronization

/// The only way other threads reach a shard: two bounded lock-free MPSC queues, each half of the shard's
/// command capacity.
///
/// - `control`: publishes, registrations and the rest, in the order the engine queued them. They are queued
///   only under the engine's control lock, after `hasControlRoom` was checked on every shard concerned, and
///   counted in `controlQueued` from then until the shard takes them: room checked under the lock is still
///   there at the enqueue (only the shard's thread frees room meanwhile). A publish goes to every shard or none.
/// - `singles`: single pushes. Taken every loop iteration before any control work, so a flood of publishes never
///   stands between a single push and its stream; a full queue is the pusher's back-pressure.
final class ShardInbox: Sendable {
    private let control: BoundedMPSCQueue<ShardCommand>
    private let singles: BoundedMPSCQueue<SinglePush>
    private let controlQueued = Atomic<Int>(0)
    /// Engine threads waiting for control room (`waitForControlRoom`), and the signal the shard posts for them.
    private let roomWaiters = Atomic<Int>(0)
    private let roomFreed = ThreadSignal()

    init(commandCapacity: Int) {
        control = BoundedMPSCQueue(capacity: max(2, commandCapacity / 2))
        singles = BoundedMPSCQueue(capacity: max(2, commandCapacity / 2))
    }

    /// Whether a control command fits now (ask under the engine's control lock).
    var hasControlRoom: Bool { controlQueued.load(ordering: .relaxed) < control.capacity }

    /// Control commands queued and not taken yet.
    var controlCount: Int { controlQueued.load(ordering: .relaxed) }

    /// Commands and single pushes waiting (statistics).
    var queuedCount: Int { controlCount + singles.approximateCount }

    /// Under the engine's control lock, after `hasControlRoom` said yes: cannot fail.
    func enqueueControl(_ command: ShardCommand) {
        controlQueued.add(1, ordering: .relaxed)
        let taken = control.enqueue(command)
        precondition(taken, "a shard queue refused a control command it had room for")
    }

    /// Blocks until a control command fits: for commands that must get through because their durable part
    /// already happened. The shard drains its queue every loop iteration, so this waits only under a burst.
    func waitForControlRoom() {
        while !hasControlRoom {
            // Announce, then look again: the shard frees room, then looks for waiters (both sequentially
            // consistent), so one of the two sees the other and no wake-up is lost.
            roomWaiters.add(1, ordering: .sequentiallyConsistent)
            if !hasControlRoomNow { roomFreed.wait(until: IOLoop.monotonicNanoseconds() &+ 100_000_000) }
            roomWaiters.subtract(1, ordering: .sequentiallyConsistent)
        }
    }

    private var hasControlRoomNow: Bool { controlQueued.load(ordering: .sequentiallyConsistent) < control.capacity }

    /// Any thread: false when the singles' queue is full (back-pressure).
    func enqueueSingle(_ single: SinglePush) -> Bool { singles.enqueue(single) }

    /// The shard's thread.
    func takeSingle() -> SinglePush? { singles.dequeue() }

    /// The shard's thread.
    func takeControl() -> ShardCommand? {
        guard let command = control.dequeue() else { return nil }
        controlQueued.subtract(1, ordering: .sequentiallyConsistent)
        if roomWaiters.load(ordering: .sequentiallyConsistent) > 0 { roomFreed.post() }
        return command
    }
}

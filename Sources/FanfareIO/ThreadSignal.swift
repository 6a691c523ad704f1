import Glibc

/// A counting signal between threads (a POSIX semaphore): `post` from any thread, `wait` blocks the caller until
/// a post or a deadline. For the control path only (waiting for queue room, for shards to answer, for a drain):
/// nothing on the per-push path posts one.
public final class ThreadSignal: @unchecked Sendable {
    private let semaphore: UnsafeMutablePointer<sem_t>

    public init() {
        semaphore = .allocate(capacity: 1)
        sem_init(semaphore, 0, 0)
    }

    deinit {
        sem_destroy(semaphore)
        semaphore.deallocate()
    }

    /// Wakes one waiter, or the next one to wait.
    public func post() { sem_post(semaphore) }

    /// Waits for a post until `deadline` (monotonic ns; `.max` waits without one). False: the deadline passed.
    @discardableResult
    public func wait(until deadline: UInt64 = .max) -> Bool {
        while true {
            if deadline == .max {
                if sem_wait(semaphore) == 0 { return true }
            } else {
                let now = IOLoop.monotonicNanoseconds()
                guard now < deadline else { return sem_trywait(semaphore) == 0 }
                // sem_timedwait takes CLOCK_REALTIME: the remaining time, from the wall clock now.
                var wall = timespec()
                clock_gettime(CLOCK_REALTIME, &wall)
                let remaining = deadline - now
                let total = UInt64(wall.tv_nsec) + remaining % 1_000_000_000
                var until = timespec()
                until.tv_sec = wall.tv_sec + Int(remaining / 1_000_000_000) + Int(total / 1_000_000_000)
                until.tv_nsec = Int(total % 1_000_000_000)
                if sem_timedwait(semaphore, &until) == 0 { return true }
                if errno == ETIMEDOUT { return sem_trywait(semaphore) == 0 }
            }
            // EINTR: wait again.
        }
    }
}

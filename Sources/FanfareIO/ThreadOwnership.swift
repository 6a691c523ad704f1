#if canImport(Glibc)
import Glibc
#endif

/// Debug check of thread confinement for objects that move between threads in phases: built on one thread,
/// then driven by a worker thread (which `claim`s them on its first call), then, after that worker was joined,
/// finished on another (`handOver`). `assertOwned` traps when any other thread uses the object meanwhile.
/// All of it compiles to nothing in release builds.
public struct ThreadOwnership {
    #if DEBUG
    private var owner: pthread_t?
    #endif

    public init() {}

    /// The calling thread becomes the owner if there is none yet; otherwise it must be the owner.
    @inline(__always)
    public mutating func claim(_ type: StaticString, _ function: StaticString = #function) {
        #if DEBUG
        if owner == nil { owner = pthread_self() }
        assertOwned(type, function)
        #endif
    }

    /// Unowned (not started yet) or owned by the calling thread.
    @inline(__always)
    public func assertOwned(_ type: StaticString, _ function: StaticString = #function) {
        #if DEBUG
        if let owner {
            assert(pthread_equal(owner, pthread_self()) != 0, "\(type).\(function) called off its owning thread")
        }
        #endif
    }

    /// The same check as a value, for use inside `assert(...)` (release builds never call it): true on the
    /// owning thread; the first caller becomes the owner.
    public mutating func claimIsCurrent() -> Bool {
        #if DEBUG
        if owner == nil { owner = pthread_self() }
        return pthread_equal(owner!, pthread_self()) != 0
        #else
        return true
        #endif
    }

    /// The owner is gone (its thread was joined): the calling thread takes over.
    @inline(__always)
    public mutating func handOver() {
        #if DEBUG
        owner = pthread_self()
        #endif
    }
}

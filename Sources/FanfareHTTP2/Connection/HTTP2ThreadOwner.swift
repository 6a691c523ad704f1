#if canImport(Glibc)
import Glibc
#endif

/// A session lives on one thread, its loop's (nothing in it locks): debug builds check that every call comes from
/// the thread of the first one. Call `isCurrent` only inside `assert`: release builds then never call it (the
/// field stays, unused), as `IOLoop` checks its owner.
struct HTTP2ThreadOwner {
    private var owner: pthread_t?

    /// True on the owning thread; the first caller becomes the owner.
    mutating func isCurrent() -> Bool {
        let current = pthread_self()
        guard let owner else {
            owner = current
            return true
        }
        return pthread_equal(owner, current) != 0
    }
}

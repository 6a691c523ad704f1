import CURing
import Glibc

extension IOLoop {
    /// CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall).
    @inline(__always)
    public static func monotonicNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}

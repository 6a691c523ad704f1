import Foundation
import Glibc

/// Waits for SIGINT/SIGTERM (or a timeout) without running a handler on a random thread.
///
/// Call `blockTerminationSignals()` before starting any thread: threads inherit the mask, so the signal
/// stays pending until `wait` takes it on the main thread.
public enum SignalWaiter {
    private static func terminationSignals() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGTERM)
        return set
    }

    public static func blockTerminationSignals() {
        var set = terminationSignals()
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Returns true if a signal arrived, false on timeout.
    @discardableResult
    public static func wait(seconds: Double?) -> Bool {
        var set = terminationSignals()
        // A timeout beyond a century (or not a number) is no timeout: timespec's conversion would trap.
        if let seconds, seconds.isFinite, seconds < 3e9 {
            let seconds = max(0, seconds)
            var timeout = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - Double(Int(seconds))) * 1e9))
            return sigtimedwait(&set, nil, &timeout) > 0
        }
        var signal: Int32 = 0
        sigwait(&set, &signal)
        return true
    }

    /// Non-blocking check (for loops that also do work).
    public static func poll() -> Bool {
        var set = terminationSignals()
        var zero = timespec(tv_sec: 0, tv_nsec: 0)
        return sigtimedwait(&set, nil, &zero) > 0
    }
}

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

    /// What `fanfare serve`'s signal thread was told.
    public enum ServiceSignal: Sendable {
        /// SIGINT or SIGTERM.
        case terminate
        /// SIGHUP: read the configuration (the apps file) again.
        case reload
    }

    /// Keeps SIGHUP pending for `waitForServiceSignal` (call before any thread starts, as for the others).
    public static func blockReloadSignal() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGHUP)
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Waits for SIGINT, SIGTERM or SIGHUP (blocked with `blockReloadSignal`).
    public static func waitForServiceSignal() -> ServiceSignal {
        var set = terminationSignals()
        sigaddset(&set, SIGHUP)
        var signal: Int32 = 0
        sigwait(&set, &signal)
        return signal == SIGHUP ? .reload : .terminate
    }

    /// Non-blocking check (for loops that also do work).
    public static func poll() -> Bool {
        var set = terminationSignals()
        var zero = timespec(tv_sec: 0, tv_nsec: 0)
        return sigtimedwait(&set, nil, &zero) > 0
    }
}

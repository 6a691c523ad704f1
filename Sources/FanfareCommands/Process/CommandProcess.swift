import ArgumentParser
import CURing
import Dispatch
import FanfareTLS

/// The process entry both executables share (`fanfare` and `fanfare-demo`): set up signals and output on the
/// main thread before any other thread starts, then run the command on the concurrency pool while the main
/// thread waits.
public enum CommandProcess {
    public static func run<Root: AsyncParsableCommand>(_ root: Root.Type) {
        // Before anything touches OpenSSL: its small per-call allocations come from per-thread caches (the
        // push path allocates nothing). A library user opts in the same way; FANFARE_OPENSSL_POOL=0 turns it off.
        OpenSSLAllocationCache.install()
        // Every thread created from here on inherits this mask, so SIGINT/SIGTERM stay pending until a
        // command takes them with SignalWaiter (and prints its summary) instead of killing the process.
        SignalWaiter.blockTerminationSignals()
        // `fanfare serve` reads its apps again on SIGHUP (its signal thread takes it); every other command keeps
        // SIGHUP's default (a closed terminal ends it).
        if CommandLine.arguments.dropFirst().first == "serve" { SignalWaiter.blockReloadSignal() }
        // Line-buffered stdout even into a pipe or file: progress and banners appear as they happen.
        capns_line_buffer_stdout()
        let done = DispatchSemaphore(value: 0)
        // Detached: the main thread is blocked below, so the command must not run on the main actor.
        Task.detached {
            await Root.main()  // exits the process with the command's status
            done.signal()
        }
        done.wait()
    }
}

import CURing
import Glibc
import Synchronization

/// A named thread that owns one `IOLoop` (control plane).
///
/// The thread optionally pins itself to a CPU, creates its loop (so the ring's single issuer is that
/// thread), runs `setup(loop)`, then runs the loop until stopped, and finally shuts the loop down on the
/// same thread. Two styles work:
/// - `setup` registers handlers and returns; the loop then runs until `stop()` (or `join()`).
/// - `setup` runs the loop itself (`loop.run(until:)` with its own stop condition) and returns when done;
///   the thread then ends as soon as `stop()` or `join()` has been called.
/// The initializer returns once the loop exists (it throws if pinning or ring creation failed); errors
/// thrown later by `setup` or the loop are returned by `join()`.
///
/// `setup` is a `@Sendable` closure that runs on the new thread. Do not write it in top-level
/// `main.swift` code: such closures are main-actor isolated, and Swift traps when they run on another
/// thread. Use a function or a closure inside a type.
public final class IOThread: Sendable {
    public let name: String
    /// Wakes the thread's loop (its wake handler runs, if one was set during setup).
    public let waker: IOWaker
    private let context: IOThreadContext
    private let thread: pthread_t
    private let joined = Atomic<Bool>(false)

    public init(
        name: String, cpu: Int? = nil, entries: UInt32 = 1024, maxWait: UInt64 = IOLoop.defaultMaxWait,
        setup: @escaping @Sendable (IOLoop) throws -> Void
    ) throws(IOError) {
        let context = IOThreadContext(name: name, cpu: cpu, entries: entries, maxWait: maxWait, setup: setup)
        var thread = pthread_t()
        let argument = Unmanaged.passRetained(context).toOpaque()
        let result = pthread_create(&thread, nil, ioThreadMain, argument)
        guard result == 0 else {
            Unmanaged<IOThreadContext>.fromOpaque(argument).release()
            throw IOError(operation: "pthread_create (\(name))", errno: result)
        }
        context.latch.wait()
        if let error = context.startupError {
            pthread_join(thread, nil)
            throw error
        }
        guard let waker = context.waker else { preconditionFailure("IOThread: started without a loop") }
        self.name = name
        self.context = context
        self.thread = thread
        self.waker = waker
    }

    deinit {
        if !joined.load(ordering: .acquiring) {
            if pthread_equal(thread, pthread_self()) != 0 {
                stop()
                pthread_detach(thread)
            } else {
                join()
            }
        }
    }

    /// Sets the stop flag that the thread's own run loop checks before each tick, and wakes the loop.
    /// (A `setup` that runs the loop itself stops on its own condition.) Any thread; returns at once.
    public func stop() {
        context.stopRequested.store(true, ordering: .releasing)
        waker.wake()
    }

    public var isStopRequested: Bool { context.stopRequested.load(ordering: .acquiring) }

    /// Asks the thread to stop (as `stop()` does), waits for it to exit, and returns the error that ended
    /// its setup or loop, if any. Later calls return at once with the same error.
    @discardableResult
    public func join() -> (any Error)? {
        stop()
        if !joined.exchange(true, ordering: .acquiringAndReleasing) {
            precondition(pthread_equal(thread, pthread_self()) == 0, "IOThread.join called on the IOThread itself")
            pthread_join(thread, nil)
        } else {
            context.exited.wait()
        }
        return context.runError
    }
}

/// State shared between `IOThread` and its pthread.
///
/// `@unchecked Sendable`: `startupError` and `waker` are written by the thread before `latch.open()` and
/// read by the creator after `latch.wait()`; `runError` is written before `exited.open()` and the thread's
/// exit, and read after `pthread_join` or `exited.wait()`. Each gives the needed happens-before.
final class IOThreadContext: @unchecked Sendable {
    let name: String
    let cpu: Int?
    let entries: UInt32
    let maxWait: UInt64
    let setup: @Sendable (IOLoop) throws -> Void
    let stopRequested = Atomic<Bool>(false)
    let latch = StartupLatch()
    let exited = StartupLatch()
    var startupError: IOError?
    var waker: IOWaker?
    var runError: (any Error)?

    init(name: String, cpu: Int?, entries: UInt32, maxWait: UInt64, setup: @escaping @Sendable (IOLoop) throws -> Void)
    {
        self.name = name
        self.cpu = cpu
        self.entries = entries
        self.maxWait = maxWait
        self.setup = setup
    }

    /// The thread's whole life: set up, run until stopped, shut the loop down (on this thread).
    func runThread() {
        defer { exited.open() }
        setCurrentThreadName(name)
        let loop: IOLoop
        do throws(IOError) {
            if let cpu { try CPUAffinity.pin(cpu: cpu) }
            loop = try IOLoop(entries: entries)
        } catch {
            startupError = error
            latch.open()
            return
        }
        waker = loop.waker
        latch.open()
        do {
            try setup(loop)
            try loop.run(maxWait: maxWait) { stopRequested.load(ordering: .acquiring) }
            try loop.shutdown()
        } catch {
            runError = error
        }
    }
}

/// Names the calling thread (shown by top, ps, gdb, perf). Writes /proc/thread-self/comm, which is what
/// pthread_setname_np does for the calling thread; that function is GNU-only and so not always imported.
/// Best effort: a failure leaves the inherited name.
func setCurrentThreadName(_ name: String) {
    // Linux keeps 15 bytes of a thread name.
    let bytes = Array(name.utf8.filter { $0 >= 0x20 && $0 < 0x7F }.prefix(15))
    let fd = Glibc.open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    Glibc.close(fd)
}

/// pthread entry point: a plain global function (not a closure), so it carries no actor isolation.
private func ioThreadMain(_ argument: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let context = Unmanaged<IOThreadContext>.fromOpaque(argument!).takeRetainedValue()
    context.runThread()
    return nil
}

/// A one-shot gate: `wait()` blocks until `open()` has been called (pthread mutex + condition variable).
final class StartupLatch: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var isOpen = false  // guarded by `mutex`

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func open() {
        pthread_mutex_lock(mutex)
        isOpen = true
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    func wait() {
        pthread_mutex_lock(mutex)
        while !isOpen { pthread_cond_wait(condition, mutex) }
        pthread_mutex_unlock(mutex)
    }
}

import Glibc

/// Runs blocking work on a thread of its own and suspends the calling task until it returns.
///
/// For an async caller that must wait on other threads (a shutdown joining its workers, a drain waiting for
/// APNs' answers): the Swift concurrency pool has one thread per core, so a few tasks blocked inside it stop
/// every other task of the process. A thread per call: it is for rare, long waits, never per push.
public enum BlockingHandOff {
    /// Runs `body` on a new thread named `name` (Linux keeps 15 bytes of it).
    public static func run<T: Sendable>(name: String, _ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            HandOffWork(name: name, compute: body) { continuation.resume(returning: $0) }.start()
        }
    }

    /// As `run(name:_:)`, for work that throws.
    public static func run<T: Sendable>(name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            HandOffWork(name: name, compute: { Result { try body() } }) { continuation.resume(with: $0) }.start()
        }
    }
}

/// What a hand-off thread runs (the pthread entry point cannot be generic).
private class HandOffThreadBody: @unchecked Sendable {
    let name: String
    init(name: String) { self.name = name }
    func run() {}
}

/// One hand-off: `compute` on a detached thread, released before `deliver` resumes the caller, so whatever the
/// work held is gone when the caller goes on (a shut-down client is freed by then).
private final class HandOffWork<T>: HandOffThreadBody, @unchecked Sendable {
    private var compute: (() -> T)?
    private let deliver: (T) -> Void

    init(name: String, compute: @escaping () -> T, deliver: @escaping (T) -> Void) {
        self.compute = compute
        self.deliver = deliver
        super.init(name: name)
    }

    override func run() {
        let value = compute!()
        compute = nil
        deliver(value)
    }

    func start() {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let argument = Unmanaged.passRetained(self as HandOffThreadBody).toOpaque()
        let result = pthread_create(
            &thread, &attributes,
            { argument in
                let work = Unmanaged<HandOffThreadBody>.fromOpaque(argument!).takeRetainedValue()
                setCurrentThreadName(work.name)
                work.run()
                return nil
            }, argument)
        if result != 0 {
            // No thread to be had (the process is at its limit): the work runs here rather than never.
            Unmanaged<HandOffThreadBody>.fromOpaque(argument).release()
            run()
        }
    }
}

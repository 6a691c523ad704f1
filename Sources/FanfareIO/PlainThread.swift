import Glibc

/// A named thread that runs one closure, for the engine's and the cluster's own loops that block on a semaphore
/// rather than an io_uring ring (`IOThread` is for those). The closure (and what it captures) lives until the
/// thread ends; whoever starts it joins it with `join(_:)`.
public enum PlainThread {
    private final class Body: @unchecked Sendable {
        let name: String
        let run: @Sendable () -> Void
        init(name: String, run: @escaping @Sendable () -> Void) {
            self.name = name
            self.run = run
        }
    }

    /// Starts `body` on a new thread called `name` (Linux keeps its first 15 bytes, shown by `top -H`).
    public static func start(named name: String, _ body: @escaping @Sendable () -> Void) throws(IOError) -> pthread_t {
        let context = Unmanaged.passRetained(Body(name: name, run: body))
        var thread = pthread_t()
        let result = pthread_create(
            &thread, nil,
            { argument in
                let body = Unmanaged<Body>.fromOpaque(argument!).takeRetainedValue()
                setCurrentThreadName(body.name)
                body.run()
                return nil
            }, context.toOpaque())
        guard result == 0 else {
            context.release()
            throw IOError(operation: "pthread_create (\(name))", errno: result)
        }
        return thread
    }

    /// Waits for a thread started here to end.
    public static func join(_ thread: pthread_t) { pthread_join(thread, nil) }
}

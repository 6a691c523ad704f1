import CURing
import Glibc

/// Which address families to connect over, and in which order to try them.
public enum AddressFamilyPreference: Sendable, Equatable, CaseIterable {
    /// getaddrinfo's order (RFC 6724 destination selection).
    case system
    /// IPv4 addresses first, then IPv6.
    case preferIPv4
    /// IPv6 addresses first, then IPv4.
    case preferIPv6
    case ipv4Only
    case ipv6Only

    /// `addresses` filtered and stably ordered by this preference.
    public func apply(to addresses: [SocketAddress]) -> [SocketAddress] {
        switch self {
        case .system: return addresses
        case .preferIPv4: return addresses.filter(\.isIPv4) + addresses.filter { !$0.isIPv4 }
        case .preferIPv6: return addresses.filter(\.isIPv6) + addresses.filter { !$0.isIPv6 }
        case .ipv4Only: return addresses.filter(\.isIPv4)
        case .ipv6Only: return addresses.filter(\.isIPv6)
        }
    }
}

/// Resolves host names on a thread of its own, so that getaddrinfo (which blocks for as long as DNS takes)
/// never stalls an io_uring loop. Lookups run one at a time in the order asked; each completion runs on the
/// resolver thread and hands its result back to its loop (e.g. a queue plus `IOWaker.wake()`).
public final class HostResolver: @unchecked Sendable {
    /// The blocking lookup (getaddrinfo by default).
    public typealias Lookup = @Sendable (_ host: String, _ port: UInt16) throws(IOError) -> [SocketAddress]
    public typealias Completion = @Sendable (Result<[SocketAddress], IOError>) -> Void

    private struct Request {
        var host: String
        var port: UInt16
        var preference: AddressFamilyPreference
        var completion: Completion
    }

    private let lookup: Lookup
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    // Guarded by `mutex`.
    private var requests: [Request] = []
    private var stopping = false
    private var lookupsDone = 0
    private var thread = pthread_t()
    private var joined = false

    public init(
        name: String = "fanfare-dns",
        lookup: @escaping Lookup = { host, port throws(IOError) in
            try SocketResolver.resolve(host: host, port: port)
        }
    ) throws(IOError) {
        self.lookup = lookup
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
        let context = Unmanaged.passRetained(HostResolverContext(resolver: self, name: name))
        let result = pthread_create(&thread, nil, hostResolverMain, context.toOpaque())
        guard result == 0 else {
            context.release()
            joined = true
            throw IOError(operation: "pthread_create (\(name))", errno: result)
        }
    }

    deinit {
        stop()
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Any thread: looks `host` up and calls `completion` on the resolver thread with the addresses in
    /// `preference`'s order (an error when none is left). After `stop()` the completion gets an error at once.
    public func resolve(
        host: String, port: UInt16, preference: AddressFamilyPreference = .system, completion: @escaping Completion
    ) {
        pthread_mutex_lock(mutex)
        guard !stopping else {
            pthread_mutex_unlock(mutex)
            completion(.failure(IOError(operation: "getaddrinfo", message: "the resolver is stopped")))
            return
        }
        requests.append(Request(host: host, port: port, preference: preference, completion: completion))
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Lookups finished so far (for tests and stats).
    public var completedLookups: Int {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return lookupsDone
    }

    /// Stops the thread after the lookup in progress (if any) and waits for it; requests still queued get
    /// an error. Idempotent; not from a completion.
    public func stop() {
        pthread_mutex_lock(mutex)
        stopping = true
        let alreadyJoined = joined
        joined = true
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
        if !alreadyJoined { pthread_join(thread, nil) }
    }

    /// The thread's loop: one lookup at a time, outside the lock.
    fileprivate func run() {
        while true {
            pthread_mutex_lock(mutex)
            while requests.isEmpty && !stopping { pthread_cond_wait(condition, mutex) }
            if stopping {
                let left = requests
                requests.removeAll()
                pthread_mutex_unlock(mutex)
                for request in left {
                    request.completion(.failure(IOError(operation: "getaddrinfo", message: "the resolver stopped")))
                }
                return
            }
            let request = requests.removeFirst()
            pthread_mutex_unlock(mutex)
            let result: Result<[SocketAddress], IOError>
            do throws(IOError) {
                let found = request.preference.apply(to: try lookup(request.host, request.port))
                if found.isEmpty {
                    throw IOError(
                        operation: "getaddrinfo",
                        message: "'\(request.host)' has no address of the families asked for (\(request.preference))")
                }
                result = .success(found)
            } catch {
                result = .failure(error)
            }
            pthread_mutex_lock(mutex)
            lookupsDone += 1
            pthread_mutex_unlock(mutex)
            request.completion(result)
        }
    }
}

/// Carries the resolver to its thread (the thread holds no reference of its own once started: `stop()`,
/// called from `deinit` at the latest, joins it before the resolver goes away).
private final class HostResolverContext {
    unowned(unsafe) let resolver: HostResolver
    let name: String
    init(resolver: HostResolver, name: String) {
        self.resolver = resolver
        self.name = name
    }
}

private func hostResolverMain(_ argument: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let context = Unmanaged<HostResolverContext>.fromOpaque(argument!).takeRetainedValue()
    let bytes = Array(context.name.utf8.prefix(15))
    let fd = Glibc.open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    if fd >= 0 {
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        Glibc.close(fd)
    }
    context.resolver.run()
    return nil
}

import FanfareIO
import FanfareTestSupport
import Glibc
import Synchronization
import Testing

/// Counts timer firings on the loop thread while a lookup is blocked elsewhere.
private final class TickCounter: IOHandler {
    var fired = 0
    var id: IOHandlerID!

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {}

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {
        fired += 1
        loop.schedule(at: loop.now &+ 1_000_000, handler: id, tag: 1, cookie: 0)
    }
}

/// A gate the blocked lookup waits on (the lookup itself is the real getaddrinfo once the gate opens).
private final class Gate: Sendable {
    private let open = Atomic<Bool>(false)
    func release() { open.store(true, ordering: .releasing) }
    func wait() { while !open.load(ordering: .acquiring) { usleep(1000) } }
}

@Suite("Host name lookups off the loop", .ownThread)
struct HostResolverTests {
    @Test("a lookup that blocks does not stall the loop; its result comes back through the loop's waker")
    func lookupOffTheLoop() throws {
        let gate = Gate()
        let lookupThread = Atomic<UInt>(0)
        let resolver = try HostResolver(lookup: { host, port throws(IOError) in
            lookupThread.store(UInt(bitPattern: Int(bitPattern: pthread_self())), ordering: .releasing)
            gate.wait()
            return try SocketResolver.resolve(host: host, port: port)
        })
        defer { resolver.stop() }
        let loop = try IOLoop(entries: 64)
        defer { try? loop.shutdown() }
        let counter = TickCounter()
        counter.id = loop.register(counter)
        loop.schedule(at: loop.now &+ 1_000_000, handler: counter.id, tag: 1, cookie: 0)
        let waker = loop.waker
        let results = Mutex<[Result<[SocketAddress], IOError>]>([])
        resolver.resolve(host: "127.0.0.1", port: 443) { result in
            results.withLock { $0.append(result) }
            waker.wake()
        }
        // The loop keeps running its timers while the lookup is held.
        let deadline = IOLoop.monotonicNanoseconds() &+ 10_000_000_000
        while counter.fired < 20 && IOLoop.monotonicNanoseconds() < deadline {
            _ = try loop.runOnce(maxWait: 5_000_000)
        }
        #expect(counter.fired >= 20)
        #expect(results.withLock { $0.isEmpty })
        #expect(lookupThread.load(ordering: .acquiring) != 0)
        #expect(lookupThread.load(ordering: .acquiring) != UInt(bitPattern: Int(bitPattern: pthread_self())))
        gate.release()
        while results.withLock({ $0.isEmpty }) && IOLoop.monotonicNanoseconds() < deadline {
            _ = try loop.runOnce(maxWait: 100_000_000)
        }
        let result = try #require(results.withLock { $0.first })
        let addresses = try result.get()
        #expect(addresses.map(\.description) == ["127.0.0.1:443"])
    }

    @Test("address family preference orders and filters the addresses")
    func familyPreference() throws {
        let v4 = try SocketAddress(ip: "192.0.2.1", port: 443)
        let v6 = try SocketAddress(ip: "2001:db8::1", port: 443)
        let v4b = try SocketAddress(ip: "192.0.2.2", port: 443)
        let found = [v6, v4, v4b]
        #expect(AddressFamilyPreference.system.apply(to: found) == found)
        #expect(AddressFamilyPreference.preferIPv4.apply(to: found) == [v4, v4b, v6])
        #expect(AddressFamilyPreference.preferIPv6.apply(to: found) == [v6, v4, v4b])
        #expect(AddressFamilyPreference.ipv4Only.apply(to: found) == [v4, v4b])
        #expect(AddressFamilyPreference.ipv6Only.apply(to: found) == [v6])
    }

    @Test("no address of the asked family is an error; a stopped resolver answers at once")
    func failures() throws {
        let resolver = try HostResolver()
        let results = Mutex<[Result<[SocketAddress], IOError>]>([])
        resolver.resolve(host: "127.0.0.1", port: 443, preference: .ipv6Only) { result in
            results.withLock { $0.append(result) }
        }
        resolver.resolve(host: "::1", port: 443, preference: .ipv4Only) { result in
            results.withLock { $0.append(result) }
        }
        let deadline = IOLoop.monotonicNanoseconds() &+ 30_000_000_000
        while results.withLock({ $0.count }) < 2 && IOLoop.monotonicNanoseconds() < deadline { usleep(1000) }
        let seen = results.withLock { $0 }
        #expect(seen.count == 2)
        for result in seen {
            if case .success(let addresses) = result { Issue.record("expected an error, got \(addresses)") }
        }
        resolver.stop()
        resolver.resolve(host: "127.0.0.1", port: 443) { result in results.withLock { $0.append(result) } }
        #expect(results.withLock { $0.count } == 3)
    }
}

import CURing
import FanfareIO
import FanfareTestSupport
import Glibc
import Testing

@Suite("Socket addresses, resolver, CPU helpers", .ownThread)
struct SocketHelperTests {
    @Test func addressesPrintLikeURLsDo() throws {
        #expect(try SocketAddress(ip: "127.0.0.1", port: 8443).description == "127.0.0.1:8443")
        let v6 = try SocketAddress(ip: "::1", port: 8443)
        #expect(v6.description == "[::1]:8443")
        #expect(v6.isIPv6 && !v6.isIPv4)
        #expect(v6.host == "::1")
        var moved = v6
        moved.port = 443
        #expect(moved.description == "[::1]:443")
        #expect(moved != v6)
        #expect(SocketAddress.unspecified.description == "unspecified")
        let error = #expect(throws: IOError.self) { try SocketAddress(ip: "api.push.apple.com", port: 443) }
        #expect(error?.description == "'api.push.apple.com' is not a numeric IPv4 or IPv6 address")
    }

    @Test func resolvesNumericAndLocalNames() throws {
        let numeric = try SocketResolver.resolve(host: "127.0.0.1", port: 2197)
        #expect(numeric.map(\.description) == ["127.0.0.1:2197"])
        let local = try SocketResolver.resolve(host: "localhost", port: 443)
        #expect(!local.isEmpty)
        #expect(local.allSatisfy { $0.port == 443 })
        #expect(Set(local).count == local.count)  // no duplicates
    }

    @Test func resolverErrorsNameTheHost() {
        let error = #expect(throws: IOError.self) {
            _ = try SocketResolver.resolve(host: "no-such-host.invalid", port: 443)
        }
        let text = error?.description ?? ""
        #expect(text.hasPrefix("cannot resolve 'no-such-host.invalid': "))
        #expect(text.count > "cannot resolve 'no-such-host.invalid': ".count)
    }

    @Test func tcpSocketsAreNonBlockingAndCloseOnExec() throws {
        let fd = try Sockets.makeTCPSocket(for: SocketAddress.loopbackIPv4(port: 1))
        defer { Sockets.close(fd) }
        let flags = fcntl(fd, F_GETFL)
        #expect(flags & O_NONBLOCK != 0)
        #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0)
        #expect(Sockets.setNoDelay(fd))
        #expect(throws: IOError.self) { try Sockets.makeTCPSocket(for: .unspecified) }
    }

    @Test func cpuCountIsPositive() {
        #expect(CPUAffinity.cpuCount >= 1)
    }

    @Test func errnoDescriptionsAreReadable() {
        let error = IOError(operation: "connect 10.0.0.1:443", errno: ETIMEDOUT)
        #expect(error.description == "connect 10.0.0.1:443 failed: Connection timed out (ETIMEDOUT)")
        #expect(IOError.describe(errno: 9999).hasSuffix("(errno 9999)"))
    }
}

// `Expect: 100-continue`: the service answers with an interim 100 so the client sends its body at once (curl
// waits a second for it before sending a body over 1 MiB); a body over --max-body gets 413 without a 100.
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite("Expect: 100-continue", .ownThread)
struct ExpectContinueTests {
    /// Runs blocking socket code on a thread of its own (never on the concurrency pool the server needs).
    static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    /// Sends the head, reads the first answer (the interim 100, or a final one), then (if told) the body and the rest.
    static func exchange(
        port: Int, head: String, body: [UInt8], sendBody: Bool
    ) throws -> (interim: String, final: String) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw HTTPTestError(description: "connect: \(errno)") }
        func sendAll(_ bytes: [UInt8]) {
            var offset = 0
            while offset < bytes.count {
                let sent = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if sent <= 0 { return }
                offset += sent
            }
        }
        func receive() -> String {
            var buffer = [UInt8](repeating: 0, count: 65536)
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : ""
        }
        sendAll(Array(head.utf8))
        let interim = receive()
        guard sendBody else { return (interim, "") }
        sendAll(body)
        var final = ""
        while !final.contains("\r\n\r\n") || !final.hasSuffix("}") {
            let more = receive()
            if more.isEmpty { break }
            final += more
        }
        return (interim, final)
    }

    @Test("an interim 100 before the body, then the answer; no 100 for a body over the limit")
    func expectContinue() async throws {
        let fixture = try await ServiceFixture { $0.maxBodyBytes = 64 << 10 }
        defer { fixture.removeDirectory() }
        let port = fixture.client.port
        let body = Array(registrationBody(0..<3, channel: "e").utf8)
        let head =
            "POST /v1/tokens HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\n"
            + "Expect: 100-continue\r\n\r\n"
        let (interim, final) = try await Self.onThread {
            try Self.exchange(port: port, head: head, body: body, sendBody: true)
        }
        #expect(interim.hasPrefix("HTTP/1.1 100 Continue\r\n"), "\(interim)")
        #expect(!interim.contains("200 OK"), "the answer came before the body: \(interim)")
        #expect(final.hasPrefix("HTTP/1.1 200 OK") && final.contains(#""registered" : 3"#), "\(final)")

        let tooLarge =
            "POST /v1/tokens HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(1 << 20)\r\n"
            + "Expect: 100-continue\r\n\r\n"
        let refused = try await Self.onThread {
            try Self.exchange(port: port, head: tooLarge, body: [], sendBody: false)
        }
        #expect(refused.interim.hasPrefix("HTTP/1.1 413"), "\(refused.interim)")
        #expect(refused.interim.contains("body_too_large"))
        try await fixture.stop()
    }
}

// A small HTTP/1.1 client over a plain loopback socket: what the tests talk to the service with, so every
// request crosses the real listener, parser and encoder. One connection per request (`Connection: close`),
// the response read to EOF; blocking socket calls run on a thread of their own, never on the concurrency pool
// the in-process server's handlers need.
import FanfareTestSupport
import Foundation
import Glibc

struct HTTPTestResponse: Sendable, CustomStringConvertible {
    var status: Int
    /// Header fields in order, names lowercased.
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    func header(_ name: String) -> String? {
        let lowered = name.lowercased()
        return headers.first { $0.name == lowered }?.value
    }

    var text: String { String(decoding: body, as: UTF8.self) }

    /// The body as a JSON object (nil if it is not one).
    var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] }

    var description: String {
        "\(status) \(headers.map { "\($0.name): \($0.value)" }.joined(separator: "; ")) \(text.prefix(600))"
    }
}

struct HTTPTestError: Error, CustomStringConvertible {
    let description: String
}

struct HTTPTestClient: Sendable {
    let port: Int
    var host = "127.0.0.1"
    /// Sent as `Authorization: Bearer <key>` unless a request sets its own.
    var apiKey: String?
    /// How long a request may wait for its answer before the test fails (SO_RCVTIMEO per read; scaled: TestTime).
    var timeout: Duration = TestTime.scaled(Liveness.condition)

    func get(_ path: String, headers: [(String, String)] = []) async throws -> HTTPTestResponse {
        try await send("GET", path, headers: headers)
    }

    func post(_ path: String, json: String, headers: [(String, String)] = []) async throws -> HTTPTestResponse {
        try await send("POST", path, headers: [("Content-Type", "application/json")] + headers, body: Array(json.utf8))
    }

    func post(_ path: String, object: Any, headers: [(String, String)] = []) async throws -> HTTPTestResponse {
        let data = try JSONSerialization.data(withJSONObject: object)
        return try await send(
            "POST", path, headers: [("Content-Type", "application/json")] + headers, body: [UInt8](data))
    }

    func put(_ path: String, json: String, headers: [(String, String)] = []) async throws -> HTTPTestResponse {
        try await send("PUT", path, headers: [("Content-Type", "application/json")] + headers, body: Array(json.utf8))
    }

    func delete(_ path: String, headers: [(String, String)] = []) async throws -> HTTPTestResponse {
        try await send("DELETE", path, headers: headers)
    }

    /// One request; the raw bytes of the request can be replaced (`raw`) to send what no client would.
    func send(
        _ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = [], raw: [UInt8]? = nil
    ) async throws -> HTTPTestResponse {
        var named = Set(headers.map { $0.0.lowercased() })
        // A Host of the test's own replaces the address's (a web page's name, for the keyless Host check).
        var request = "\(method) \(path) HTTP/1.1\r\n"
        if !named.contains("host") { request += "Host: \(host):\(port)\r\n" }
        request += "Connection: close\r\n"
        if let apiKey, !named.contains("authorization") {
            request += "Authorization: Bearer \(apiKey)\r\n"
            named.insert("authorization")
        }
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" || method == "PUT" { request += "Content-Length: \(body.count)\r\n" }
        request += "\r\n"
        let bytes = raw ?? (Array(request.utf8) + body)
        let received = try await Self.exchange(host: host, port: port, request: bytes, timeout: timeout, onChunk: nil)
        return try Self.parse(received)
    }

    /// A GET whose body arrives over time (Server-Sent Events): `onBytes` sees the raw bytes as they come
    /// (headers included) and returns false to hang up; otherwise reads to the end of the stream.
    func stream(_ path: String, onBytes: @escaping @Sendable ([UInt8]) -> Bool) async throws -> HTTPTestResponse {
        var request =
            "GET \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nConnection: close\r\nAccept: text/event-stream\r\n"
        if let apiKey { request += "Authorization: Bearer \(apiKey)\r\n" }
        request += "\r\n"
        let received = try await Self.exchange(
            host: host, port: port, request: Array(request.utf8), timeout: timeout, onChunk: onBytes)
        return try Self.parse(received)
    }

    // MARK: - Socket

    private static func exchange(
        host: String, port: Int, request: [UInt8], timeout: Duration, onChunk: (@Sendable ([UInt8]) -> Bool)?
    ) async throws -> [UInt8] {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8], any Error>) in
            let thread = Thread {
                continuation.resume(
                    with: Result {
                        try blockingExchange(
                            host: host, port: port, request: request, timeout: timeout, onChunk: onChunk)
                    })
            }
            thread.start()
        }
    }

    private static func blockingExchange(
        host: String, port: Int, request: [UInt8], timeout: Duration, onChunk: (@Sendable ([UInt8]) -> Bool)?
    ) throws -> [UInt8] {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HTTPTestError(description: "socket: errno \(errno)") }
        defer { close(fd) }
        var seconds = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, host, &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw HTTPTestError(description: "connect to \(host):\(port): errno \(errno)") }
        var offset = 0
        while offset < request.count {
            let sent = request[offset...].withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if sent < 0 && errno == EINTR { continue }
            // The server may answer (413) and close before reading everything: read its answer anyway.
            if sent <= 0 { break }
            offset += sent
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                throw HTTPTestError(description: "no answer within \(timeout) (received \(received.count) bytes)")
            }
            if count < 0 && errno == ECONNRESET && !received.isEmpty { break }
            guard count > 0 else {
                if count < 0 { throw HTTPTestError(description: "recv: errno \(errno)") }
                break
            }
            let chunk = Array(buffer[0..<count])
            received += chunk
            if let onChunk, !onChunk(chunk) { break }
        }
        return received
    }

    // MARK: - Parsing

    static func parse(_ bytes: [UInt8]) throws -> HTTPTestResponse {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let end = bytes.indices.first(where: { bytes[$0...].starts(with: separator) }) else {
            throw HTTPTestError(
                description:
                    "no complete response head in \(bytes.count) bytes: \(String(decoding: bytes.prefix(300), as: UTF8.self))"
            )
        }
        let head = String(decoding: bytes[..<end], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw HTTPTestError(description: "bad status line in \(head)")
        }
        let headers = lines.compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (line[..<colon].lowercased(), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        var body = Array(bytes[(end + 4)...])
        if headers.contains(where: { $0.0 == "transfer-encoding" && $0.1.lowercased().contains("chunked") }) {
            body = dechunk(body)
        }
        return HTTPTestResponse(status: status, headers: headers.map { (name: $0.0, value: $0.1) }, body: body)
    }

    /// A chunked body's data (what arrived of it, if the stream was cut).
    static func dechunk(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            guard let lineEnd = bytes[index...].indices.first(where: { bytes[$0] == 13 }) else { break }
            let sizeText = String(decoding: bytes[index..<lineEnd], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText, radix: 16), size > 0 else { break }
            let start = lineEnd + 2
            let stop = min(bytes.count, start + size)
            out += bytes[start..<stop]
            index = stop + 2
        }
        return out
    }
}

/// Server-Sent Events in a body: (event name, data) pairs.
func serverSentEvents(_ body: [UInt8]) -> [(event: String, data: String)] {
    var events: [(String, String)] = []
    for block in String(decoding: body, as: UTF8.self).components(separatedBy: "\n\n") {
        var name = "message"
        var data: [String] = []
        var hasData = false
        for line in block.split(separator: "\n", omittingEmptySubsequences: true) {
            if line.hasPrefix("event: ") { name = String(line.dropFirst(7)) }
            if line.hasPrefix("data: ") {
                data.append(String(line.dropFirst(6)))
                hasData = true
            }
        }
        if hasData { events.append((name, data.joined(separator: "\n"))) }
    }
    return events
}

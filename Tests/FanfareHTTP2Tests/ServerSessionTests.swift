import CNghttp2
import FanfareHTTP2
import FanfareTestSupport
import Testing

/// Our server session against nghttp2's client session in memory: requests and responses both ways (HPACK in
/// the server direction included: nghttp2 deflates the requests we decode, and inflates the responses we
/// encode), stream limits, flow control and GOAWAY.
@Suite("HTTP/2 server session against nghttp2's client", .ownThread)
struct ServerSessionTests {
    private static let token = String(repeating: "ab", count: 40)

    @Test("many concurrent requests with headers and bodies are each answered with their own status, fields and body")
    func manyConcurrentStreams() throws {
        let server = TestServer()
        server.answer = { request in
            let id = request.headers.first { $0.0 == "apns-id" }?.1 ?? ""
            let status = request.body.count % 2 == 0 ? 200 : 400
            return (status, [("apns-id", id)], status == 200 ? [] : Array("{\"reason\":\"BadDeviceToken\"}".utf8))
        }
        let client = NGHTTP2Client()
        var sent: [Int32: (id: String, body: [UInt8])] = [:]
        for index in 0..<500 {
            let id =
                "0000000\(index % 10)-0000-0000-0000-\(String(repeating: "0", count: 12 - String(index).count))\(index)"
            let body = Array(String(repeating: "x", count: 90 + index % 3).utf8)
            let streamID = client.request(
                path: "/3/device/\(Self.token)",
                fields: [
                    ("apns-topic", "com.example.app.push-type.liveactivity"), ("apns-push-type", "liveactivity"),
                    ("apns-id", id),
                    ("authorization", "bearer ey.\(index % 7)"),
                ],
                body: body, noIndex: ["apns-id"])
            sent[streamID] = (id, body)
        }
        try pump(server, client)
        #expect(server.finished.count == 500)
        #expect(server.open.isEmpty)
        #expect(server.maxOpen > 1, "requests were open at the same time")
        for (streamID, request) in sent {
            let seen = try #require(server.finished[streamID])
            #expect(seen.closedWith == HTTP2ErrorCode.noError)
            #expect(seen.body == request.body)
            #expect(
                seen.headers.map(\.0) == [
                    ":method", ":scheme", ":authority", ":path", "apns-topic", "apns-push-type", "apns-id",
                    "authorization",
                ])
            #expect(seen.headers.first { $0.0 == ":path" }?.1 == "/3/device/\(Self.token)")
            let response = try #require(client.responses[streamID])
            #expect(response.closedWith == 0)
            #expect(response.headers.first { $0.0 == "apns-id" }?.1 == request.id)
            #expect(response.status == (request.body.count % 2 == 0 ? "200" : "400"))
            #expect(response.body == (request.body.count % 2 == 0 ? [] : Array("{\"reason\":\"BadDeviceToken\"}".utf8)))
        }
        #expect(server.resetsSent.isEmpty)
    }

    @Test("a statuses outside the static table and frames split at every byte arrive intact")
    func splitReads() throws {
        let server = TestServer()
        server.answer = { _ in (429, [("retry-after", "7")], Array("{\"reason\":\"TooManyRequests\"}".utf8)) }
        let client = NGHTTP2Client()
        let streamID = client.request(path: "/3/device/\(Self.token)", body: Array(repeating: 0x41, count: 300))
        try pump(server, client, chunk: 1)
        let response = try #require(client.responses[streamID])
        #expect(response.status == "429")
        #expect(response.headers.first { $0.0 == "retry-after" }?.1 == "7")
        #expect(String(decoding: response.body, as: UTF8.self) == "{\"reason\":\"TooManyRequests\"}")
        #expect(server.finished[streamID]?.body.count == 300)
    }

    @Test("SETTINGS 1 -> N -> 1: nghttp2 keeps to each limit and no stream within it is refused")
    func streamLimitChanges() throws {
        var settings = HTTP2ServerSession.LocalSettings()
        settings.maxConcurrentStreams = 1
        let server = TestServer(capacity: 100, settings: settings)
        server.answer = { _ in nil }  // hold: the test answers
        let client = NGHTTP2Client()
        try pump(server, client)  // SETTINGS both ways first: before them nghttp2 assumes 100 streams
        for _ in 0..<150 { client.request(path: "/3/device/\(Self.token)", body: [1, 2, 3]) }
        try pump(server, client)
        #expect(client.remoteMaxConcurrentStreams == 1)
        #expect(server.open.count == 1)
        // The first answer raises the limit (as APNs does after its first 200).
        server.session.advertise(maxConcurrentStreams: 100)
        server.respond(server.open.keys.first!, status: 200)
        try pump(server, client)
        #expect(client.remoteMaxConcurrentStreams == 100)
        #expect(server.open.count == 100)
        // A rejection drops it to one while 100 are open: those stay, and nothing new opens until under 1.
        server.session.advertise(maxConcurrentStreams: 1)
        for stream in Array(server.open.keys).prefix(50) { server.respond(stream, status: 400) }
        try pump(server, client)
        #expect(server.open.count == 50)
        for stream in Array(server.open.keys) { server.respond(stream, status: 200) }
        try pump(server, client)
        while let stream = server.open.keys.first {
            #expect(server.open.count == 1)
            server.respond(stream, status: 200)
            try pump(server, client)
        }
        #expect(server.finished.count == 150)
        #expect(server.resetsSent.isEmpty, "refused: \(server.resetsSent)")
        #expect(client.responses.values.allSatisfy { $0.closedWith == 0 })
    }

    @Test(
        "a raised limit counts at once, a lowered one only once acknowledged: a client within either is never refused")
    func limitFollowsAcknowledgement() throws {
        var settings = HTTP2ServerSession.LocalSettings()
        settings.maxConcurrentStreams = 10
        let server = TestServer(capacity: 10, settings: settings)
        server.answer = { _ in nil }
        try server.feed(
            clientPrefaceBytes + rawFrame(type: HTTP2FrameType.settings.rawValue, flags: HTTP2FrameFlag.ack))
        server.session.advertise(maxConcurrentStreams: 2)  // not acknowledged yet: 10 still holds
        var block = [UInt8]()
        for index in 0..<10 {
            block = [0x83, 0x87, 0x84]  // :method POST, :scheme https, :path /
            try server.feed(
                rawFrame(
                    type: HTTP2FrameType.headers.rawValue, flags: HTTP2FrameFlag.endHeaders | HTTP2FrameFlag.endStream,
                    stream: Int32(2 * index + 1), payload: block))
        }
        #expect(server.open.count == 10)
        #expect(server.resetsSent.isEmpty)
        // The client acknowledges 2: with 10 open, the next stream is refused until fewer than 2 are open.
        try server.feed(rawFrame(type: HTTP2FrameType.settings.rawValue, flags: HTTP2FrameFlag.ack))
        try server.feed(
            rawFrame(
                type: HTTP2FrameType.headers.rawValue, flags: HTTP2FrameFlag.endHeaders | HTTP2FrameFlag.endStream,
                stream: 21, payload: block))
        #expect(server.resetsSent.map(\.0) == [21])
        #expect(server.resetsSent.map(\.1) == [HTTP2ErrorCode.refusedStream])
        for stream in Array(server.open.keys) { server.respond(stream, status: 200) }
        server.session.produce()
        #expect(server.open.isEmpty)
        try server.feed(
            rawFrame(
                type: HTTP2FrameType.headers.rawValue, flags: HTTP2FrameFlag.endHeaders | HTTP2FrameFlag.endStream,
                stream: 23, payload: block))
        #expect(server.open.count == 1)
        #expect(server.resetsSent.count == 1)
    }

    @Test("a stream counts as open until its response is written, not until the client reads it")
    func openUntilWritten() throws {
        var settings = HTTP2ServerSession.LocalSettings()
        settings.maxConcurrentStreams = 2
        let server = TestServer(capacity: 2, settings: settings)
        server.answer = { _ in (200, [], []) }
        try server.feed(
            clientPrefaceBytes + rawFrame(type: HTTP2FrameType.settings.rawValue, flags: HTTP2FrameFlag.ack))
        server.output.backedUp = true  // the client does not read: answers wait in the session
        let block: [UInt8] = [0x83, 0x87, 0x84]
        for stream: Int32 in [1, 3, 5] {
            try server.feed(
                rawFrame(
                    type: HTTP2FrameType.headers.rawValue, flags: HTTP2FrameFlag.endHeaders | HTTP2FrameFlag.endStream,
                    stream: stream, payload: block))
        }
        server.session.produce()
        #expect(server.session.openStreamCount == 2)
        #expect(server.resetsSent.map(\.0) == [5])
        server.output.backedUp = false
        server.session.produce()
        #expect(server.session.openStreamCount == 0)
        #expect(server.finished[1]?.closedWith == 0 && server.finished[3]?.closedWith == 0)
    }

    @Test(
        "a request body beyond the windows arrives whole with WINDOW_UPDATEs; a response body beyond the client's window waits for its WINDOW_UPDATEs"
    )
    func flowControlLargeBodies() throws {
        let server = TestServer()
        let responseBody = (0..<200_000).map { (index: Int) in UInt8(truncatingIfNeeded: index &* 7) }
        server.answer = { _ in (200, [], responseBody) }
        // nghttp2 opens small windows: our body must wait for them to be consumed and reopened.
        let client = NGHTTP2Client(settings: [(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 16_384)])
        let requestBody = (0..<300_000).map { (index: Int) in UInt8(truncatingIfNeeded: index &* 13) }
        let first = client.request(path: "/upload", body: requestBody)
        let second = client.request(path: "/upload", body: requestBody)
        try pump(server, client)
        for streamID in [first, second] {
            #expect(server.finished[streamID]?.body == requestBody)
            #expect(client.responses[streamID]?.body == responseBody)
            #expect(client.responses[streamID]?.closedWith == 0)
        }
    }

    @Test("a graceful GOAWAY keeps the streams below its last stream id and refuses the ones above")
    func gracefulGoAway() throws {
        let server = TestServer()
        server.answer = { _ in nil }
        let client = NGHTTP2Client()
        for _ in 0..<4 { client.request(path: "/3/device/\(Self.token)") }
        try pump(server, client)
        #expect(server.open.count == 4)
        server.session.goAway(lastStreamID: 3)
        client.request(path: "/3/device/\(Self.token)")
        try pump(server, client)
        #expect(client.goAway?.lastStreamID == 3)
        #expect(client.goAway?.errorCode == 0)
        for stream in Array(server.open.keys) where server.open[stream]!.streamID <= 3 {
            server.respond(stream, status: 200)
        }
        try pump(server, client)
        #expect(client.responses[1]?.status == "200" && client.responses[3]?.status == "200")
        #expect(client.responses[5]?.status == nil && client.responses[7]?.status == nil)
    }

    @Test("a client's RST_STREAM closes its stream; a late answer to it is dropped")
    func clientReset() throws {
        let server = TestServer()
        server.answer = { _ in nil }
        let client = NGHTTP2Client()
        let streamID = client.request(path: "/3/device/\(Self.token)")
        try pump(server, client)
        let stream = try #require(server.open.first { $0.value.streamID == streamID }?.key)
        nghttp2_submit_rst_stream(client.session, 0, streamID, HTTP2ErrorCode.cancel)
        try pump(server, client)
        #expect(server.finished[streamID]?.closedWith == HTTP2ErrorCode.cancel)
        #expect(server.session.respond(stream: stream, streamID: streamID) == false)
    }
}

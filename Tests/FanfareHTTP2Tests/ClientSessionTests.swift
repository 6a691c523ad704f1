import CNghttp2
import FanfareHTTP2
import FanfareTestSupport
import Testing

/// Fanfare's client session against nghttp2's own server session, byte for byte in memory: every request
/// must arrive intact and every stream must end exactly once, whatever the server does.
@Suite("HTTP/2 client session against nghttp2's server", .ownThread)
struct ClientSessionTests {
    @Test("requests arrive intact and every response comes back")
    func basicExchange() throws {
        let client = TestClient()
        let server = NGHTTP2Server()
        server.answer = { _ in .respond(status: 200, headers: [("apns-id", "0aa1b2c3-d4e5-f607-1829-3a4b5c6d7e8f")]) }
        for request in 0..<200 { #expect(client.submit(request, bodySize: 50 + request)) }
        try pump(client, server)
        #expect(client.outcomes.count == 200)
        #expect(server.requests.count == 200)
        for request in 0..<200 {
            #expect(client.outcomes[request] == .init(errorCode: 0, processed: true, status: 200, body: ""))
        }
        for (streamID, seen) in server.requests {
            #expect(streamID & 1 == 1)
            let request = client.tokens.first { client.expectedPath($0.key) == seen.header(":path") }?.key
            #expect(request != nil, "no request has the path \(seen.header(":path") ?? "nil")")
            guard let request else { continue }
            #expect(seen.body == client.expectedBody(request))
            #expect(seen.header(":method") == "POST")
            #expect(seen.header(":scheme") == "https")
            #expect(seen.header(":authority") == "api.push.apple.com")
            #expect(seen.header("authorization") == "bearer first")
            #expect(seen.header("apns-topic") == "com.example.app.push-type.liveactivity")
            #expect(seen.header("apns-push-type") == "liveactivity")
            #expect(seen.closedWith == 0)
        }
        #expect(
            client.responseFields[0]?.contains { $0.0 == "apns-id" && $0.1 == "0aa1b2c3-d4e5-f607-1829-3a4b5c6d7e8f" }
                == true)
    }

    @Test("reporting only :status skips unindexed literals and keeps the HPACK table in step")
    func statusOnly() throws {
        var settings = HTTP2ClientSession.LocalSettings()
        settings.reportsOnlyStatus = true
        let client = TestClient(settings: settings)
        let server = NGHTTP2Server()
        server.noIndexFields = ["apns-id"]
        var count = 0
        server.answer = { _ in
            count += 1
            // apns-id unindexed (skipped); x-indexed inserted into the table, so it must still be decoded.
            return .respond(
                status: count % 3 == 0 ? 410 : 200,
                headers: [
                    ("apns-id", "0aa1b2c3-d4e5-f607-1829-3a4b5c6d7e8\(count % 10)"),
                    ("x-indexed", "value-\(count % 7)"),
                ])
        }
        for request in 0..<120 { client.submit(request) }
        try pump(client, server)
        #expect(client.outcomes.count == 120)
        #expect(client.outcomes.values.filter { $0.status == 410 }.count == 40)
        #expect(client.outcomes.values.filter { $0.status == 200 }.count == 80)
        for request in 0..<120 {
            let names = client.responseFields[request]?.map(\.0) ?? []
            #expect(!names.contains("apns-id"))
            #expect(names.contains(":status"))
        }
        // The indexed field decodes to the right values throughout (the table stayed in step).
        let values = Set(client.responseFields.values.flatMap { $0 }.filter { $0.0 == "x-indexed" }.map(\.1))
        #expect(values == Set((0..<7).map { "value-\($0)" }))
    }

    @Test("streams open in submission order with rising odd ids")
    func streamOrder() throws {
        let client = TestClient()
        let server = NGHTTP2Server()
        for request in 0..<50 { client.submit(request) }
        try pump(client, server)
        let paths = server.completedOrder.map { server.requests[$0]!.header(":path")! }
        #expect(paths == (0..<50).map { client.expectedPath($0) })
        #expect(server.completedOrder == (0..<50).map { Int32(1 + 2 * $0) })
    }

    @Test("a new provider token is sent from the next request on")
    func authorizationUpdate() throws {
        let client = TestClient()
        let server = NGHTTP2Server()
        for request in 0..<10 { client.submit(request) }
        try pump(client, server)
        client.session.updateRepeatedField(
            client.authorization, value: "bearer second-" + String(repeating: "x", count: 180))
        for request in 10..<20 { client.submit(request) }
        try pump(client, server)
        for (_, seen) in server.requests {
            let request = client.tokens.first { client.expectedPath($0.key) == seen.header(":path") }!.key
            #expect(
                seen.header("authorization")
                    == (request < 10 ? "bearer first" : "bearer second-" + String(repeating: "x", count: 180)))
        }
    }

    @Test("response bodies, padding and split reads")
    func bodiesPaddingAndSplitReads() throws {
        for chunk in [1, 7, 4096] {
            let client = TestClient()
            let server = NGHTTP2Server()
            server.padTo = 200
            server.answer = { _ in .respond(status: 400, body: #"{"reason":"BadDeviceToken"}"#) }
            for request in 0..<20 { client.submit(request) }
            try pump(client, server, chunk: chunk)
            for request in 0..<20 {
                #expect(
                    client.outcomes[request]
                        == .init(errorCode: 0, processed: true, status: 400, body: #"{"reason":"BadDeviceToken"}"#))
            }
        }
    }

    @Test("a header block continued in CONTINUATION frames")
    func continuation() throws {
        let client = TestClient()
        let server = NGHTTP2Server()
        // Two 12,000-byte values ('~' has a 13-bit code, so they go raw): one 24 KB block, over the 16 KiB frame limit.
        let long = String(repeating: "~", count: 12_000)
        server.answer = { _ in .respond(status: 200, headers: [("x-long", long), ("x-long-2", long)]) }
        client.submit(0)
        client.submit(1)
        try pump(client, server, chunk: 3000)
        #expect(client.outcomes[0]?.status == 200 && client.outcomes[1]?.status == 200)
        #expect(client.responseFields[1]?.first { $0.0 == "x-long" }?.1 == long)
        #expect(client.responseFields[1]?.first { $0.0 == "x-long-2" }?.1 == long)
    }

    @Test("bodies wait for flow-control windows and arrive whole")
    func flowControl() throws {
        let client = TestClient()
        // A 100-byte stream window and nghttp2's default 64 KiB connection window: bodies of 3000 bytes
        // go out in pieces as the server's WINDOW_UPDATEs come back.
        let server = NGHTTP2Server(settings: [(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 100)])
        try pump(client, server)  // settle SETTINGS first
        for request in 0..<40 { client.submit(request, bodySize: 3000) }
        try pump(client, server)
        #expect(client.outcomes.count == 40)
        for (_, seen) in server.requests {
            let request = client.tokens.first { client.expectedPath($0.key) == seen.header(":path") }!.key
            #expect(seen.body == client.expectedBody(request))
        }
        #expect(client.outcomes.values.allSatisfy { $0.status == 200 && $0.processed })
    }

    @Test("a connection window of the default size sends no WINDOW_UPDATE (an increment of 0 is an error)")
    func defaultConnectionWindow() throws {
        // Found by Fuzzing/FuzzClientSession: the preface carried WINDOW_UPDATE 0, which nghttp2 rejects.
        var settings = HTTP2ClientSession.LocalSettings()
        settings.connectionWindowSize = 65_535
        let client = TestClient(settings: settings)
        let preface = client.output.take()
        let server = NGHTTP2Server()
        #expect(server.receive(preface) == preface.count)
        for request in 0..<3 { client.submit(request, bodySize: 30_000) }  // more than the 64 KiB window
        try pump(client, server)
        #expect(client.outcomes.count == 3)
        #expect(client.outcomes.values.allSatisfy { $0.status == 200 && $0.processed })
    }

    @Test("the server's stream limit is respected")
    func concurrencyLimit() throws {
        let client = TestClient()
        let server = NGHTTP2Server(settings: [(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 5)])
        try pump(client, server)
        #expect(client.settingsSeen.last == 5)
        var held: [Int32] = []
        server.answer = { request in
            held.append(request.streamID)
            return .hold
        }
        for request in 0..<30 { client.submit(request) }
        try pump(client, server)
        #expect(server.maxOpenStreams == 5)
        #expect(client.session.openStreamCount == 5 && client.session.queuedCount == 25)
        server.answer = { _ in .respond(status: 200) }
        for _ in 0..<10 {
            for streamID in held { server.respond(streamID, status: 200, headers: [], body: nil) }
            held.removeAll()
            server.answer = { request in
                held.append(request.streamID)
                return .hold
            }
            try pump(client, server)
        }
        #expect(server.maxOpenStreams == 5)
        #expect(client.outcomes.count == 30)
    }

    @Test("GOAWAY: streams above its last id and queued requests come back unprocessed")
    func goAway() throws {
        let client = TestClient()
        let server = NGHTTP2Server()
        server.answer = { _ in .hold }
        for request in 0..<10 { client.submit(request) }
        try pump(client, server)
        #expect(server.requests.count == 10)
        for request in 10..<15 { client.submit(request) }  // queued, not produced yet
        nghttp2_submit_goaway(server.session, 0, 7, HTTP2ErrorCode.noError, "draining", 8)
        let goAwayBytes = server.send()
        try client.feed(goAwayBytes)
        #expect(client.goAways.count == 1 && client.goAways[0].0 == 7 && client.goAways[0].2 == "draining")
        // Streams 1, 3, 5, 7 were processed (still open); 9...19 and the queued five come back.
        #expect(client.outcomes.count == 11)
        #expect(client.outcomes.values.allSatisfy { !$0.processed && $0.errorCode == HTTP2ErrorCode.refusedStream })
        #expect(client.session.openStreamCount == 4)
        #expect(client.submit(20) == false)
        for streamID in [1, 3, 5, 7] as [Int32] { server.respond(streamID, status: 200, headers: [], body: nil) }
        try pump(client, server)
        #expect(client.outcomes.count == 15)
        #expect(client.outcomes.values.filter { $0.processed && $0.status == 200 }.count == 4)
    }

    @Test("RST_STREAM: REFUSED_STREAM is unprocessed, other codes are not")
    func resets() throws {
        let client = TestClient()
        let server = NGHTTP2Server()
        server.answer = { request in
            .reset(request.streamID % 4 == 1 ? HTTP2ErrorCode.refusedStream : HTTP2ErrorCode.internalError)
        }
        for request in 0..<8 { client.submit(request) }
        try pump(client, server)
        #expect(client.outcomes.count == 8)
        for (_, outcome) in client.outcomes {
            #expect(outcome.status == 0)
            #expect(outcome.processed == (outcome.errorCode != HTTP2ErrorCode.refusedStream))
        }
        #expect(
            Set(client.outcomes.values.map(\.errorCode)) == [
                HTTP2ErrorCode.refusedStream, HTTP2ErrorCode.internalError,
            ])
    }

    @Test("cancel: a queued request never leaves, a sent one is reset")
    func cancel() throws {
        let client = TestClient()
        let server = NGHTTP2Server()
        server.answer = { _ in .hold }
        client.submit(0)
        try pump(client, server)
        client.submit(1)
        client.session.cancel(request: 1)
        #expect(client.outcomes[1] == .init(errorCode: HTTP2ErrorCode.cancel, processed: false, status: 0, body: ""))
        client.session.cancel(request: 0)
        #expect(client.outcomes[0]?.errorCode == HTTP2ErrorCode.cancel)
        try pump(client, server)
        #expect(server.requests.count == 1)
        #expect(server.requests[1]?.closedWith == HTTP2ErrorCode.cancel)
        // The request numbers are free again.
        server.answer = { _ in .respond(status: 200) }
        client.submit(0)
        client.submit(1)
        try pump(client, server)
        #expect(client.outcomes[0]?.status == 200 && client.outcomes[1]?.status == 200)
    }

    @Test("PING is answered; SETTINGS are acknowledged")
    func pingAndSettings() throws {
        let client = TestClient()
        let server = NGHTTP2Server(settings: [
            (NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 256), (NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 32768),
        ])
        try pump(client, server)
        nghttp2_submit_ping(server.session, 0, nil)
        try pump(client, server)
        #expect(server.pingAcks == 1)
        client.session.sendPing()
        try pump(client, server)
        // A small HPACK table on the server's side still decodes every request correctly.
        for request in 0..<30 { client.submit(request) }
        try pump(client, server)
        #expect(client.outcomes.count == 30 && client.outcomes.values.allSatisfy { $0.status == 200 })
        #expect(server.requests.values.allSatisfy { $0.header("authorization") == "bearer first" })
    }

    @Test("an early answer stops a body that is still waiting for its window")
    func earlyAnswer() throws {
        let client = TestClient()
        let server = NGHTTP2Server(settings: [(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 10)])
        try pump(client, server)
        var answered = false
        server.answer = { _ in .hold }
        client.submit(0, bodySize: 4000)
        client.session.produce()
        _ = server.receive(client.output.take())
        // The server answers 413 after the first 10 bytes, before the rest of the body.
        if let streamID = server.requests.keys.first {
            server.respond(streamID, status: 413, headers: [], body: #"{"reason":"PayloadTooLarge"}"#)
            answered = true
        }
        #expect(answered)
        try pump(client, server)
        #expect(
            client.outcomes[0]
                == .init(errorCode: 0, processed: true, status: 413, body: #"{"reason":"PayloadTooLarge"}"#))
        #expect(!client.session.wantsWrite)
    }

    @Test(
        "protocol violations end the session with GOAWAY and a clear error",
        arguments: [
            ("PUSH_PROMISE", [0, 0, 4, 5, 4, 0, 0, 0, 1, 0, 0, 0, 2] as [UInt8], HTTP2ErrorCode.protocolError),
            ("DATA on an idle stream", [0, 0, 1, 0, 1, 0, 0, 0, 99, 0x41], HTTP2ErrorCode.protocolError),
            ("oversized frame", [0, 0x40, 1, 0, 0, 0, 0, 0, 1], HTTP2ErrorCode.frameSizeError),
            ("SETTINGS of 5 bytes", [0, 0, 5, 4, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], HTTP2ErrorCode.frameSizeError),
            ("WINDOW_UPDATE of 0", [0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0], HTTP2ErrorCode.protocolError),
            ("bad HPACK index", [0, 0, 1, 1, 5, 0, 0, 0, 1, 0xff], HTTP2ErrorCode.compressionError),
            ("CONTINUATION without HEADERS", [0, 0, 1, 9, 4, 0, 0, 0, 1, 0x88], HTTP2ErrorCode.protocolError),
        ])
    func protocolViolations(_ name: String, _ bytes: [UInt8], _ code: UInt32) throws {
        let client = TestClient()
        let server = NGHTTP2Server()
        server.answer = { _ in .hold }
        client.submit(0)
        try pump(client, server)
        var caught: HTTP2ConnectionError?
        do throws(HTTP2ConnectionError) {
            try client.feed(bytes)
        } catch {
            caught = error
        }
        #expect(caught?.code == code, "\(name): \(String(describing: caught))")
        #expect(client.session.failed)
        // The GOAWAY carrying the code is the last thing written.
        let written = client.output.take()
        #expect(written.count >= 17 && written[3] == HTTP2FrameType.goAway.rawValue)
        #expect(written.count >= 17 && written[16] == UInt8(code))
    }
}

// Every bad input gets a 4xx problem that says what to fix (with the batch index, the field, the size), and
// nothing is written; a full engine is 503 with Retry-After.
import FanfareService
import FanfareSimulator
import FanfareTestSupport
import Foundation
import Testing

@Suite("Bad input and back-pressure", .ownThread)
struct BadInputTests {
    @Test("malformed JSON, bad tokens, unknown fields and types, oversized payloads, batches and bodies")
    func badInput() async throws {
        let fixture = try await ServiceFixture { $0.maxBodyBytes = 2 << 20 }
        defer { fixture.removeDirectory() }
        let client = fixture.client
        func tokens() async throws -> Int? { try await client.get("/readyz").json?["tokens"] as? Int }
        #expect(await eventually { try await client.get("/readyz").status == 200 })
        #expect(try await tokens() == 0)

        _ = problem(
            try await client.post("/v1/tokens", json: #"{"tokens":[{"token":"#), status: 400, code: "malformed_json")
        _ = problem(try await client.post("/v1/tokens", json: "not json"), status: 400, code: "malformed_json")
        _ = problem(try await client.post("/v1/tokens", json: ""), status: 400, code: "malformed_json")
        for notAnObject in ["null", "[]", #"{"tokens":null}"#, "42"] {
            _ = problem(try await client.post("/v1/tokens", json: notAnObject), status: 400, code: "invalid_request")
        }

        // One bad item rejects the batch, naming it; nothing of the batch is written.
        var items = (0..<4).map {
            #"{"token":"\#(tokenHex($0))","kind":"update","channels":["m"],"activity_id":"a\#($0)"}"#
        }
        items[2] = #"{"token":"abc","kind":"update","channels":["m"],"activity_id":"a2"}"#
        let badToken = problem(
            try await client.post("/v1/tokens", json: #"{"tokens":[\#(items.joined(separator: ","))]}"#), status: 400,
            code: "invalid_token")
        #expect(badToken["index"] as? Int == 2)
        #expect(badToken["field"] as? String == "tokens[2].token")
        items[2] =
            #"{"token":"\#(tokenHex(2))","kind":"update","channels":["m"],"activity_id":"a2","frequent_updates":"yes"}"#
        let wrongType = problem(
            try await client.post("/v1/tokens", json: #"{"tokens":[\#(items.joined(separator: ","))]}"#), status: 400,
            code: "invalid_request")
        #expect(wrongType["index"] as? Int == 2, "\(wrongType)")
        items[2] = #"{"token":"\#(tokenHex(2))","kind":"sometimes","channels":["m"],"activity_id":"a2"}"#
        let unknownKind = problem(
            try await client.post("/v1/tokens", json: #"{"tokens":[\#(items.joined(separator: ","))]}"#), status: 400,
            code: "invalid_request")
        #expect(unknownKind["index"] as? Int == 2, "\(unknownKind)")
        items[2] = #"{"token":"\#(tokenHex(2))","kind":"update","channels":["m"]}"#
        let noActivity = problem(
            try await client.post("/v1/tokens", json: #"{"tokens":[\#(items.joined(separator: ","))]}"#), status: 400,
            code: "invalid_request")
        #expect(noActivity["index"] as? Int == 2, "\(noActivity)")
        items[2] = #"{"token":"\#(tokenHex(2))","kind":"update","channels":["no spaces"],"activity_id":"a2"}"#
        let badChannel = problem(
            try await client.post("/v1/tokens", json: #"{"tokens":[\#(items.joined(separator: ","))]}"#), status: 400,
            code: "invalid_channel")
        #expect(badChannel["index"] as? Int == 2)
        let unknownField = problem(
            try await client.post(
                "/v1/channels/m/updates", json: #"{"event":"update","content_state":{},"colour":"red"}"#), status: 400,
            code: "invalid_request")
        #expect((unknownField["detail"] as? String)?.contains("colour") == true, "\(unknownField)")
        _ = problem(
            try await client.post("/v1/channels/m/updates", json: #"{"event":"reboot"}"#), status: 400,
            code: "invalid_request")
        _ = problem(
            try await client.post("/v1/channels/m/updates", json: #"{"event":"update","timestamp":"noon"}"#),
            status: 400,
            code: "invalid_request")

        // A payload over APNs' 4096 bytes, with its size.
        let big = String(repeating: "x", count: 5000)
        let tooLarge = problem(
            try await client.post(
                "/v1/channels/m/updates", json: #"{"event":"update","content_state":{"text":"\#(big)"}}"#), status: 400,
            code: "payload_too_large")
        #expect((tooLarge["size"] as? Int ?? 0) > 5000)
        #expect(tooLarge["limit"] as? Int == 4096)
        let pushTooLarge = problem(
            try await client.post(
                "/v1/push", json: #"{"token":"\#(tokenHex(1))","event":"update","content_state":{"text":"\#(big)"}}"#),
            status: 400, code: "payload_too_large")
        #expect((pushTooLarge["size"] as? Int ?? 0) > 5000)

        // A collapse id an HTTP header value cannot carry: refused, not sent to APNs to be reset.
        let controlCharacter = problem(
            try await client.post(
                "/v1/channels/m/updates", json: #"{"event":"update","content_state":{},"collapse_id":"a\u0006b"}"#),
            status: 400, code: "invalid_request")
        #expect(controlCharacter["field"] as? String == "collapse_id", "\(controlCharacter)")
        _ = problem(
            try await client.post(
                "/v1/push",
                json: #"{"token":"\#(tokenHex(1))","event":"update","content_state":{},"collapse_id":"a\u0006b"}"#),
            status: 400, code: "invalid_request")

        // More than 10,000 items.
        let batch = problem(
            try await client.post("/v1/tokens", json: registrationBody(0..<10_001, channel: "m")), status: 400,
            code: "batch_too_large")
        #expect(batch["size"] as? Int == 10_001 && batch["limit"] as? Int == 10_000)
        let deletion = "{\"tokens\":[" + (0..<10_001).map { "\"\(tokenHex($0))\"" }.joined(separator: ",") + "]}"
        _ = problem(try await client.post("/v1/tokens/delete", json: deletion), status: 400, code: "batch_too_large")

        // A body over --max-body (2 MiB here): refused by its Content-Length, and when it is sent chunked.
        let huge = String(repeating: " ", count: 3 << 20)
        let over = problem(
            try await client.post("/v1/tokens", json: "{" + huge + "}"), status: 413, code: "body_too_large")
        #expect(over["limit"] as? Int == 2 << 20)
        #expect(over["size"] as? Int == (3 << 20) + 2)
        var chunked = Array(
            "POST /v1/tokens HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                .utf8)
        for _ in 0..<48 {
            chunked += Array("10000\r\n".utf8) + [UInt8](repeating: 32, count: 65536) + Array("\r\n".utf8)
        }
        chunked += Array("0\r\n\r\n".utf8)
        _ = problem(try await client.send("POST", "/v1/tokens", raw: chunked), status: 413, code: "body_too_large")

        _ = problem(
            try await client.send(
                "POST", "/v1/tokens", headers: [("Content-Type", "text/plain")], body: Array("{}".utf8)), status: 415,
            code: "unsupported_media_type")
        _ = problem(try await client.get("/v1/tokens/xyz"), status: 400, code: "invalid_token")
        _ = problem(try await client.get("/v1/waves/0"), status: 400, code: "invalid_parameter")
        _ = problem(try await client.get("/v1/waves/abc"), status: 400, code: "invalid_parameter")
        _ = problem(try await client.get("/v1/waves/12345"), status: 404, code: "not_found")
        _ = problem(try await client.get("/v1/waves?limit=0"), status: 400, code: "invalid_parameter")
        _ = problem(
            try await client.get("/v1/waves?limit=99999999999999999999"), status: 400, code: "invalid_parameter")
        _ = problem(try await client.get("/v1/nothing-here"), status: 404, code: "not_found")
        let wrongMethod = problem(
            try await client.send("DELETE", "/v1/tokens"), status: 405, code: "method_not_allowed")
        #expect(wrongMethod["allowed"] as? [String] == ["POST"])
        _ = problem(
            try await client.get("/v1/waves", headers: [("Accept", "text/html")]), status: 406, code: "not_acceptable")

        // An older update than the channel's latest is refused.
        let now = unixNow
        #expect(
            try await client.post("/v1/channels/m/updates", json: updateBody(timestamp: now, home: 1)).status == 202)
        _ = problem(
            try await client.post("/v1/channels/m/updates", json: updateBody(timestamp: now - 10, home: 0)),
            status: 409,
            code: "older_than_current")
        _ = problem(
            try await client.post(
                "/v1/channels/m/updates", json: #"{"event":"update","content_state":{},"fresh_until":1}"#), status: 400,
            code: "already_expired")

        // Nothing of all that was written.
        #expect(try await tokens() == 0)
        #expect((try await client.get("/v1/waves").json?["waves"] as? [Any])?.count == 1)
        try await fixture.stop()
        #expect(fixture.acceptedLines().isEmpty)
    }

    @Test("a full engine is 503 back_pressure with Retry-After, counted in the metrics; nothing is taken")
    func backPressure() async throws {
        // One unfinished wave at a time, and APNs answers after 10 s: the second publish finds the engine full
        // however slowly a loaded machine gets to it.
        let fixture = try await ServiceFixture(
            simulator: ServiceFixture.simulatorConfiguration(latency: .fixed(nanoseconds: 10_000_000_000))
        ) { $0.fanout.maximumUnfinishedWaves = 1 }
        defer { fixture.removeDirectory() }
        let client = fixture.client
        #expect(try await client.post("/v1/tokens", json: registrationBody(0..<10, channel: "a")).status == 200)
        let first = try await client.post("/v1/channels/a/updates", json: updateBody(timestamp: unixNow, home: 1))
        #expect(first.status == 202)
        let refused = try await client.post("/v1/channels/b/updates", json: updateBody(timestamp: unixNow, home: 1))
        let document = problem(refused, status: 503, code: "back_pressure")
        #expect(refused.header("retry-after") == "1")
        #expect(document["retry_after"] as? Int == 1)
        let metrics = try await client.get("/metrics").text
        #expect(metrics.contains(#"fanfare_backpressure_refusals_total{operation="publish"} 1"#), "\(metrics)")
        let firstID = try #require(first.json?["wave_id"] as? Int)
        #expect(
            await eventually { try await client.get("/v1/waves/\(firstID)").json?["state"] as? String == "complete" })
        let later = try await client.post("/v1/channels/b/updates", json: updateBody(timestamp: unixNow, home: 1))
        #expect(later.status == 202, "\(later)")
        // The refused publish made no wave: waves 1 and 2 exist, nothing else.
        #expect(later.json?["wave_id"] as? Int == firstID + 1)
        try await fixture.stop()
    }
}

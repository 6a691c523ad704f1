// Broadcast subscriptions, supports_broadcast, the replacement rules and the token ledger over real HTTP.
import FanfareService
import FanfareTestSupport
import Foundation
import Testing

@Suite("API: broadcast registrations and the token ledger", .ownThread)
struct LedgerAPITests {
    @Test("registrations with broadcast items, replacement counts, and GET /v1/tokens/{token} as the ledger")
    func ledger() async throws {
        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let client = fixture.client
        #expect(await eventually { try await client.get("/readyz").status == 200 })
        let start = tokenHex(1)
        let update = tokenHex(2)
        let renewed = tokenHex(3)

        let first = try await client.post(
            "/v1/tokens",
            json: #"""
                {"tokens":[
                {"token":"\#(start)","kind":"push-to-start","channels":["final"],"device_id":"d1","attributes_type":"MatchAttributes","supports_broadcast":true},
                {"token":"\#(update)","kind":"update","channels":["final"],"activity_id":"a1","device_id":"d1","attributes_type":"MatchAttributes"},
                {"kind":"broadcast","channels":["final","cup"],"activity_id":"a2","device_id":"d1","attributes_type":"MatchAttributes"}]}
                """#)
        #expect(first.status == 200, "\(first)")
        #expect(first.json?["registered"] as? Int == 3 && first.json?["replaced"] as? Int == 0, "\(first)")

        let startLedger = try #require(try await client.get("/v1/tokens/\(start)").json)
        #expect(startLedger["registered"] as? Bool == true)
        #expect(startLedger["supports_broadcast"] as? Bool == true)
        #expect(startLedger["kind"] as? String == "push-to-start")
        let activities = try #require(startLedger["activities"] as? [[String: Any]])
        #expect(activities.map { $0["activity_id"] as? String } == ["a1", "a2"], "\(startLedger)")
        #expect(activities.map { $0["path"] as? String } == ["token", "broadcast"])
        #expect(activities.first?["token"] as? String == update)
        #expect((startLedger["history"] as? [[String: Any]])?.map { $0["event"] as? String } == ["registered"])

        let updateLedger = try #require(try await client.get("/v1/tokens/\(update)").json)
        #expect(updateLedger["started_by"] as? String == start, "\(updateLedger)")
        let created = try #require(updateLedger["created_at"] as? Int)
        #expect(updateLedger["retires_at"] as? Int == created + 12 * 3_600_000)

        // A new push-to-start token of the same device and type replaces the old one (the fast decoder's path).
        let second = try await client.post(
            "/v1/tokens",
            json:
                #"{"tokens":[{"token":"\#(renewed)","kind":"push-to-start","channels":["final"],"device_id":"d1","attributes_type":"MatchAttributes"}]}"#
        )
        #expect(second.json?["registered"] as? Int == 1 && second.json?["replaced"] as? Int == 1, "\(second)")
        let gone = try await client.get("/v1/tokens/\(start)")
        #expect(gone.status == 200, "\(gone)")
        let goneLedger = try #require(gone.json)
        #expect(goneLedger["registered"] as? Bool == false)
        #expect(goneLedger["kind"] == nil)
        let history = try #require(goneLedger["history"] as? [[String: Any]])
        #expect(history.map { $0["event"] as? String } == ["replaced", "registered"], "\(goneLedger)")
        #expect(history.first?["replaced_by"] as? String == renewed)
        #expect(history.first?["kind"] as? String == "push_to_start")

        // The update token of a subscribed activity replaces its subscription (the generated decoder's path:
        // a surrogate-pair escape is beyond the fast decoder).
        let third = try await client.post(
            "/v1/tokens",
            json:
                #"{"tokens":[{"token":"\#(tokenHex(4))","kind":"update","channels":["final"],"activity_id":"a2","device_id":"d\ud83d\ude00"}]}"#
        )
        #expect(third.json?["registered"] as? Int == 1 && third.json?["replaced"] as? Int == 1, "\(third)")

        // Unregistered: history, not 404.
        _ = try await client.post("/v1/tokens/delete", json: #"{"tokens":["\#(update)"]}"#)
        let deleted = try #require(try await client.get("/v1/tokens/\(update)").json)
        #expect((deleted["history"] as? [[String: Any]])?.first?["event"] as? String == "unregistered", "\(deleted)")
        _ = problem(try await client.get("/v1/tokens/" + tokenHex(99_999)), status: 404, code: "not_found")
    }

    @Test("bad broadcast items are refused with the field path, and nothing of the batch is written")
    func badBroadcastItems() async throws {
        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let client = fixture.client
        #expect(await eventually { try await client.get("/readyz").status == 200 })
        let good = #"{"token":"\#(tokenHex(10))","kind":"update","channels":["m"],"activity_id":"a10"}"#
        let bad = [
            #"{"token":"\#(tokenHex(11))","kind":"broadcast","channels":["m"],"activity_id":"a11"}"#,
            #"{"kind":"broadcast","channels":["m"]}"#,
            #"{"kind":"broadcast","channels":[],"activity_id":"a12"}"#,
            #"{"token":"\#(tokenHex(13))","kind":"update","channels":["m"],"activity_id":"a13","supports_broadcast":true}"#,
            #"{"token":"\#(tokenHex(14))","kind":"push-to-start","channels":["m"],"device_id":"d","attributes_type":"T","supports_broadcast":"yes"}"#,
        ]
        for item in bad {
            let response = try await client.post("/v1/tokens", json: #"{"tokens":[\#(good),\#(item)]}"#)
            #expect(response.status == 400, "\(item): \(response)")
            #expect(response.header("content-type") == "application/problem+json", "\(response)")
            #expect(response.json?["index"] as? Int == 1, "\(item): \(response)")
        }
        let emptyChannels = problem(
            try await client.post(
                "/v1/tokens",
                json: #"{"tokens":[\#(good),{"kind":"broadcast","channels":["no spaces"],"activity_id":"a"}]}"#),
            status: 400, code: "invalid_channel")
        #expect(emptyChannels["field"] as? String == "tokens[1].channels[0]", "\(emptyChannels)")
        _ = problem(try await client.get("/v1/tokens/" + tokenHex(10)), status: 404, code: "not_found")
        #expect(try await client.get("/readyz").json?["tokens"] as? Int == 0)
    }
}

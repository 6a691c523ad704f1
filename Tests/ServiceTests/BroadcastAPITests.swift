// Issue 12 over the API: /v1/channels/{channel}/broadcast links a channel to an APNs broadcast channel (created
// through the simulator's management listener, or the caller's), a publish to a mixed audience reports its
// broadcast part over HTTP, DELETE deletes the channel the service created, and every error path has its code.
// Real HTTP to the real service, the real simulator (push and management listeners) over TLS + HTTP/2.
import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareService
import FanfareSimulator
import FanfareTestSupport
import Foundation
import Testing

@Suite("API: broadcast links and the audience planner", .ownThread)
struct BroadcastAPITests {
    static let bundleID = ServiceKeys.bundleID

    /// Waits for the wave to complete and returns its report as `GET /v1/waves/{id}` answers it.
    static func completedWave(_ client: HTTPTestClient, _ id: Int) async throws -> [String: Any] {
        var report: [String: Any] = [:]
        let done = await eventually {
            report = try await client.get("/v1/waves/\(id)").json ?? [:]
            return report["state"] as? String == "complete"
        }
        #expect(done, "\(report)")
        return report
    }

    @Test(
        "PUT creates and links an APNs channel (Idempotency-Key: once); a mixed audience gets one broadcast and per-token pushes for the rest; DELETE deletes the channel"
    )
    func linkByCreationAndPublishToAMixedAudience() async throws {
        let fixture = try await ServiceFixture(management: true)
        defer { fixture.removeDirectory() }
        let client = fixture.client
        #expect(await eventually { try await client.get("/readyz").status == 200 })

        let put = try await client.put(
            "/v1/channels/final/broadcast", json: #"{"storage_policy":0}"#,
            headers: [("Idempotency-Key", "link-final-1")])
        #expect(put.status == 200, "\(put)")
        let link = try #require(put.json)
        let channelText = try #require(link["channel_id"] as? String)
        let channelID = try BroadcastChannelID(channelText)
        #expect(link["channel"] as? String == "final" && link["storage_policy"] as? Int == 0)
        #expect(
            link["created_by_us"] as? Bool == true && (link["created_at"] as? Int ?? 0) > 0
                && link["delete_after"] == nil)
        #expect(fixture.simulator.channels.channel(channelID, bundleID: Self.bundleID)?.storagePolicy == 0)
        // A retry with the key is the stored answer: no second channel.
        let replay = try await client.put(
            "/v1/channels/final/broadcast", json: #"{"storage_policy":0}"#,
            headers: [("Idempotency-Key", "link-final-1")])
        #expect(replay.status == 200 && replay.header("idempotency-replayed") == "true", "\(replay)")
        #expect(replay.json?["channel_id"] as? String == channelText)
        #expect(fixture.simulator.channels.list(bundleID: Self.bundleID) == [channelID])
        // PUT is idempotent without a key too: the same request answers the same link.
        let again = try await client.put("/v1/channels/final/broadcast", json: #"{"storage_policy":0}"#)
        #expect(again.status == 200 && again.json?["channel_id"] as? String == channelText, "\(again)")
        #expect(fixture.simulator.channels.list(bundleID: Self.bundleID) == [channelID])
        let got = try await client.get("/v1/channels/final/broadcast")
        #expect(got.status == 200 && got.json?["channel_id"] as? String == channelText, "\(got)")

        // 10 activities: 6 with update tokens, 4 subscribed to the broadcast channel.
        var items: [String] = (0..<6).map {
            #"{"token":"\#(tokenHex($0))","kind":"update","channels":["final"],"activity_id":"a\#($0)"}"#
        }
        items += (6..<10).map {
            #"{"kind":"broadcast","channels":["final"],"activity_id":"a\#($0)","device_id":"d\#($0)"}"#
        }
        let registered = try await client.post("/v1/tokens", json: #"{"tokens":[\#(items.joined(separator: ","))]}"#)
        #expect(registered.status == 200 && registered.json?["registered"] as? Int == 10, "\(registered)")
        let channel = try #require(try await client.get("/v1/channels/final").json)
        #expect(channel["broadcast_channel_id"] as? String == channelText, "\(channel)")
        #expect(channel["broadcast_subscribers"] as? Int == 4)
        #expect((channel["audience"] as? [String: Any])?["update"] as? Int == 6)
        let listed = try #require(try await client.get("/v1/channels").json?["channels"] as? [[String: Any]])
        #expect(
            listed.first { $0["channel"] as? String == "final" }?["broadcast_subscribers"] as? Int == 4, "\(listed)")

        let published = try await client.post(
            "/v1/channels/final/updates", json: updateBody(timestamp: unixNow, home: 1))
        #expect(published.status == 202, "\(published)")
        let waveID = try #require(published.json?["wave_id"] as? Int)
        let report = try await Self.completedWave(client, waveID)
        #expect(report["targeted"] as? Int == 6 && report["delivered"] as? Int == 6, "\(report)")
        let broadcast = try #require(report["broadcast"] as? [String: Any], "\(report)")
        #expect(broadcast["channel_id"] as? String == channelText)
        #expect(broadcast["outcome"] as? String == "delivered" && broadcast["subscribers"] as? Int == 4, "\(broadcast)")
        #expect(
            broadcast["requests"] as? Int == 1 && broadcast["priority"] as? Int == 5
                && broadcast["failure_reason"] == nil)
        #expect(broadcast["downgraded"] as? Bool == false && broadcast["resent_after_restart"] as? Bool == false)
        let page = try #require(try await client.get("/v1/waves?channel=final").json?["waves"] as? [[String: Any]])
        #expect((page.first?["broadcast"] as? [String: Any])?["outcome"] as? String == "delivered", "\(page)")
        let metrics = String(decoding: try await client.get("/metrics").body, as: UTF8.self)
        #expect(
            await eventually {
                String(decoding: try await client.get("/metrics").body, as: UTF8.self)
                    .contains(#"fanfare_broadcasts_total{outcome="delivered"} 1"#)
            }, "\(metrics.split(separator: "\n").filter { $0.contains("broadcast") })")

        // DELETE: the link goes and the simulator's channel with it (the service created it).
        let deleted = try await client.delete("/v1/channels/final/broadcast")
        #expect(deleted.status == 204, "\(deleted)")
        #expect(fixture.simulator.channels.channel(channelID, bundleID: Self.bundleID) == nil)
        _ = problem(try await client.get("/v1/channels/final/broadcast"), status: 404, code: "not_found")
        _ = problem(try await client.delete("/v1/channels/final/broadcast"), status: 404, code: "not_found")
        let unlinked = try #require(try await client.get("/v1/channels/final").json)
        #expect(unlinked["broadcast_channel_id"] == nil, "\(unlinked)")

        try await fixture.stop()
        let lines = fixture.acceptedLines().compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let broadcasts = lines.filter { $0["channel-id"] != nil }
        #expect(broadcasts.count == 1 && broadcasts.first?["channel-id"] as? String == channelText, "\(broadcasts)")
        let tokens = Set(lines.compactMap { $0["token"] as? String })
        #expect(tokens == Set((0..<6).map { tokenHex($0) }), "per-token pushes for exactly the rest")
    }

    @Test("PUT with the caller's channel_id links it without creating one; DELETE leaves the caller's channel")
    func linkByGivenID() async throws {
        let fixture = try await ServiceFixture(management: true)
        defer { fixture.removeDirectory() }
        let client = fixture.client
        let theirs = try fixture.simulator.channels.create(bundleID: Self.bundleID, storagePolicy: 1)
        let text = theirs.id.description
        let put = try await client.put(
            "/v1/channels/semi/broadcast", json: #"{"channel_id":"\#(text)","storage_policy":1}"#)
        #expect(put.status == 200, "\(put)")
        #expect(put.json?["channel_id"] as? String == text && put.json?["created_by_us"] as? Bool == false, "\(put)")
        #expect(fixture.simulator.channels.list(bundleID: Self.bundleID).count == 1)
        // Ids with `/ + =` survive the JSON round trip.
        let odd = "ab+/cd=="
        let second = try await client.put(
            "/v1/channels/other/broadcast", json: #"{"channel_id":"\#(odd)","storage_policy":0}"#)
        #expect(second.status == 200 && second.json?["channel_id"] as? String == odd, "\(second)")
        #expect(try await client.get("/v1/channels/other").json?["broadcast_channel_id"] as? String == odd)

        // A channel the service created and then replaces is deleted at APNs, never left behind.
        let created = try #require(
            try await client.put("/v1/channels/replaced/broadcast", json: #"{"storage_policy":0}"#).json)
        let createdID = try BroadcastChannelID(try #require(created["channel_id"] as? String))
        let other = try await client.put("/v1/channels/replaced/broadcast", json: #"{"storage_policy":1}"#)
        #expect(other.status == 200 && other.json?["storage_policy"] as? Int == 1, "\(other)")
        #expect(fixture.simulator.channels.channel(createdID, bundleID: Self.bundleID) == nil)
        #expect(fixture.simulator.channels.list(bundleID: Self.bundleID).count == 2)

        #expect(try await client.delete("/v1/channels/semi/broadcast").status == 204)
        #expect(fixture.simulator.channels.channel(theirs.id, bundleID: Self.bundleID) != nil, "not ours to delete")
        try await fixture.stop()
    }

    @Test("bad channel ids and policies are 400 with the field; an unlinked channel is 404; nothing is created")
    func badInput() async throws {
        let fixture = try await ServiceFixture(management: true)
        defer { fixture.removeDirectory() }
        let client = fixture.client
        for bad in ["not base64!", "", "abc=d", String(repeating: "A", count: 97), "a b"] {
            let answer = try await client.put(
                "/v1/channels/m/broadcast", json: #"{"channel_id":"\#(bad)","storage_policy":0}"#)
            let document = problem(answer, status: 400, code: "invalid_channel_id")
            #expect(document["field"] as? String == "channel_id", "\(bad): \(answer)")
        }
        let policy = problem(
            try await client.put("/v1/channels/m/broadcast", json: #"{"storage_policy":2}"#), status: 400,
            code: "invalid_request")
        #expect(policy["field"] as? String == "storage_policy")
        _ = problem(
            try await client.put("/v1/channels/m/broadcast", json: #"{"channel_id":"abcd"}"#), status: 400,
            code: "invalid_request")
        _ = problem(
            try await client.put("/v1/channels/m/broadcast", json: #"{"storage_policy":0,"extra":1}"#), status: 400,
            code: "invalid_request")
        _ = problem(try await client.put("/v1/channels/m/broadcast", json: "{"), status: 400, code: "malformed_json")
        _ = problem(
            try await client.put("/v1/channels/bad%20name/broadcast", json: #"{"storage_policy":0}"#), status: 400,
            code: "invalid_channel")
        _ = problem(try await client.get("/v1/channels/m/broadcast"), status: 404, code: "not_found")
        _ = problem(try await client.delete("/v1/channels/m/broadcast"), status: 404, code: "not_found")
        #expect(fixture.simulator.channels.list(bundleID: Self.bundleID).isEmpty)
        #expect(try await client.get("/v1/channels/m").json?["broadcast_channel_id"] == nil)
        try await fixture.stop()
    }

    @Test(
        "without channel management creating is 409 channel_management_not_configured; linking a given id still works")
    func noManagement() async throws {
        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let client = fixture.client
        let document = problem(
            try await client.put("/v1/channels/m/broadcast", json: #"{"storage_policy":0}"#), status: 409,
            code: "channel_management_not_configured")
        #expect((document["detail"] as? String)?.contains("--channel-management") == true, "\(document)")
        _ = problem(try await client.get("/v1/channels/m/broadcast"), status: 404, code: "not_found")
        let given = try await client.put(
            "/v1/channels/m/broadcast", json: #"{"channel_id":"AAAAAAAAAAAAAAAAAAAAAA==","storage_policy":0}"#)
        #expect(given.status == 200, "\(given)")
        // Not created by us: unlinking needs no management API.
        #expect(try await client.delete("/v1/channels/m/broadcast").status == 204)
        try await fixture.stop()
    }

    @Test("APNs refusing the create is 502 apns_channel_refused with its reason and request id; nothing is linked")
    func apnsRefuses() async throws {
        var simulator = ServiceFixture.simulatorConfiguration()
        simulator.maxChannelsPerApp = 0
        let fixture = try await ServiceFixture(simulator: simulator, management: true)
        defer { fixture.removeDirectory() }
        let client = fixture.client
        let answer = try await client.put(
            "/v1/channels/m/broadcast", json: #"{"storage_policy":0}"#, headers: [("Idempotency-Key", "refused-1")])
        let document = problem(answer, status: 502, code: "apns_channel_refused")
        let detail = document["detail"] as? String ?? ""
        #expect(detail.contains("CannotCreateChannelConfig") && detail.contains("apns-request-id"), "\(detail)")
        _ = problem(try await client.get("/v1/channels/m/broadcast"), status: 404, code: "not_found")
        // 5xx answers are not stored: the same key may try again.
        let again = try await client.put(
            "/v1/channels/m/broadcast", json: #"{"storage_policy":0}"#, headers: [("Idempotency-Key", "refused-1")])
        _ = problem(again, status: 502, code: "apns_channel_refused")
        try await fixture.stop()
    }

    @Test("an unreachable management API is 502 apns_channel_unreachable")
    func apnsUnreachable() async throws {
        let fixture = try await ServiceFixture { configuration in
            let client = configuration.fanout.client
            // Port 1 on loopback: nothing listens, the connection is refused.
            var channels = ChannelManagementConfiguration(
                host: "127.0.0.1", port: 1, tls: client.tls, providerTokens: client.providerTokens,
                bundleID: Self.bundleID)
            channels.requestTimeout = .seconds(10)
            configuration.fanout.channelManagement = channels
        }
        defer { fixture.removeDirectory() }
        let answer = try await fixture.client.put("/v1/channels/m/broadcast", json: #"{"storage_policy":0}"#)
        #expect([502, 504].contains(answer.status), "\(answer)")
        #expect(
            ["apns_channel_unreachable", "apns_no_answer"].contains(answer.json?["code"] as? String ?? ""), "\(answer)")
        _ = problem(try await fixture.client.get("/v1/channels/m/broadcast"), status: 404, code: "not_found")
        try await fixture.stop()
    }
}

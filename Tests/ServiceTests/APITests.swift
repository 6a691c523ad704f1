// Every endpoint of the API over real HTTP against an in-process service and a real simulator.
import FanfareService
import FanfareTestSupport
import Foundation
import Testing

@Suite("API endpoints over HTTP", .ownThread)
struct APITests {
    @Test("register, read, publish, follow the wave (JSON and SSE), list, channels, delete")
    func endpoints() async throws {
        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let client = fixture.client

        let health = try await client.get("/healthz")
        #expect(health.status == 200 && health.json?["status"] as? String == "ok", "\(health)")
        #expect(await eventually { try await client.get("/readyz").status == 200 })

        let registered = try await client.post("/v1/tokens", json: registrationBody(0..<300, channel: "match-1"))
        #expect(registered.status == 200 && registered.json?["registered"] as? Int == 300, "\(registered)")
        let startToken = "0a" + String(repeating: "5", count: 62)
        let starts = try await client.post(
            "/v1/tokens",
            json:
                #"{"tokens":[{"token":"\#(startToken)","kind":"push-to-start","channels":["match-1","cup"],"device_id":"d1","attributes_type":"MatchAttributes","frequent_updates":true}]}"#
        )
        #expect(starts.status == 200, "\(starts)")

        let record = try await client.get("/v1/tokens/\(startToken.uppercased())")
        #expect(record.status == 200, "\(record)")
        let fields = try #require(record.json)
        #expect(fields["kind"] as? String == "push-to-start")
        #expect(Set(fields["channels"] as? [String] ?? []) == ["match-1", "cup"])
        #expect(fields["bundle_id"] as? String == ServiceKeys.bundleID)
        #expect(fields["environment"] as? String == "production")
        #expect(fields["frequent_updates"] as? Bool == true)
        #expect((fields["created_at"] as? Int ?? 0) > 1_700_000_000_000)
        let missing = try await client.get("/v1/tokens/" + tokenHex(99_999))
        _ = problem(missing, status: 404, code: "not_found")

        let timestamp = unixNow
        let published = try await client.post(
            "/v1/channels/match-1/updates", json: updateBody(timestamp: timestamp, home: 1))
        #expect(published.status == 202, "\(published)")
        let waveID = try #require(published.json?["wave_id"] as? Int)
        #expect(published.header("location") == "/v1/waves/\(waveID)")

        // The event stream: progress events, then `complete` with the final report, then the end.
        let stream = try await client.stream("/v1/waves/\(waveID)/events") { _ in true }
        #expect(stream.status == 200)
        #expect(stream.header("content-type")?.hasPrefix("text/event-stream") == true, "\(stream)")
        let events = serverSentEvents(stream.body)
        #expect(events.first?.event == "progress")
        let last = try #require(events.last)
        #expect(last.event == "complete")
        let final = try #require(try JSONSerialization.jsonObject(with: Data(last.data.utf8)) as? [String: Any])
        #expect(final["state"] as? String == "complete")
        #expect(final["targeted"] as? Int == 300)
        #expect(final["delivered"] as? Int == 300)
        #expect(final["accounted"] as? Int == 300)

        let wave = try await client.get("/v1/waves/\(waveID)")
        #expect(wave.status == 200)
        let report = try #require(wave.json)
        for counter in [
            "targeted", "delivered", "superseded", "downgraded", "expired", "invalidated", "failed", "retried", "sent",
        ] {
            #expect(report[counter] is Int, "\(counter) missing in \(wave)")
        }
        #expect(report["failed_by_reason"] is [String: Any])
        #expect(report["time_to_first_ack_seconds"] is Double)
        #expect(report["makespan_seconds"] is Double)
        #expect(report["timestamp"] as? Int == Int(timestamp))

        // A second channel and a page of one.
        _ = try await client.post("/v1/channels/cup/updates", json: updateBody(timestamp: timestamp, home: 0))
        let page = try await client.get("/v1/waves?limit=1")
        let firstPage = try #require(page.json)
        let newest = try #require((firstPage["waves"] as? [[String: Any]])?.first)
        #expect(newest["channel"] as? String == "cup")
        let next = try #require(firstPage["next_before"] as? Int)
        let older = try await client.get("/v1/waves?limit=1&before=\(next)")
        #expect(((older.json?["waves"] as? [[String: Any]])?.first?["id"] as? Int) == waveID)
        let filtered = try await client.get("/v1/waves?channel=match-1")
        #expect((filtered.json?["waves"] as? [[String: Any]])?.count == 1)
        #expect(filtered.json?["next_before"] == nil)

        // Channels: the list the operator page reads, and one channel.
        let channels = try await client.get("/v1/channels")
        #expect(channels.status == 200, "\(channels)")
        let list = try #require(channels.json?["channels"] as? [[String: Any]])
        #expect(list.map { $0["channel"] as? String } == ["cup", "match-1"])
        let match = try #require(list.last)
        #expect((match["audience"] as? [String: Any])?["update"] as? Int == 300)
        #expect((match["audience"] as? [String: Any])?["push_to_start"] as? Int == 1)
        #expect(match["latest_timestamp"] as? Int == Int(timestamp))
        let one = try await client.get("/v1/channels/match-1")
        #expect((one.json?["audience"] as? [String: Any])?["update"] as? Int == 300, "\(one)")
        let nobody = try await client.get("/v1/channels/nobody-follows")
        #expect((nobody.json?["audience"] as? [String: Any])?["update"] as? Int == 0, "\(nobody)")

        // Delete: removed and not found counted; the audience shrinks.
        let deleted = try await client.post(
            "/v1/tokens/delete", json: #"{"tokens":["\#(tokenHex(0))","\#(tokenHex(1))","\#(tokenHex(77_777))"]}"#)
        #expect(deleted.json?["removed"] as? Int == 2 && deleted.json?["not_found"] as? Int == 1, "\(deleted)")
        #expect(
            await eventually {
                let after = try await client.get("/v1/channels/match-1")
                return (after.json?["audience"] as? [String: Any])?["update"] as? Int == 298
            })
        // Gone, but the ledger remembers how: 200 with its history.
        let gone = try #require(try await client.get("/v1/tokens/" + tokenHex(0)).json)
        #expect(gone["registered"] as? Bool == false)
        #expect((gone["history"] as? [[String: Any]])?.first?["event"] as? String == "unregistered", "\(gone)")

        // The operator page and the document.
        let page0 = try await client.get("/")
        #expect(page0.status == 200)
        #expect(page0.header("content-type")?.hasPrefix("text/html") == true, "\(page0)")
        #expect(page0.text == OperatorPage.html)
        let metrics = try await client.get("/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.header("content-type")?.hasPrefix("text/plain") == true)
        #expect(metrics.text.contains("fanfare_pushes_total{outcome=\"delivered\"}"), "\(metrics.text.prefix(2000))")
        #expect(metrics.text.contains("fanfare_http_requests_total{"))
        try await fixture.stop()
        // Every push the service reported delivered is in the simulator's log: 300 of the first wave; the
        // `cup` wave went to nobody (the push-to-start token only takes `start`).
        #expect(fixture.acceptedLines().count == 300)
    }

    @Test("POST /v1/push answers with what APNs said: 200, 410 with the action, 400")
    func singlePush() async throws {
        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let client = fixture.client
        func push(_ token: String) async throws -> [String: Any] {
            let response = try await client.post(
                "/v1/push",
                json:
                    #"{"token":"\#(token)","event":"update","content_state":{"home":3,"away":1},"priority":"immediate"}"#
            )
            #expect(response.status == 200, "\(response)")
            return response.json ?? [:]
        }
        let delivered = try await push(tokenHex(1))
        #expect(delivered["status"] as? Int == 200)
        #expect(delivered["action"] as? String == "delivered")
        #expect((delivered["apns_id"] as? String)?.count == 36)
        let gone = try await push("0410" + String(repeating: "ab", count: 30))
        #expect(gone["status"] as? Int == 410)
        #expect(gone["reason"] as? String == "Unregistered")
        #expect(gone["action"] as? String == "drop-token")
        #expect(gone["inactive_since_ms"] is Int)
        let bad = try await push("0400" + String(repeating: "cd", count: 30))
        #expect(bad["status"] as? Int == 400)
        #expect(bad["reason"] as? String == "BadDeviceToken")
        try await fixture.stop()
        #expect(fixture.acceptedLines().count == 1)
    }
}

// Update, push-to-start and end pushes go through the real stack and arrive at the simulator byte for byte,
// with the Live Activity headers APNs requires (apns-spec.md §2, §3).
import FanfareClient
import FanfareCore
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct LiveActivityDeliveryTests {
    @Test func updateStartAndEndAreDeliveredWithExactPayloadAndHeaders() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let collector = ResultCollector()
        let client = try harness.startClient(try harness.clientConfiguration(), collector: collector)
        let now = Int64(Date().timeIntervalSince1970)

        var update = LiveActivityContent(event: .update, timestamp: now)
        update.contentState = try RawJSON(validating: #"{"home":2,"away":1,"minute":71}"#)
        update.staleDate = now + 600
        update.relevanceScore = 50

        var start = LiveActivityContent(event: .start, timestamp: now)
        start.contentState = try RawJSON(validating: #"{"home":0,"away":0,"minute":0}"#)
        start.attributesType = "MatchAttributes"
        start.attributes = try RawJSON(validating: #"{"matchId":"m-42","home":"Lyon","away":"Nantes"}"#)
        start.alert = LiveActivityAlert(
            title: .plain("Kick-off"), body: .localized(key: "MATCH_START", args: ["Lyon", "Nantes"]),
            sound: "whistle.caf")
        start.inputPushToken = true

        var end = LiveActivityContent(event: .end, timestamp: now)
        end.contentState = try RawJSON(validating: #"{"home":2,"away":1,"minute":90}"#)
        end.dismissalDate = 0

        struct Case {
            let name: String
            let payload: PushPayload
            let job: PushJob
        }
        let explicitID = try #require(PushIdentifier("3F2504E0-4F89-41D3-9A0C-0305E82C3301"))
        let cases: [Case] = try [
            { () throws -> Case in
                let payload = try PushPayload(liveActivity: update)
                return Case(
                    name: "update", payload: payload,
                    job: PushJob(
                        token: makeToken(1), payload: payload, priority: .normal, expiration: now + 3600,
                        collapseID: "score-m-42", cookie: 11))
            }(),
            { () throws -> Case in
                let payload = try PushPayload(liveActivity: start)
                return Case(
                    name: "start", payload: payload,
                    job: PushJob(
                        token: makeToken(2), payload: payload, priority: .immediate, apnsID: explicitID, cookie: 22))
            }(),
            { () throws -> Case in
                let payload = try PushPayload(liveActivity: end)
                return Case(
                    name: "end", payload: payload,
                    job: PushJob(
                        token: makeToken(3), payload: payload, priority: .immediate, expiration: 0, cookie: 33))
            }(),
        ]

        var results: [String: PushResult] = [:]
        for item in cases {
            let result = try await client.send(item.job)
            #expect(result.disposition == .delivered, "\(item.name): \(result.disposition)")
            #expect(result.cookie == item.job.cookie, "send(_:) must return the caller's cookie")
            #expect(result.token == item.job.token)
            #expect(result.resends == 0)
            results[item.name] = result
        }
        #expect(results["start"]?.apnsID == explicitID, "an apns-id set by the caller is sent as is")
        #expect(results["update"]?.apnsID != results["end"]?.apnsID)
        #expect(collector.count == 0, "send(_:) results do not go to the handler")

        await harness.shutdown()
        let stats = harness.simulator.statistics()
        #expect(stats.accepted == 3)
        #expect(stats.totalRejections == 0)

        let log = try harness.acceptedLog()
        try #require(log.count == 3)
        for item in cases {
            let result = try #require(results[item.name])
            let record = try #require(
                log.first { $0.string("apns-id") == result.apnsID.description }, "\(item.name) not in the log")
            expectRecord(record, matches: item.job, payload: item.payload, item.name)
        }

        // The payload shapes the spec asks for (§3.3), checked on what the simulator received.
        let startRecord = try #require(log.first { $0.string("apns-id") == explicitID.description })
        let aps = try #require((startRecord.fields["payload"] as? [String: Any])?["aps"] as? [String: Any])
        #expect(aps["event"] as? String == "start")
        #expect(aps["attributes-type"] as? String == "MatchAttributes")
        #expect((aps["attributes"] as? [String: Any])?["matchId"] as? String == "m-42")
        let alert = try #require(aps["alert"] as? [String: Any])
        #expect(alert["title"] as? String == "Kick-off")
        #expect((alert["body"] as? [String: Any])?["loc-key"] as? String == "MATCH_START")
        #expect(alert["sound"] as? String == "whistle.caf")
        #expect((aps["input-push-token"] as? NSNumber)?.intValue == 1)

        let endRecord = try #require(log.first { $0.string("apns-id") == results["end"]?.apnsID.description })
        let endAPS = try #require((endRecord.fields["payload"] as? [String: Any])?["aps"] as? [String: Any])
        #expect(endAPS["event"] as? String == "end")
        #expect((endAPS["dismissal-date"] as? NSNumber)?.intValue == 0)
    }

    /// A wave push's apns-id (`PushIdentifier.waveID`) is sent as is, and a push sent again (as after a restart)
    /// shows twice in the simulator's log under one id: a duplicate anyone can count and recompute.
    @Test func wavePushIDsReachTheSimulatorAndRepeatOnResend() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let client = try harness.startClient(try harness.clientConfiguration(), collector: ResultCollector())
        let payload = try updatePayload()
        // Python: ns = uuid.UUID("314bf00d-1ac8-5df6-b187-865dac19318b"); token = bytes((5 + 13 * i) & 0xff for i
        // in range(80)); uuid.UUID(bytes=hashlib.sha1(ns.bytes + (0x0123456789abcdef).to_bytes(8, "big")
        // + token).digest()[:16], version=5)
        let known = try DeviceToken(bytes: (0..<80).map { UInt8(truncatingIfNeeded: 5 + 13 * $0) })
        let wave: UInt64 = 0x0123_4567_89AB_CDEF
        let tokens = [known] + (0..<4).map { makeToken($0) }
        let sends = tokens + [known, tokens[1]]  // two resends
        for (index, token) in sends.enumerated() {
            let job = PushJob(
                token: token, payload: payload, apnsID: PushIdentifier.waveID(wave: wave, token: token),
                cookie: UInt64(index))
            let result = try await client.send(job)
            #expect(result.disposition == .delivered)
            #expect(result.apnsID == PushIdentifier.waveID(wave: wave, token: token))
        }
        await harness.shutdown()

        let log = try harness.acceptedLog()
        try #require(log.count == sends.count)
        let ids = log.map { $0.string("apns-id") ?? "" }
        for record in log {
            let token = try DeviceToken(hex: try #require(record.string("token")))
            #expect(record.string("apns-id") == PushIdentifier.waveID(wave: wave, token: token).description)
        }
        #expect(ids.filter { $0 == "9ad4bba8-2b05-54df-8d31-c311c3a6a3a3" }.count == 2, "the known token, sent twice")
        #expect(Set(ids).count == tokens.count, "each resend repeats its first attempt's id")
        #expect(PushIdentifier.waveID(wave: wave + 1, token: known) != PushIdentifier.waveID(wave: wave, token: known))
    }

    @Test func handlerReceivesEveryPushOfABatchWithItsCookie() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let jobs = (0..<200).map {
            PushJob(token: makeToken($0 % 20), payload: payload, priority: .normal, cookie: UInt64($0))
        }
        try await submitAll(client, jobs)
        #expect(await collector.waitFor(count: jobs.count))
        let results = collector.byCookie()
        #expect(results.count == jobs.count)
        #expect(results.values.allSatisfy { $0.disposition == .delivered })
        #expect(Set(results.values.map(\.apnsID.description)).count == jobs.count, "generated apns-ids are unique")
        let stats = client.statistics
        #expect(stats.submitted == jobs.count && stats.delivered == jobs.count && stats.completed == jobs.count)

        await harness.shutdown()
        #expect(harness.simulator.statistics().accepted == jobs.count)
        let logged = Set(try harness.acceptedLog().compactMap { $0.string("apns-id") })
        #expect(logged == Set(results.values.map(\.apnsID.description)))
    }
}

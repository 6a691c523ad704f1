// Broadcast publishes (apns-spec.md §8.3) through the real client to the real simulator over TLS + HTTP/2,
// mixed with token pushes on the same connections: every publish is in the accepted log with its channel,
// priority, expiration 0 and payload, and its result names the channel and the request id APNs answered with.
import FanfareClient
import FanfareCore
import FanfareSimulator
import Foundation
import Testing

@Suite struct BroadcastPublishTests {
    static let channels = [try! BroadcastChannelID("bWF0Y2gtMDAwMDAwMDAwMQ=="), try! BroadcastChannelID("a2lja29mZi8rLzEyMzQ1Ng==")]

    static func broadcastPayload(minute: Int) throws -> PushPayload {
        var content = LiveActivityContent(event: .update, timestamp: Int64(Date().timeIntervalSince1970))
        content.contentState = try RawJSON(validating: #"{"home":2,"away":1,"minute":\#(minute)}"#)
        return try PushPayload(liveActivity: content, limit: PayloadLimits.broadcast)
    }

    @Test(arguments: BroadcastRequestIDHeader.allCases)
    func broadcastsAndTokenPushesShareTheConnection(header: BroadcastRequestIDHeader) async throws {
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.broadcastRequestIDHeader = header
        let client = try harness.startClient(configuration, collector: collector)
        let tokenPayload = try updatePayload()
        var jobs: [PushJob] = []
        for index in 0..<60 {
            if index % 3 == 0 {
                jobs.append(PushJob(token: makeToken(index), payload: tokenPayload, cookie: UInt64(index)))
            } else {
                jobs.append(
                    PushJob(
                        channel: Self.channels[index % 2], payload: try Self.broadcastPayload(minute: index),
                        priority: index % 4 == 0 ? .normal : .immediate, cookie: UInt64(index)))
            }
        }
        try await submitAll(client, jobs)
        #expect(await collector.waitFor(count: jobs.count))
        let results = collector.byCookie()
        #expect(results.values.allSatisfy { $0.isDelivered }, "\(results.values.filter { !$0.isDelivered }.prefix(3))")
        harness.shutdown()

        let log = try harness.acceptedLog()
        try #require(log.count == jobs.count)
        let byID = Dictionary(uniqueKeysWithValues: log.compactMap { record in record.string("apns-id").map { ($0, record) } })
        for job in jobs {
            let result = try #require(results[job.cookie])
            #expect(result.target == job.target)
            let record = try #require(byID[result.apnsID.description], "push \(job.cookie) (\(job.target)) is not in the accepted log")
            if let channel = job.channel {
                #expect(result.channel == channel)
                #expect(record.string("channel-id") == channel.description)
                #expect(record.isNull("token"))
                #expect(record.isNull("topic"), "\(record.line)")
                #expect(record.string("push-type") == "liveactivity")
                #expect(record.int("priority") == job.priority.rawValue)
                #expect(record.int("expiration") == 0)
                #expect(record.hasPayload(job.payload.text), "\(record.line)")
            } else {
                #expect(result.channel == nil)
                expectRecord(record, matches: job, payload: tokenPayload, "push \(job.cookie)")
            }
        }
    }

    /// The result carries the id APNs' answer named, the one the accepted log shows. Sent as `apns-id`, the
    /// simulator echoes the caller's id; sent as `apns-request-id`, it echoes it once it reads that header, and
    /// until then answers with an `apns-id` of its own, which the result then carries.
    @Test(arguments: BroadcastRequestIDHeader.allCases)
    func theAnsweredRequestIDComesBackAndLandsInTheLog(header: BroadcastRequestIDHeader) async throws {
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.broadcastRequestIDHeader = header
        let client = try harness.startClient(configuration, collector: ResultCollector())
        let id = try #require(PushIdentifier("0f1e2d3c-4b5a-4697-8877-665544332211"))
        let result = try await client.send(
            PushJob(channel: Self.channels[1], payload: try Self.broadcastPayload(minute: 1), priority: .normal, apnsID: id, cookie: 7))
        #expect(result.isDelivered)
        #expect(result.cookie == 7)
        if header == .apnsID { #expect(result.apnsID == id) }
        harness.shutdown()
        let log = try harness.acceptedLog()
        #expect(log.map { $0.string("apns-id") } == [result.apnsID.description])
    }

    @Test func whatAPNsWouldRefuseIsRefusedBeforeSending() async throws {
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        let client = try harness.startClient(try harness.clientConfiguration(), collector: ResultCollector())
        let payload = try Self.broadcastPayload(minute: 2)
        #expect(throws: SubmitError.self) { try client.submit(PushJob(channel: Self.channels[0], payload: payload, priority: .powerSaving)) }
        let large = try PushPayload(#"{"aps":{"event":"update","timestamp":1},"pad":""# + String(repeating: "x", count: 5200) + #""}"#, limit: 8192)
        do {
            try client.submit(PushJob(channel: Self.channels[0], payload: large, priority: .immediate))
            Issue.record("a 5,2xx-byte broadcast was taken")
        } catch {
            #expect("\(error)".contains("5120"), "\(error)")
        }
        // A token push of priority 1 still goes (APNs judges it).
        let token = try await client.send(PushJob(token: makeToken(1), payload: try updatePayload(), priority: .powerSaving))
        #expect(token.isDelivered)
        harness.shutdown()
        #expect(try harness.acceptedLog().count == 1)
    }

    @Test func aBroadcastToAnotherAppIsRejectedWithItsReasonAndAction() async throws {
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.bundleID = "com.example.other"
        let client = try harness.startClient(configuration, collector: ResultCollector())
        let result = try await client.send(PushJob(channel: Self.channels[0], payload: try Self.broadcastPayload(minute: 3), priority: .immediate))
        guard case .rejected(let status, let reason, _, let action, _) = result.disposition else {
            Issue.record("expected a rejection, got \(result.disposition)")
            return
        }
        #expect(status == 403)
        #expect(reason == .topicMismatch)
        #expect(action == .fixConfiguration)
        #expect(result.channel == Self.channels[0])
    }
}

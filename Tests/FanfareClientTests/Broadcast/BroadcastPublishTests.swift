// Broadcast publishes (apns-spec.md §8.3) through the real client to the real simulator over TLS + HTTP/2,
// mixed with token pushes on the same connections: every publish is in the accepted log with its channel,
// priority, expiration 0 and payload, and its result names the channel and the request id APNs answered with.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct BroadcastPublishTests {
    /// Two channels made on the simulator with the client's channel manager (policies 0 and 1).
    static func makeChannels(_ harness: TestHarness) async throws -> [BroadcastChannelID] {
        let manager = try harness.channelManager()
        defer { manager.shutdown() }
        return [
            try await manager.create(storagePolicy: .noMessageStored),
            try await manager.create(storagePolicy: .mostRecentMessageStored),
        ]
    }

    static let unknownChannel = try! BroadcastChannelID("a2lja29mZi8rLzEyMzQ1Ng==")

    static func broadcastPayload(minute: Int) throws -> PushPayload {
        var content = LiveActivityContent(event: .update, timestamp: Int64(Date().timeIntervalSince1970))
        content.contentState = try RawJSON(validating: #"{"home":2,"away":1,"minute":\#(minute)}"#)
        return try PushPayload(liveActivity: content, limit: PayloadLimits.broadcast)
    }

    @Test(arguments: BroadcastRequestIDHeader.allCases)
    func broadcastsAndTokenPushesShareTheConnection(header: BroadcastRequestIDHeader) async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        let channels = try await Self.makeChannels(harness)
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
                        channel: channels[index % 2], payload: try Self.broadcastPayload(minute: index),
                        priority: index % 4 == 0 ? .normal : .immediate, cookie: UInt64(index)))
            }
        }
        try await submitAll(client, jobs)
        #expect(await collector.waitFor(count: jobs.count))
        let results = collector.byCookie()
        #expect(results.values.allSatisfy { $0.isDelivered }, "\(results.values.filter { !$0.isDelivered }.prefix(3))")
        await harness.shutdown()

        let log = try harness.acceptedLog()
        try #require(log.count == jobs.count)
        let byID = Dictionary(
            uniqueKeysWithValues: log.compactMap { record in record.string("apns-id").map { ($0, record) } })
        for job in jobs {
            let result = try #require(results[job.cookie])
            #expect(result.target == job.target)
            if let channel = job.channel {
                // The simulator's log names a broadcast by the apns-id it answered with, not by the
                // apns-request-id it echoed: a publish is found by its payload (each carries its own minute).
                let record = try #require(
                    log.first { $0.hasPayload(job.payload.text) }, "broadcast \(job.cookie) is not in the accepted log")
                #expect(result.channel == channel)
                #expect(record.string("channel-id") == channel.description)
                #expect(record.isNull("token"))
                #expect(record.isNull("topic"), "\(record.line)")
                #expect(record.string("push-type") == "liveactivity")
                #expect(record.int("priority") == job.priority.rawValue)
                #expect(record.int("expiration") == 0)
                #expect(record.hasPayload(job.payload.text), "\(record.line)")
            } else {
                let record = try #require(
                    byID[result.apnsID.description], "push \(job.cookie) is not in the accepted log")
                #expect(result.channel == nil)
                expectRecord(record, matches: job, payload: tokenPayload, "push \(job.cookie)")
            }
        }
    }

    /// The result carries the request id APNs' answer named: the simulator echoes it in `apns-request-id`
    /// (and answers `apns-id` too, its own unless the request sent one); `apns-request-id` wins.
    @Test(arguments: BroadcastRequestIDHeader.allCases)
    func theAnsweredRequestIDComesBackAndLandsInTheLog(header: BroadcastRequestIDHeader) async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let channels = try await Self.makeChannels(harness)
        var configuration = try harness.clientConfiguration()
        configuration.broadcastRequestIDHeader = header
        let client = try harness.startClient(configuration, collector: ResultCollector())
        let id = try #require(PushIdentifier("0f1e2d3c-4b5a-4697-8877-665544332211"))
        let result = try await client.send(
            PushJob(
                channel: channels[1], payload: try Self.broadcastPayload(minute: 1), priority: .normal, apnsID: id,
                cookie: 7))
        #expect(result.isDelivered)
        #expect(result.cookie == 7)
        #expect(result.apnsID == id)
        await harness.shutdown()
        let log = try harness.acceptedLog()
        #expect(log.map { $0.string("channel-id") } == [channels[1].description])
        // The log names a publish by its answer's apns-id: the request id itself when it was sent as apns-id.
        if header == .apnsID { #expect(log.map { $0.string("apns-id") } == [id.description]) }
    }

    @Test func whatAPNsWouldRefuseIsRefusedBeforeSending() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let client = try harness.startClient(try harness.clientConfiguration(), collector: ResultCollector())
        let payload = try Self.broadcastPayload(minute: 2)
        #expect(throws: SubmitError.self) {
            try client.submit(PushJob(channel: Self.unknownChannel, payload: payload, priority: .powerSaving))
        }
        let large = try PushPayload(
            #"{"aps":{"event":"update","timestamp":1},"pad":""# + String(repeating: "x", count: 5200) + #""}"#,
            limit: 8192)
        do {
            try client.submit(PushJob(channel: Self.unknownChannel, payload: large, priority: .immediate))
            Issue.record("a 5,2xx-byte broadcast was taken")
        } catch {
            #expect("\(error)".contains("5120"), "\(error)")
        }
        // A token push of priority 1 still goes (APNs judges it).
        let token = try await client.send(
            PushJob(token: makeToken(1), payload: try updatePayload(), priority: .powerSaving))
        #expect(token.isDelivered)
        await harness.shutdown()
        #expect(try harness.acceptedLog().count == 1)
    }

    @Test func aBroadcastToAnotherAppIsRejectedWithItsReasonAndAction() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.bundleID = "com.example.other"
        let client = try harness.startClient(configuration, collector: ResultCollector())
        let result = try await client.send(
            PushJob(channel: Self.unknownChannel, payload: try Self.broadcastPayload(minute: 3), priority: .immediate))
        guard case .rejected(let status, let reason, _, let action, _) = result.disposition else {
            Issue.record("expected a rejection, got \(result.disposition)")
            return
        }
        #expect(status == 403)
        #expect(reason == .topicMismatch)
        #expect(action == .fixConfiguration)
        #expect(result.channel == Self.unknownChannel)
    }
}

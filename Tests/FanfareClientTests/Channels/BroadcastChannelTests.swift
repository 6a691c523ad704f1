// The simulator's broadcast channels over real TLS + HTTP/2, driven by nghttp2's own client: the management
// API on its own port (every route and every validation reason), broadcasts checked against the channels,
// channels kept across a restart, the 10,000-channel cap, and the 2025 provider keys' 403s.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

private let channelsPath = "/1/apps/\(Fixture.bundleID)/channels"
private let allChannelsPath = "/1/apps/\(Fixture.bundleID)/all-channels"
private let broadcastPath = "/4/broadcasts/apps/\(Fixture.bundleID)"
private let updateBody = #"{"aps":{"timestamp":1750000000,"event":"update","content-state":{"home":1,"away":0}}}"#

/// `authorization` with a fresh token of the trusted key (or `keyID` signed with it).
private func bearer(_ harness: TestHarness, keyID: String = Fixture.keyID) throws -> (String, String) {
    let token = try harness.signer(keyID: keyID).mint(issuedAt: Int64(Date().timeIntervalSince1970))
    return ("authorization", "bearer \(token.jwt)")
}

private func createBody(policy: Int) -> String {
    #"{"message-storage-policy":\#(policy),"push-type":"LiveActivity"}"#
}

/// Creates a channel; returns its id.
private func createChannel(_ harness: TestHarness, policy: Int) async throws -> String {
    let run = try await nghttp(
        port: harness.managementPort, path: channelsPath, headers: [try bearer(harness)],
        body: createBody(policy: policy))
    let response = try run.response
    #expect(response.status == 201, "\(run.body)")
    return try #require(response.header("apns-channel-id"))
}

/// A broadcast on the push port with the headers Apple lists, bent by `change`.
private func broadcast(
    _ harness: TestHarness, channel: String?, priority: String? = "10", expiration: String? = "0",
    body: String = updateBody,
    path: String = broadcastPath, extra: [(String, String)] = []
) async throws -> NghttpRun {
    var headers = [try bearer(harness), ("apns-push-type", "liveactivity")]
    if let channel { headers.append(("apns-channel-id", channel)) }
    if let priority { headers.append(("apns-priority", priority)) }
    if let expiration { headers.append(("apns-expiration", expiration)) }
    return try await nghttp(port: harness.port, path: path, headers: headers + extra, body: body)
}

private func expectAnswer(
    _ run: NghttpRun, _ status: Int, _ reason: APNsReason?, sourceLocation: SourceLocation = #_sourceLocation
) {
    guard run.responses.count == 1 else {
        Issue.record("expected one answer, got \(run.responses.count)", sourceLocation: sourceLocation)
        return
    }
    #expect(run.responses[0].status == status, "\(run.body)", sourceLocation: sourceLocation)
    #expect(run.reason == reason?.rawValue, sourceLocation: sourceLocation)
}

@Suite(.ownThread) struct BroadcastChannelTests {
    @Test func createReadListDelete() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let requestID = "5e0d8a3c-2b8f-4f3e-9c1a-0f6e2d4b7a91"
        let created = try await nghttp(
            port: harness.managementPort, path: channelsPath,
            headers: [try bearer(harness), ("apns-request-id", requestID)],
            body: createBody(policy: 1))
        let response = try created.response
        #expect(response.status == 201)
        #expect(created.body.isEmpty)
        #expect(response.header("apns-request-id") == requestID)
        let id = try #require(response.header("apns-channel-id"))
        // 16 random bytes in standard base64, like APNs' ids.
        #expect(id.count == 24 && id.hasSuffix("=="))
        #expect(Data(base64Encoded: id)?.count == 16)

        let read = try await nghttp(
            port: harness.managementPort, path: channelsPath, headers: [try bearer(harness), ("apns-channel-id", id)])
        #expect(try read.response.status == 200)
        #expect(read.json?["message-storage-policy"] as? Int == 1)
        #expect(read.json?["push-type"] as? String == "LiveActivity")
        // No apns-request-id sent: one is generated.
        let generated = try #require(try read.response.header("apns-request-id"))
        #expect(UUID(uuidString: generated) != nil)

        let second = try await createChannel(harness, policy: 0)
        let list = try await nghttp(port: harness.managementPort, path: allChannelsPath, headers: [try bearer(harness)])
        #expect(try list.response.status == 200)
        #expect(list.json?["channels"] as? [String] == [id, second])

        let deleted = try await nghttp(
            port: harness.managementPort, path: channelsPath, method: "DELETE",
            headers: [try bearer(harness), ("apns-channel-id", id)])
        #expect(try deleted.response.status == 204)
        #expect(deleted.body.isEmpty)
        let readAgain = try await nghttp(
            port: harness.managementPort, path: channelsPath, headers: [try bearer(harness), ("apns-channel-id", id)])
        expectAnswer(readAgain, 400, .channelNotRegistered)
        let listAgain = try await nghttp(
            port: harness.managementPort, path: allChannelsPath, headers: [try bearer(harness)])
        #expect(listAgain.json?["channels"] as? [String] == [second])
        await harness.shutdown()
        let stats = harness.simulator.managementStatistics()
        #expect(stats.accepted == 6)  // 2 creates, 1 read, 2 lists, 1 delete
        #expect(stats.count(of: .channelNotRegistered) == 1)
        #expect(harness.simulator.statistics().accepted == 0, "management requests are not pushes")
    }

    /// Every §7.5 reason the management API answers, each from a request bent one way (APNs' order is in
    /// ManagementRequestValidator's header comment).
    @Test func everyManagementValidationReason() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let existing = try await createChannel(harness, policy: 0)
        let auth = try bearer(harness)
        let unknownKey = try ProviderTokenSigner(
            privateKeyPEMFile: harness.keys.unknownPrivateKeyFile, keyID: Fixture.keyID, teamID: Fixture.teamID)
        let foreignJWT = try unknownKey.mint(issuedAt: Int64(Date().timeIntervalSince1970)).jwt
        let unknownID = "AAAAAAAAAAAAAAAAAAAAAA=="
        struct Case {
            var name: String
            var path: String = channelsPath
            var method: String? = nil
            var headers: [(String, String)]
            var body: String? = nil
            var status: Int
            var reason: APNsReason
        }
        let token = String(repeating: "ab", count: 32)
        let cases: [Case] = [
            Case(
                name: "bad request id", headers: [auth, ("apns-request-id", "not-a-uuid")], body: createBody(policy: 0),
                status: 400, reason: .badMessageId),
            Case(
                name: "unknown path", path: "/1/apps/\(Fixture.bundleID)/channel", headers: [auth], status: 404,
                reason: .badPath),
            Case(
                name: "device path", path: "/3/device/\(token)", headers: [auth], body: updateBody, status: 404,
                reason: .badPath),
            Case(
                name: "broadcast path", path: broadcastPath, headers: [auth, ("apns-channel-id", existing)],
                body: updateBody, status: 404, reason: .badPath),
            Case(
                name: "PUT", method: "PUT", headers: [auth], body: createBody(policy: 0), status: 405,
                reason: .methodNotAllowed),
            Case(
                name: "POST all-channels", path: allChannelsPath, headers: [auth], body: createBody(policy: 0),
                status: 404, reason: .badPath),
            Case(
                name: "DELETE all-channels", path: allChannelsPath, method: "DELETE", headers: [auth], status: 404,
                reason: .badPath),
            Case(
                name: "push-type suffix", path: "/1/apps/\(Fixture.bundleID).push-type.liveactivity/channels",
                headers: [auth],
                body: createBody(policy: 0), status: 400, reason: .topicDisallowed),
            Case(
                name: "another app", path: "/1/apps/com.other.app/channels", headers: [auth],
                body: createBody(policy: 0), status: 403, reason: .topicMismatch),
            Case(
                name: "repeated header", headers: [auth, ("apns-channel-id", existing), ("apns-channel-id", existing)],
                status: 400,
                reason: .duplicateHeaders),
            Case(
                name: "no token", headers: [("apns-channel-id", existing)], status: 403, reason: .missingProviderToken),
            Case(
                name: "untrusted key",
                headers: [("authorization", "bearer \(foreignJWT)"), ("apns-channel-id", existing)], status: 403,
                reason: .invalidProviderToken),
            Case(name: "read without id", headers: [auth], status: 400, reason: .missingChannelId),
            Case(name: "delete without id", method: "DELETE", headers: [auth], status: 400, reason: .missingChannelId),
            Case(
                name: "id not base64", headers: [auth, ("apns-channel-id", "not base64!")], status: 400,
                reason: .badChannelId),
            Case(
                name: "id too long", headers: [auth, ("apns-channel-id", String(repeating: "A", count: 100))],
                status: 400, reason: .badChannelId),
            Case(
                name: "read unknown id", headers: [auth, ("apns-channel-id", unknownID)], status: 400,
                reason: .channelNotRegistered),
            Case(
                name: "delete unknown id", method: "DELETE", headers: [auth, ("apns-channel-id", unknownID)],
                status: 400,
                reason: .channelNotRegistered),
            Case(name: "empty body", method: "POST", headers: [auth], status: 400, reason: .payloadEmpty),
            Case(name: "not JSON", headers: [auth], body: "policy=0", status: 400, reason: .badRequestPayload),
            Case(name: "not an object", headers: [auth], body: "[0]", status: 400, reason: .badRequestParams),
            Case(
                name: "unknown attribute", headers: [auth],
                body: #"{"message-storage-policy":0,"push-type":"LiveActivity","ttl":5}"#,
                status: 400, reason: .badRequestParams),
            Case(
                name: "policy 2", headers: [auth], body: createBody(policy: 2), status: 400, reason: .badRequestParams),
            Case(
                name: "policy as a string", headers: [auth],
                body: #"{"message-storage-policy":"0","push-type":"LiveActivity"}"#,
                status: 400, reason: .badRequestParams),
            Case(
                name: "no policy", headers: [auth], body: #"{"push-type":"LiveActivity"}"#, status: 400,
                reason: .badRequestParams),
            Case(
                name: "no push type", headers: [auth], body: #"{"message-storage-policy":1}"#, status: 400,
                reason: .missingPushType),
            Case(
                name: "alert push type", headers: [auth], body: #"{"message-storage-policy":1,"push-type":"alert"}"#,
                status: 400,
                reason: .invalidPushType),
        ]
        for item in cases {
            let run = try await nghttp(
                port: harness.managementPort, path: item.path, method: item.method, headers: item.headers,
                body: item.body)
            #expect(run.responses.count == 1, "\(item.name)")
            #expect(run.responses.first?.status == item.status, "\(item.name): \(run.body)")
            #expect(run.reason == item.reason.rawValue, "\(item.name): \(run.body)")
            #expect(run.responses.first?.header("apns-request-id") != nil, "\(item.name)")
        }
        // Nothing above created or removed a channel.
        #expect(harness.simulator.channels.list(bundleID: Fixture.bundleID).map(\.description) == [existing])
    }

    @Test func thePushPortRefusesManagementPaths() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let list = try await nghttp(port: harness.port, path: allChannelsPath, headers: [try bearer(harness)])
        expectAnswer(list, 404, .badPath)
        let create = try await nghttp(
            port: harness.port, path: channelsPath, headers: [try bearer(harness)], body: createBody(policy: 0))
        expectAnswer(create, 404, .badPath)
        #expect(harness.simulator.channels.count == 0)
    }

    @Test func broadcastsAreCheckedAgainstTheChannels() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let noStorage = try await createChannel(harness, policy: 0)
        let stored = try await createChannel(harness, policy: 1)
        let requestID = "0b7e3a52-9d1c-4c8e-8f2a-6e5d4c3b2a19"
        let accepted = try await broadcast(harness, channel: noStorage, extra: [("apns-request-id", requestID)])
        expectAnswer(accepted, 200, nil)
        #expect(try accepted.response.header("apns-request-id") == requestID)
        expectAnswer(try await broadcast(harness, channel: stored, priority: "5", expiration: "1750003600"), 200, nil)
        expectAnswer(
            try await broadcast(harness, channel: noStorage, expiration: "1750003600"), 400, .badExpirationDate)
        expectAnswer(try await broadcast(harness, channel: "AAAAAAAAAAAAAAAAAAAAAA=="), 400, .channelNotRegistered)
        expectAnswer(try await broadcast(harness, channel: nil), 400, .missingChannelId)
        expectAnswer(try await broadcast(harness, channel: "not base64!"), 400, .badChannelId)
        expectAnswer(try await broadcast(harness, channel: noStorage, priority: "1"), 400, .badPriority)
        expectAnswer(try await broadcast(harness, channel: noStorage, priority: nil), 400, .badPriority)
        expectAnswer(
            try await broadcast(harness, channel: noStorage, path: broadcastPath + ".push-type.liveactivity"), 400,
            .topicDisallowed)
        let start =
            #"{"aps":{"timestamp":1750000000,"event":"start","content-state":{},"attributes-type":"Match","attributes":{}}}"#
        expectAnswer(try await broadcast(harness, channel: noStorage, body: start), 400, .badRequestPayload)
        let end = #"{"aps":{"timestamp":1750000001,"event":"end","content-state":{"home":2,"away":0}}}"#
        expectAnswer(try await broadcast(harness, channel: stored, body: end), 200, nil)
        // The 5120-byte limit, exactly.
        let skeleton = #"{"aps":{"event":"update","timestamp":1,"content-state":{"pad":""}}}"#
        let atLimit = skeleton.replacingOccurrences(
            of: #""pad":"""#, with: #""pad":""# + String(repeating: "x", count: 5120 - skeleton.utf8.count) + "\"")
        #expect(atLimit.utf8.count == 5120)
        expectAnswer(try await broadcast(harness, channel: noStorage, body: atLimit), 200, nil)
        let overLimit = atLimit.replacingOccurrences(of: #""pad":""#, with: #""pad":"x"#)
        expectAnswer(try await broadcast(harness, channel: noStorage, body: overLimit), 413, .payloadTooLarge)
        // A deleted channel takes no more broadcasts.
        let deleted = try await nghttp(
            port: harness.managementPort, path: channelsPath, method: "DELETE",
            headers: [try bearer(harness), ("apns-channel-id", stored)])
        #expect(try deleted.response.status == 204)
        expectAnswer(try await broadcast(harness, channel: stored), 400, .channelNotRegistered)

        await harness.shutdown()
        let records = try harness.acceptedLog()
        #expect(records.count == 4)
        #expect(records.map { $0.string("channel-id") } == [noStorage, stored, stored, noStorage])
    }

    /// Channels (and the ids ever issued) are in the state file: a simulator restarted on it has them, and a
    /// deleted channel stays deleted.
    @Test func channelsSurviveARestart() async throws {
        let harness = try TestHarness(management: true, channelStateFile: "channels")
        defer { harness.shutdown() }
        let first = try await createChannel(harness, policy: 0)
        let second = try await createChannel(harness, policy: 1)
        let gone = try await createChannel(harness, policy: 1)
        let deleted = try await nghttp(
            port: harness.managementPort, path: channelsPath, method: "DELETE",
            headers: [try bearer(harness), ("apns-channel-id", gone)])
        #expect(try deleted.response.status == 204)
        let port = harness.port
        await harness.simulator.shutdown()

        let restarted = try harness.startSimulator(
            port: port, log: "restarted.jsonl", managementPort: 0, channelStateFile: "channels")
        let managementPort = try #require(restarted.managementAddress?.port)
        let list = try await nghttp(port: managementPort, path: allChannelsPath, headers: [try bearer(harness)])
        #expect(list.json?["channels"] as? [String] == [first, second])
        let read = try await nghttp(
            port: managementPort, path: channelsPath, headers: [try bearer(harness), ("apns-channel-id", second)])
        #expect(read.json?["message-storage-policy"] as? Int == 1, "the storage policy is kept")
        expectAnswer(try await broadcast(harness, channel: first), 200, nil)
        expectAnswer(try await broadcast(harness, channel: gone), 400, .channelNotRegistered)
        expectAnswer(try await broadcast(harness, channel: first, expiration: "1750003600"), 400, .badExpirationDate)
        #expect(restarted.channels.issuedCount == 3, "the deleted id is remembered, so it is never issued again")
    }

    /// A create whose save fails is never answered (the connection is reset) and is undone: the answer a
    /// client gets and what a restart finds agree.
    @Test func aCreateThatCannotBeSavedIsNeverAnswered() async throws {
        let harness = try TestHarness(management: true, channelStateFile: "channels")
        defer { harness.shutdown() }
        let kept = try await createChannel(harness, policy: 0)
        // A directory where the save's temporary file goes: the next save fails, the file keeps its state.
        try FileManager.default.createDirectory(
            atPath: harness.directory + "/channels.tmp", withIntermediateDirectories: false)
        let lost = try await nghttp(
            port: harness.managementPort, path: channelsPath, headers: [try bearer(harness)],
            body: createBody(policy: 1))
        #expect(lost.responses.isEmpty, "no answer leaves for a change that is not durable")
        let list = try await nghttp(port: harness.managementPort, path: allChannelsPath, headers: [try bearer(harness)])
        #expect(list.json?["channels"] as? [String] == [kept])
        await harness.shutdown()
        #expect(harness.simulator.managementStatistics().channelSaveFailures == 1)
    }

    /// The same cap with the channels kept in a file: creates are saved in groups, one file replace per batch
    /// of answers, so the 10,000 take seconds (one replace per create took 9 minutes).
    @Test func tenThousandChannelsKeptInAFile() async throws {
        let harness = try TestHarness(management: true, channelStateFile: "channels")
        defer { harness.shutdown() }
        let clock = ContinuousClock()
        let started = clock.now
        let run = try await nghttp(
            port: harness.managementPort, path: channelsPath, headers: [try bearer(harness)],
            body: createBody(policy: 1), count: 10_001)
        print("10,001 channel creates over one connection, saved to a file: \(clock.now - started)")
        #expect(run.responses.filter { $0.status == 201 }.count == 10_000)
        #expect(run.responses.filter { $0.status == 400 }.count == 1)
        let port = harness.port
        await harness.simulator.shutdown()
        let restarted = try harness.startSimulator(port: port, log: "restarted.jsonl", channelStateFile: "channels")
        #expect(restarted.channels.list(bundleID: Fixture.bundleID).count == 10_000)
    }

    /// The real cap: 10,000 channels over one connection, the next one refused; a delete makes room.
    @Test func tenThousandChannelsPerApp() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let clock = ContinuousClock()
        let started = clock.now
        let run = try await nghttp(
            port: harness.managementPort, path: channelsPath, headers: [try bearer(harness)],
            body: createBody(policy: 0), count: 10_001)
        let elapsed = clock.now - started
        #expect(run.responses.count == 10_001)
        #expect(run.responses.filter { $0.status == 201 }.count == 10_000)
        #expect(run.responses.filter { $0.status == 400 }.count == 1)
        #expect(run.body.contains(APNsReason.cannotCreateChannelConfig.rawValue))
        let ids = Set(run.responses.compactMap { $0.header("apns-channel-id") })
        #expect(ids.count == 10_000, "every id is distinct")
        print("10,001 channel creates over one connection: \(elapsed)")

        let list = try await nghttp(port: harness.managementPort, path: allChannelsPath, headers: [try bearer(harness)])
        let listed = try #require(list.json?["channels"] as? [String])
        #expect(Set(listed) == ids)
        let victim = try #require(listed.first)
        let deleted = try await nghttp(
            port: harness.managementPort, path: channelsPath, method: "DELETE",
            headers: [try bearer(harness), ("apns-channel-id", victim)])
        #expect(try deleted.response.status == 204)
        let again = try await createChannel(harness, policy: 1)
        #expect(again != victim)
        let refused = try await nghttp(
            port: harness.managementPort, path: channelsPath, headers: [try bearer(harness)],
            body: createBody(policy: 1))
        expectAnswer(refused, 400, .cannotCreateChannelConfig)
    }
}

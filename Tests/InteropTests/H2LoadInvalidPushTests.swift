// h2load sends requests APNs would refuse; our simulator must answer each with the documented status, and
// count each under the documented reason. nghttp (which prints frames and bodies) checks the exact bytes of
// one error response.
import FanfareCore
import FanfareSimulator
import FanfareTestSupport
import Testing

/// One way to get a request wrong, and what APNs answers.
struct InvalidPushCase: CustomTestStringConvertible, Sendable {
    let name: String
    let status: Int
    let reason: APNsReason
    /// Leave out `authorization`.
    var omitAuthorization = false
    /// `authorization` to send instead of a valid one.
    var authorization: String? = nil
    var topic = InteropValues.liveActivityTopic
    var priority = "10"
    var tokenHex = InteropValues.hexToken()
    /// Request body size; nil sends no body, which makes h2load use GET.
    var bodyBytes: Int? = InteropValues.liveActivityBody.utf8.count

    var testDescription: String { "\(name) → \(status) \(reason.rawValue)" }

    static let all: [InvalidPushCase] = [
        InvalidPushCase(name: "no authorization", status: 403, reason: .missingProviderToken, omitAuthorization: true),
        InvalidPushCase(
            name: "a JWT that is not signed by the team's key", status: 403, reason: .invalidProviderToken,
            authorization: "bearer eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJURUFNSUQwMDAxIn0.c2lnbmF0dXJl"),
        InvalidPushCase(
            name: "another app's topic", status: 400, reason: .topicDisallowed,
            topic: "com.example.other.push-type.liveactivity"),
        InvalidPushCase(
            name: "a topic with characters APNs never allows", status: 400, reason: .badTopic,
            topic: "com.example.fanfare_push"),
        InvalidPushCase(name: "priority 7", status: 400, reason: .badPriority, priority: "7"),
        InvalidPushCase(name: "a 2-byte token", status: 400, reason: .badDeviceToken, tokenHex: "abcd"),
        InvalidPushCase(name: "a 4097-byte body", status: 413, reason: .payloadTooLarge, bodyBytes: 4097),
        InvalidPushCase(name: "GET instead of POST", status: 405, reason: .methodNotAllowed, bodyBytes: nil),
    ]
}

@Suite("h2load → simulator, invalid pushes", .ownThread)
struct H2LoadInvalidPushTests {
    static let requests = 20

    @Test("each invalid request gets APNs' status and reason", arguments: InvalidPushCase.all)
    func invalidRequestsAreRefused(_ bad: InvalidPushCase) async throws {
        let h2load = try ExternalTool.h2load.require()
        let fixture = try InteropFixture()
        let simulator = try fixture.startSimulator()
        defer { simulator.shutdown() }

        // One stream at a time (-m 1): a connection that never gets a 200 keeps APNs' initial limit of one
        // stream, and h2load neither waits for SETTINGS before its first flight nor retries refused streams.
        var arguments = ["-n", String(Self.requests), "-c", "2", "-m", "1", "-t", "1"]
        if !bad.omitAuthorization {
            arguments += ["-H", "authorization: \(try bad.authorization ?? fixture.authorizationHeaderValue())"]
        }
        arguments += [
            "-H", "apns-topic: \(bad.topic)",
            "-H", "apns-push-type: liveactivity",
            "-H", "apns-priority: \(bad.priority)",
        ]
        if let bodyBytes = bad.bodyBytes {
            arguments += ["-d", try fixture.directory.write("body.json", InteropValues.body(ofSize: bodyBytes))]
        }
        arguments.append("https://127.0.0.1:\(simulator.boundAddress.port)/3/device/\(bad.tokenHex)")
        let run = try await runTool(h2load, arguments, in: fixture.directory)

        let summary = try #require(H2LoadSummary(parsing: run.standardOutput), "no h2load summary in:\n\(run)")
        #expect(summary.done == Self.requests, "\(run)")
        #expect(summary.errored == 0 && summary.timeout == 0, "\(summary)")
        #expect(summary.succeeded == 0, "h2load counts only 2xx/3xx as succeeded: \(summary)")
        #expect(summary.status4xx == Self.requests, "every case is a 4xx: \(summary)")
        #expect(summary.status2xx == 0 && summary.status3xx == 0 && summary.status5xx == 0, "\(summary)")

        let stats = simulator.finalStatistics()
        #expect(stats.count(of: bad.reason) == Self.requests, "simulator summary:\n\(stats.summary())")
        #expect(stats.count(status: bad.status) == Self.requests, "simulator summary:\n\(stats.summary())")
        #expect(stats.accepted == 0)
        #expect(stats.totalResponses == Self.requests, "simulator summary:\n\(stats.summary())")
    }

    @Test("a push without a provider token gets exactly {\"reason\":\"MissingProviderToken\"} as nghttp sees it")
    func missingProviderTokenBodyAndHeaders() async throws {
        let nghttp = try ExternalTool.nghttp.require()
        let fixture = try InteropFixture()
        let simulator = try fixture.startSimulator()
        defer { simulator.shutdown() }
        let body = try fixture.directory.write("payload.json", InteropValues.liveActivityBody)
        let url = "https://127.0.0.1:\(simulator.boundAddress.port)/3/device/\(InteropValues.hexToken())"

        let run = try await runTool(
            nghttp,
            [
                "-v", "-H", ":method: POST", "-d", body,
                "-H", "apns-topic: \(InteropValues.liveActivityTopic)",
                "-H", "apns-push-type: liveactivity",
                url,
            ], in: fixture.directory, timeout: .seconds(30))

        #expect(run.status == 0, "\(run)")
        let transcript = NghttpTranscript(parsing: run.standardOutput)
        #expect(transcript.status == 403, "\(run)")
        #expect(transcript.body == #"{"reason":"MissingProviderToken"}"#, "\(run)")
        #expect(transcript.header("content-type") == "application/json", "\(run)")
        let apnsID = try #require(transcript.header("apns-id"), "no apns-id header in:\n\(run)")
        let isUUID = Array(apnsID.utf8).withUnsafeBytes { APNsIDGenerator.isValidAPNsID($0) }
        #expect(isUUID, "apns-id '\(apnsID)' is not a canonical UUID")
        #expect(transcript.header("content-length") == nil || transcript.header("content-length") == "33")

        let stats = simulator.finalStatistics()
        #expect(stats.count(of: .missingProviderToken) == 1, "simulator summary:\n\(stats.summary())")
        #expect(stats.totalResponses == 1)
    }
}

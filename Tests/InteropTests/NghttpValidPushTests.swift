// nghttp (nghttp2's client CLI) sends one valid push to our simulator: the simulator must accept a request
// built by an independent client (with nghttp's PRIORITY frames and extra headers) and answer like APNs.
import FanfareCore
import FanfareSimulator
import FanfareTestSupport
import Testing

@Suite("nghttp → simulator", .ownThread)
struct NghttpValidPushTests {
    @Test("one valid POST gets :status 200 and echoes our apns-id")
    func validPushIsAccepted() async throws {
        let nghttp = try ExternalTool.nghttp.require()
        let fixture = try InteropFixture()
        let simulator = try fixture.startSimulator()
        defer { simulator.shutdown() }
        let body = try fixture.directory.write("payload.json", InteropValues.liveActivityBody)
        let url = "https://127.0.0.1:\(simulator.boundAddress.port)/3/device/\(InteropValues.hexToken())"
        let apnsID = "2d5b8e3a-1c4f-4e7a-9b0d-6f1e2a3b4c5d"

        let run = try await runTool(
            nghttp,
            [
                "-v", "-H", ":method: POST", "-d", body,
                "-H", "authorization: \(try fixture.authorizationHeaderValue())",
                "-H", "apns-topic: \(InteropValues.liveActivityTopic)",
                "-H", "apns-push-type: liveactivity",
                "-H", "apns-priority: 10",
                "-H", "apns-expiration: 0",
                "-H", "apns-id: \(apnsID)",
                url,
            ], in: fixture.directory, timeout: .seconds(30))

        #expect(run.status == 0, "\(run)")
        let transcript = NghttpTranscript(parsing: run.standardOutput)
        #expect(transcript.status == 200, "\(run)")
        #expect(transcript.header("apns-id") == apnsID, "APNs echoes the request's apns-id:\n\(run)")
        #expect(transcript.body.isEmpty, "a 200 from APNs has no body:\n\(run)")

        let stats = simulator.finalStatistics()
        #expect(stats.accepted == 1, "simulator summary:\n\(stats.summary())")
        #expect(stats.totalResponses == 1)
        #expect(stats.acceptedPayloadBytes == InteropValues.liveActivityBody.utf8.count)
    }

    @Test("a valid POST without apns-id gets a fresh canonical apns-id")
    func generatedMessageID() async throws {
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
                "-H", "authorization: \(try fixture.authorizationHeaderValue())",
                "-H", "apns-topic: \(InteropValues.liveActivityTopic)",
                "-H", "apns-push-type: liveactivity",
                url,
            ], in: fixture.directory, timeout: .seconds(30))

        let transcript = NghttpTranscript(parsing: run.standardOutput)
        #expect(transcript.status == 200, "\(run)")
        let apnsID = try #require(transcript.header("apns-id"), "no apns-id header in:\n\(run)")
        #expect(APNsIDGenerator.isValidAPNsID(apnsID), "apns-id '\(apnsID)' is not a canonical UUID")
        #expect(simulator.finalStatistics().accepted == 1)
    }
}

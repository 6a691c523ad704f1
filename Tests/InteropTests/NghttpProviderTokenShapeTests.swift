// Provider tokens shaped like APNSwift's (a widely used Swift APNs client, in production against APNs):
// pretty-printed JSON, `"typ":"JWT"`, `iat` as a decimal string and an extra `kid` claim. APNs accepts them,
// so the simulator does too; `strictProviderToken` keeps the RFC 7519 reading (403 InvalidProviderToken).
// Sent by nghttp, an independent HTTP/2 client, signed with the key the simulator trusts.
import FanfareSimulator
import FanfareCore
import FanfareTestSupport
import Foundation
import Testing
@testable import FanfareTLS

@Suite("nghttp → simulator, APNSwift-shaped provider tokens", .ownThread)
struct NghttpProviderTokenShapeTests {
    /// `bearer <jwt>` the way APNSwift 5/6 builds it (APNSAuthenticationTokenManager), issued now.
    private func apnsSwiftAuthorization(_ fixture: InteropFixture) throws -> String {
        let header = """
            {
                "alg": "ES256",
                "typ": "JWT",
                "kid": "\(InteropValues.keyID)"
            }
            """
        let payload = """
            {
                "iss": "\(InteropValues.teamID)",
                "iat": "\(Int(Date().timeIntervalSince1970))",
                "kid": "\(InteropValues.keyID)"
            }
            """
        let input = Base64.encode(header) + "." + Base64.encode(payload)
        return "bearer " + input + "." + Base64.encode(try fixture.signer.signature(over: input))
    }

    private func send(strict: Bool) async throws -> (NghttpTranscript, SimulatorStats, ToolRun) {
        let nghttp = try ExternalTool.nghttp.require()
        let fixture = try InteropFixture()
        var configuration = SimulatorConfiguration()
        configuration.strictProviderToken = strict
        let simulator = try fixture.startSimulator(configuration: configuration)
        defer { simulator.shutdown() }
        let body = try fixture.directory.write("payload.json", InteropValues.liveActivityBody)
        let run = try await runTool(
            nghttp,
            [
                "-v", "-H", ":method: POST", "-d", body,
                "-H", "authorization: \(try apnsSwiftAuthorization(fixture))",
                "-H", "apns-topic: \(InteropValues.liveActivityTopic)",
                "-H", "apns-push-type: liveactivity",
                "https://127.0.0.1:\(simulator.boundAddress.port)/3/device/\(InteropValues.hexToken())",
            ], in: fixture.directory, timeout: .seconds(30))
        #expect(run.status == 0, "\(run)")
        return (NghttpTranscript(parsing: run.standardOutput), simulator.finalStatistics(), run)
    }

    @Test("accepted by default, as APNs accepts it")
    func acceptedByDefault() async throws {
        let (transcript, stats, run) = try await send(strict: false)
        #expect(transcript.status == 200, "\(run)")
        #expect(stats.accepted == 1, "\(stats.summary())")
    }

    @Test("refused with InvalidProviderToken under --strict-provider-token")
    func refusedWhenStrict() async throws {
        let (transcript, stats, run) = try await send(strict: true)
        #expect(transcript.status == 403, "\(run)")
        #expect(transcript.body == #"{"reason":"InvalidProviderToken"}"#, "\(run)")
        #expect(stats.count(of: .invalidProviderToken) == 1)
    }
}

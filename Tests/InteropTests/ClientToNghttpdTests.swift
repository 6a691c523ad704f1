// Our client against nghttpd, nghttp2's reference server: a peer that knows nothing of APNs (it ignores
// apns-* headers and the JWT), advertises its own SETTINGS (100 concurrent streams) and answers with its
// own headers. Pushes must still come back as the right dispositions, and bursts must respect its stream
// limit (nghttpd refuses streams beyond it, which our client would have to resend).
import FanfareClient
import FanfareCore
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

@Suite("client → nghttpd", .ownThread)
struct ClientToNghttpdTests {
    /// Starts nghttpd with the fixture's certificate on a free loopback port.
    private func startNghttpd(_ fixture: InteropFixture, echoUpload: Bool) async throws -> NghttpdServer {
        let nghttpd = try ExternalTool.nghttpd.require()
        let documentRoot = fixture.directory.file("htdocs")
        try FileManager.default.createDirectory(atPath: documentRoot, withIntermediateDirectories: true)
        return try await NghttpdServer.start(
            executable: nghttpd, certificateFile: fixture.certificates.certificateFile,
            privateKeyFile: fixture.certificates.privateKeyFile, documentRoot: documentRoot, echoUpload: echoUpload,
            in: fixture.directory)
    }

    /// A client for 127.0.0.1:`port` that trusts the fixture's CA and signs with its provider key.
    private func makeClient(
        _ fixture: InteropFixture, port: UInt16, connections: Int = 1, resultHandler: PushResultHandler? = nil
    ) throws -> APNsClient {
        var configuration = ClientConfiguration(
            host: "127.0.0.1", port: port,
            tls: try TLSContext.client(caFile: fixture.certificates.caCertificateFile),
            providerTokens: ProviderTokenSource(signer: fixture.signer), topic: InteropValues.liveActivityTopic)
        configuration.connectionsPerWorker = connections
        configuration.requestTimeout = .seconds(20)
        configuration.connectTimeout = .seconds(5)
        return try APNsClient(configuration: configuration, resultHandler: resultHandler)
    }

    private func job(token: Int = 0, cookie: UInt64 = 0) throws -> PushJob {
        PushJob(
            token: try DeviceToken(hex: InteropValues.hexToken(seed: UInt8(truncatingIfNeeded: token))),
            payload: try PushPayload(InteropValues.liveActivityBody), cookie: cookie)
    }

    @Test("pushes echoed by nghttpd (200) come back delivered")
    func echoedPushesAreDelivered() async throws {
        let fixture = try InteropFixture()
        let server = try await startNghttpd(fixture, echoUpload: true)
        defer { server.stop() }
        let client = try makeClient(fixture, port: server.port)
        defer { client.shutdown() }

        for index in 0..<3 {
            let result = try await client.send(try job(token: index))
            #expect(
                result.disposition == .delivered,
                "push \(index): \(result.disposition); \(client.lastConnectionError ?? "")")
            #expect(result.resends == 0)
        }
        let stats = client.statistics
        #expect(stats.delivered == 3)
        #expect(stats.connectionsOpened == 1)
    }

    @Test("a burst of 500 pushes over 2 connections stays within nghttpd's 100 streams and all are delivered")
    func burstRespectsServerStreamLimit() async throws {
        let fixture = try InteropFixture()
        let server = try await startNghttpd(fixture, echoUpload: true)
        defer { server.stop() }
        let results = ResultCollector()
        let client = try makeClient(fixture, port: server.port, connections: 2, resultHandler: results)
        defer { client.shutdown() }

        for index in 0..<500 {
            try client.submit(try job(token: index, cookie: UInt64(index)))
        }
        let finished = await results.waitFor(count: 500, timeout: .seconds(60))
        #expect(finished, "only \(results.count) of 500 results arrived; client: \(client.statistics)")

        let all = results.all
        #expect(Set(all.map(\.cookie)) == Set((0..<500).map(UInt64.init)), "every push ends in exactly one result")
        let undelivered = all.filter { !$0.isDelivered }
        #expect(
            undelivered.isEmpty, "not delivered: \(undelivered.prefix(5).map { "\($0.cookie): \($0.disposition)" })")
        // A stream beyond nghttpd's limit would be refused (REFUSED_STREAM) and re-sent by the client.
        #expect(all.allSatisfy { $0.resends == 0 }, "pushes were re-sent: the client exceeded the stream limit")
        let stats = client.statistics
        #expect(stats.delivered == 500)
        #expect(stats.resends == 0)
        #expect(stats.failed == 0)
        #expect(stats.connectionsOpened == 2)
    }

    @Test("a 404 from nghttpd (no such file, no APNs reason body) is a rejection to fix configuration")
    func notFoundIsAConfigurationProblem() async throws {
        let fixture = try InteropFixture()
        let server = try await startNghttpd(fixture, echoUpload: false)
        defer { server.stop() }
        let client = try makeClient(fixture, port: server.port)
        defer { client.shutdown() }

        let result = try await client.send(try job())
        guard case .rejected(let status, let reason, let rawReason, let action, let timestamp) = result.disposition
        else {
            Issue.record("expected a 404 rejection, got \(result.disposition); \(client.lastConnectionError ?? "")")
            return
        }
        #expect(status == 404)
        #expect(reason == nil, "nghttpd's HTML body is not an APNs reason")
        #expect(rawReason == nil, "no APNs reason string expected, got '\(rawReason ?? "")'")
        #expect(result.disposition.description.contains("(no reason)"))
        #expect(action == .fixConfiguration)
        #expect(timestamp == nil)
        #expect(result.disposition.action == .fixConfiguration)
        #expect(result.resends == 0)
    }
}

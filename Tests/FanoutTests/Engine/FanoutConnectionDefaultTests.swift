// The engine autoscales its connections unless the caller chose a count (issue 13: "the engine uses it by
// default"); a client made directly keeps a fixed count.
import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Testing

@Suite(.ownThread) struct FanoutConnectionDefaultTests {
    private static func client() -> ClientConfiguration {
        ClientConfiguration(
            host: "127.0.0.1", port: 9, tls: SharedKeys.shared.clientTLS,
            providerTokens: ProviderTokenSource(signer: SharedKeys.shared.signer), topic: Fixture.topic)
    }

    @Test func theEngineAutoscalesUnlessACountWasChosen() throws {
        let plain = Self.client()
        #expect(plain.autoscaling == nil && !plain.connectionCountChosen, "a client alone keeps its fixed count")
        let engine = FanoutConfiguration(client: plain, bundleID: Fixture.bundleID)
        #expect(engine.client.autoscaling == .standard)
        try engine.client.validate()

        var fixed = Self.client()
        fixed.connectionsPerWorker = 3
        #expect(FanoutConfiguration(client: fixed, bundleID: Fixture.bundleID).client.autoscaling == nil)

        var off = Self.client()
        off.autoscaling = nil  // chosen: a fixed count (1)
        #expect(FanoutConfiguration(client: off, bundleID: Fixture.bundleID).client.autoscaling == nil)

        var bounded = Self.client()
        bounded.autoscaling = ConnectionAutoscaling(minimumConnections: 1, maximumConnections: 4)
        #expect(
            FanoutConfiguration(client: bounded, bundleID: Fixture.bundleID).client.autoscaling?.maximumConnections == 4
        )
    }
}

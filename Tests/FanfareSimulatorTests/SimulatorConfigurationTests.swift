import FanfareCore
import FanfareTestSupport
import Testing
@testable import FanfareSimulator

@Suite(.ownThread) struct SimulatorConfigurationTests {
    @Test func defaultsMatchTheSpecification() throws {
        let configuration = SimulatorConfiguration()
        try configuration.validate()
        #expect(configuration.bundleID == "com.example.fanfare")
        #expect(configuration.initialMaxConcurrentStreams == 1)
        #expect(configuration.maxConcurrentStreams == 1000)
        #expect(configuration.headerTableSize == 4096)
        #expect(configuration.maxHeaderListSize == 8000)
        #expect(configuration.maxPayloadBytes == 4096)
        #expect(configuration.broadcastMaxPayloadBytes == 5120)
        #expect(configuration.tokenMaxAge == 3600)
        #expect(configuration.minTokenRefreshInterval == 1200)
        #expect(configuration.requestBodyCapacity == 5121)
        #expect(configuration.environment == .production)
    }

    @Test func invalidSettingsNameTheField() {
        func problem(_ change: (inout SimulatorConfiguration) -> Void) -> String? {
            var configuration = SimulatorConfiguration()
            change(&configuration)
            do {
                try configuration.validate()
                return nil
            } catch {
                return error.description
            }
        }
        #expect(problem { $0.bundleID = "com example" }?.contains("bundleID") == true)
        #expect(problem { $0.maxConcurrentStreams = 0 }?.contains("maxConcurrentStreams") == true)
        #expect(
            problem {
                $0.faults = [
                    FaultRule(reason: .shutdown, probability: 0.7),
                    FaultRule(reason: .tooManyRequests, probability: 0.7),
                ]
            }?
            .contains("add up") == true)
        #expect(problem { $0.perTokenRateTableCapacity = 1000 }?.contains("power of two") == true)
        #expect(problem { $0.latency = .uniform(minNanoseconds: 5, maxNanoseconds: 1) }?.contains("latency") == true)
        #expect(problem { $0.malformedPayloadReason = .shutdown }?.contains("400") == true)
        #expect(problem { $0.maxFrameSize = 100 }?.contains("maxFrameSize") == true)
        #expect(problem { $0.keyID = "" }?.contains("keyID") == true)
    }

    @Test func faultRulesParse() throws {
        #expect(
            try FaultRule(parsing: "TooManyRequests:0.01") == FaultRule(reason: .tooManyRequests, probability: 0.01))
        #expect(try FaultRule(parsing: "Unregistered:1") == FaultRule(reason: .unregistered, probability: 1))
        #expect(throws: SimulatorConfigurationError.unknownFaultReason("TooMany")) {
            try FaultRule(parsing: "TooMany:0.1")
        }
        #expect(throws: SimulatorConfigurationError.badFaultRule("Shutdown:2")) { try FaultRule(parsing: "Shutdown:2") }
        #expect(throws: SimulatorConfigurationError.badFaultRule("Shutdown")) { try FaultRule(parsing: "Shutdown") }
    }

    @Test func providerTokenPolicyCarriesTheSettings() {
        var configuration = SimulatorConfiguration()
        configuration.teamID = nil
        configuration.wedgeAfterExpiredToken = true
        configuration.maxTokenClockSkew = 5
        let policy = configuration.providerTokenPolicy
        #expect(policy.teamID == nil)
        #expect(policy.keyID == "KEYID00001")
        #expect(policy.wedgeAfterExpiredToken)
        #expect(policy.maxClockSkew == 5)
    }
}

@Suite(.ownThread) struct LatencyModelTests {
    @Test func noneAndFixed() {
        var random = SimulatorRandom(seed: 1)
        #expect(LatencyModel.none.sample(using: &random) == 0)
        #expect(LatencyModel.fixed(nanoseconds: 1_000_000).sample(using: &random) == 1_000_000)
    }

    @Test func uniformStaysWithinBounds() {
        var random = SimulatorRandom(seed: 2)
        let model = LatencyModel.uniform(minNanoseconds: 100, maxNanoseconds: 200)
        let samples = (0..<5000).map { _ in model.sample(using: &random) }
        #expect(samples.allSatisfy { (100...200).contains($0) })
        #expect(samples.contains(100) && samples.contains(200))
    }

    @Test func longTailHasTheConfiguredMedianAndP99() {
        var random = SimulatorRandom(seed: 3)
        let model = LatencyModel.longTail(medianNanoseconds: 2_000_000, p99Nanoseconds: 20_000_000)
        let samples = (0..<20_000).map { _ in model.sample(using: &random) }.sorted()
        let median = Double(samples[samples.count / 2])
        let p99 = Double(samples[samples.count * 99 / 100])
        #expect(abs(median - 2_000_000) / 2_000_000 < 0.05)
        #expect(abs(p99 - 20_000_000) / 20_000_000 < 0.15)
        #expect(samples.last! <= 200_000_000)  // capped at 10 × p99
        #expect(samples.first! > 0)
    }

    @Test func samplesAreReproducibleFromTheSeed() {
        var a = SimulatorRandom(seed: 9, stream: 1)
        var b = SimulatorRandom(seed: 9, stream: 1)
        var c = SimulatorRandom(seed: 9, stream: 2)
        let model = LatencyModel.longTail(medianNanoseconds: 1000, p99Nanoseconds: 5000)
        let first = (0..<100).map { _ in model.sample(using: &a) }
        #expect(first == (0..<100).map { _ in model.sample(using: &b) })
        #expect(first != (0..<100).map { _ in model.sample(using: &c) })
    }
}

@Suite(.ownThread) struct ConnectionStreamPolicyTests {
    @Test func theFirstAcceptedPushRaisesTheStreamLimitOnce() {
        var policy = ConnectionStreamPolicy(configuration: SimulatorConfiguration())
        #expect(policy.advertisedMaxConcurrentStreams == 1)
        #expect(policy.record(.reject(.badDeviceToken, timestamp: nil)) == nil)
        #expect(policy.record(.accept) == 1000)
        #expect(policy.record(.accept) == nil)
        #expect(policy.record(.reject(.badDeviceToken, timestamp: nil)) == nil)  // chaos mode off
        #expect(policy.advertisedMaxConcurrentStreams == 1000)
    }

    @Test func chaosModeDropsToOneOnRejectionsExcept410() {
        var configuration = SimulatorConfiguration()
        configuration.dropStreamsToOneAfterRejection = true
        configuration.maxConcurrentStreams = 500
        var policy = ConnectionStreamPolicy(configuration: configuration)
        #expect(policy.record(.accept) == 500)
        #expect(policy.record(.reject(.unregistered, timestamp: 1)) == nil)
        #expect(policy.record(.reject(.badDeviceToken, timestamp: nil)) == 1)
        #expect(policy.record(.reject(.badDeviceToken, timestamp: nil)) == nil)
        #expect(policy.record(.accept) == 500)
    }

    @Test func goAwayAfterTheConfiguredNumberOfStreams() {
        var configuration = SimulatorConfiguration()
        configuration.goAwayAfterStreams = 3
        var policy = ConnectionStreamPolicy(configuration: configuration)
        for _ in 0..<2 { _ = policy.record(.accept) }
        #expect(!policy.shouldGoAway)
        _ = policy.record(.reject(.badTopic, timestamp: nil))
        #expect(policy.shouldGoAway)
        var never = ConnectionStreamPolicy(configuration: SimulatorConfiguration())
        for _ in 0..<100 { _ = never.record(.accept) }
        #expect(!never.shouldGoAway)
    }
}

@Suite(.ownThread) struct MessageIDWriterTests {
    @Test func writesCanonicalLowercaseVersion4UUIDs() {
        var random = SimulatorRandom(seed: 5)
        var seen = Set<String>()
        for _ in 0..<200 {
            var buffer = [UInt8](repeating: 0, count: MessageIDWriter.byteCount)
            buffer.withUnsafeMutableBytes { MessageIDWriter.writeRandomUUID(into: $0, using: &random) }
            let valid = buffer.withUnsafeBytes { HeaderSyntax.isCanonicalUUID($0, requireLowercase: true) }
            #expect(valid)
            let text = String(decoding: buffer, as: UTF8.self)
            #expect(Array(text)[14] == "4")
            #expect("89ab".contains(Array(text)[19]))
            seen.insert(text)
        }
        #expect(seen.count == 200)
    }
}

@Suite(.ownThread) struct LatencyParsingTests {
    @Test func parsesEachModel() throws {
        #expect(try LatencyModel(parsing: "none") == LatencyModel.none)
        #expect(try LatencyModel(parsing: "fixed:5ms") == .fixed(nanoseconds: 5_000_000))
        #expect(
            try LatencyModel(parsing: "uniform:250us-1.5ms")
                == .uniform(minNanoseconds: 250_000, maxNanoseconds: 1_500_000))
        #expect(
            try LatencyModel(parsing: "longtail:2ms-40ms")
                == .longTail(medianNanoseconds: 2_000_000, p99Nanoseconds: 40_000_000))
        #expect(try LatencyModel(parsing: "fixed:1s") == .fixed(nanoseconds: 1_000_000_000))
    }

    @Test(arguments: [
        "", "fixed", "fixed:5", "fixed:5m", "uniform:5ms", "uniform:5ms-1ms", "longtail:5ms-1ms", "gauss:1ms-2ms",
        "fixed:-1ms",
    ])
    func rejectsBadSpellings(_ text: String) {
        #expect(throws: SimulatorConfigurationError.self) { try LatencyModel(parsing: text) }
    }
}

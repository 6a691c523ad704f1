import FanfareCore
import FanfareTestSupport
import Testing
@testable import FanfareSimulator

/// The injected faults' spellings, validation and windows (what `fanfare simulate` flags turn into).
@Suite(.ownThread) struct FaultInjectionRuleTests {
    @Test func burstsParseInRequestsOrDurations() throws {
        #expect(
            try FaultBurst(parsing: "ServiceUnavailable:1:200/2000")
                == FaultBurst(
                    rule: FaultRule(reason: .serviceUnavailable, probability: 1), length: .requests(200),
                    period: .requests(2000)))
        #expect(
            try FaultBurst(parsing: "TooManyRequests:0.5:100ms/1s")
                == FaultBurst(
                    rule: FaultRule(reason: .tooManyRequests, probability: 0.5), length: .nanoseconds(100_000_000),
                    period: .nanoseconds(1_000_000_000)))
    }

    @Test(arguments: [
        "ServiceUnavailable:1", "ServiceUnavailable:1:200", "ServiceUnavailable:1:200/", "ServiceUnavailable:1:/2000",
        "ServiceUnavailable:1:200/2s", "ServiceUnavailable:1:2s/200", "ServiceUnavailable:1:abc/def",
        "ServiceUnavailable:2:1/2",
        "ServiceUnavailable:-0.1:1/2", "ServiceUnavailable:nan:1/2",
    ])
    func badBurstSpellingsAreClearErrors(_ text: String) {
        do {
            _ = try FaultBurst(parsing: text)
            Issue.record("'\(text)' parsed")
        } catch {
            #expect(error.description.contains(text) || error.description.contains("fault rule"), "\(error)")
        }
    }

    @Test(arguments: ["Service:1:1/2", "TooMany:0.5:10ms/1s"])
    func unknownBurstReasonsAreNamed(_ text: String) {
        #expect(throws: SimulatorConfigurationError.unknownFaultReason(String(text.prefix { $0 != ":" }))) {
            try FaultBurst(parsing: text)
        }
    }

    @Test func burstWindowsMustFitTheirPeriod() {
        for text in [
            "ServiceUnavailable:1:300/200", "ServiceUnavailable:1:0/200", "ServiceUnavailable:1:2s/1s",
            "ServiceUnavailable:1:0ms/1s",
        ] {
            #expect(throws: SimulatorConfigurationError.self, "\(text)") { try FaultBurst(parsing: text) }
        }
        var configuration = SimulatorConfiguration()
        configuration.faultBursts = [
            FaultBurst(rule: FaultRule(reason: .shutdown, probability: 1), length: .requests(5), period: .requests(2))
        ]
        #expect(throws: SimulatorConfigurationError.self) { try configuration.validate() }
        configuration.faultBursts = [
            FaultBurst(
                rule: FaultRule(reason: .shutdown, probability: 1), length: .requests(5), period: .nanoseconds(10))
        ]
        #expect(throws: SimulatorConfigurationError.self) { try configuration.validate() }
    }

    @Test func resetsAndHeldResponsesParse() throws {
        #expect(
            try ConnectionResetRule(parsing: "0.5:1000") == ConnectionResetRule(probability: 0.5, afterRequests: 1000))
        #expect(
            try HeldResponseRule(parsing: "0.001:30s")
                == HeldResponseRule(probability: 0.001, delayNanoseconds: 30_000_000_000))
        for text in ["0.5", "1.5:10", "0.5:0", "0.5:-3", "x:10", "0.5:10:1"] {
            #expect(throws: SimulatorConfigurationError.self, "\(text)") { try ConnectionResetRule(parsing: text) }
        }
        for text in ["0.5", "2:1s", "0.5:0s", "0.5:10", "0.5:-1s", "0.1:1s:2"] {
            #expect(throws: SimulatorConfigurationError.self, "\(text)") { try HeldResponseRule(parsing: text) }
        }
        do {
            _ = try HeldResponseRule(parsing: "0.5")
        } catch {
            #expect(error.description.hasPrefix("held responses '0.5' is not probability:duration"), "\(error)")
        }
    }

    @Test func configurationValidatesTheNewKnobs() {
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
        #expect(problem { $0.refusedStreamProbability = 1.5 }?.contains("refusedStreamProbability") == true)
        #expect(
            problem { $0.connectionReset = ConnectionResetRule(probability: 0.5, afterRequests: 0) }?.contains(
                "connectionReset") == true)
        #expect(
            problem { $0.heldResponses = HeldResponseRule(probability: 0.5, delayNanoseconds: 0) }?.contains(
                "heldResponses") == true)
        #expect(problem { $0.maxConcurrentStreams = 1 << 21 }?.contains("maxConcurrentStreams") == true)
        #expect(problem { $0.headerTableSize = 1 << 33 }?.contains("headerTableSize") == true)
        #expect(problem { $0.refusedStreamProbability = 0.3 } == nil)
    }

    // MARK: Bursts in the validator

    private func decisions(
        _ bursts: [FaultBurst], faults: [FaultRule] = [], count: Int, step: Int64 = 0
    ) -> [SimulatorDecision] {
        var configuration = SimulatorConfiguration()
        configuration.faultBursts = bursts
        configuration.faults = faults
        var validator = RequestValidator(configuration: configuration)
        let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: FakeVerifier())
        let head = TestRequest.valid().head()
        return (0..<count).map { index in
            let now = SimulatorInstant(nanosecondsSinceEpoch: Fixtures.now.nanosecondsSinceEpoch + Int64(index) * step)
            return validator.decide(head, auth: auth, now: now)
        }
    }

    @Test func aRequestBurstFiresInTheLastPartOfEachPeriod() {
        let burst = FaultBurst(
            rule: FaultRule(reason: .serviceUnavailable, probability: 1), length: .requests(3), period: .requests(10))
        let result = decisions([burst], count: 30)
        let rejected = result.indices.filter { result[$0] != .accept }
        #expect(rejected == [7, 8, 9, 17, 18, 19, 27, 28, 29])
        #expect(rejected.allSatisfy { result[$0] == .reject(.serviceUnavailable, timestamp: nil) })
    }

    @Test func aTimeBurstFiresInItsWindowOfTime() {
        // One request every 10 ms; 30 ms bursts every 100 ms, counted from the first request.
        let burst = FaultBurst(
            rule: FaultRule(reason: .tooManyRequests, probability: 1), length: .nanoseconds(30_000_000),
            period: .nanoseconds(100_000_000))
        let result = decisions([burst], count: 25, step: 10_000_000)
        let rejected = result.indices.filter { result[$0] != .accept }
        #expect(rejected == [7, 8, 9, 17, 18, 19])
    }

    @Test func burstsComeBeforeSteadyFaultsAndAddUp() {
        let serviceUnavailable = FaultBurst(
            rule: FaultRule(reason: .serviceUnavailable, probability: 1), length: .requests(5), period: .requests(10))
        let internalError = FaultBurst(
            rule: FaultRule(reason: .internalServerError, probability: 1), length: .requests(2), period: .requests(4))
        let result = decisions(
            [serviceUnavailable, internalError], faults: [FaultRule(reason: .tooManyRequests, probability: 1)],
            count: 10)
        // The steady 429 answers everything outside a burst; overlapping bursts: the first listed wins.
        #expect(
            result.map(\.reason) == [
                .tooManyRequests, .tooManyRequests, .internalServerError, .internalServerError, .tooManyRequests,
                .serviceUnavailable, .serviceUnavailable, .serviceUnavailable, .serviceUnavailable, .serviceUnavailable,
            ])
    }

    @Test func aHalfProbabilityBurstRejectsAboutHalfOfItsWindow() {
        let burst = FaultBurst(
            rule: FaultRule(reason: .internalServerError, probability: 0.5), length: .requests(1000),
            period: .requests(2000))
        let result = decisions([burst], count: 20_000)
        let inWindow = result.indices.filter { $0 % 2000 >= 1000 }
        let outside = result.indices.filter { $0 % 2000 < 1000 }
        #expect(outside.allSatisfy { result[$0] == .accept })
        let rejected = inWindow.filter { result[$0] != .accept }.count
        #expect((4500...5500).contains(rejected), "\(rejected) of 10000")  // expected 5000
    }
}

import FanfareCore
import FanfareTestSupport
import Testing
@testable import FanfareSimulator

/// One way to break a device push, in the validator's documented order.
struct Violation: CustomStringConvertible, Sendable {
    let name: String
    /// The part of the request it changes; two violations of the same part cannot be combined.
    let part: String
    let expected: APNsReason
    let apply: @Sendable (inout TestRequest) -> Void

    var description: String { name }
}

/// The validator's order for `/3/device/…` (see `RequestValidator`), one violation per rule branch.
/// `unknownToken` relies on `orderConfiguration.knownTokens`.
let deviceViolations: [Violation] = [
    Violation(name: "apns-id not a UUID", part: "apns-id", expected: .badMessageId) { $0.set("apns-id", "not-a-uuid") },
    Violation(name: "method GET", part: "method", expected: .methodNotAllowed) { $0.set(":method", "GET") },
    Violation(name: "path /3/device/", part: "path", expected: .missingDeviceToken) { $0.set(":path", "/3/device/") },
    Violation(name: "path /3/other", part: "path", expected: .badPath) {
        $0.set(":path", "/3/other/\(Fixtures.token32)")
    },
    Violation(name: "no apns-topic", part: "topic", expected: .missingTopic) { $0.remove("apns-topic") },
    Violation(name: "empty apns-topic", part: "topic", expected: .missingTopic) { $0.set("apns-topic", "") },
    Violation(name: "topic with a space", part: "topic", expected: .badTopic) {
        $0.set("apns-topic", "com.example fanfare")
    },
    Violation(name: "foreign topic", part: "topic", expected: .topicDisallowed) {
        $0.set("apns-topic", "com.other.app.push-type.liveactivity")
    },
    Violation(name: "unknown suffix", part: "topic", expected: .topicDisallowed) {
        $0.set("apns-topic", "com.example.fanfare.nope")
    },
    Violation(name: "content-type twice", part: "duplicate", expected: .duplicateHeaders) {
        $0.append("content-type", "text/plain")
    },
    Violation(name: "collapse id 65 bytes", part: "collapse", expected: .badCollapseId) {
        $0.set("apns-collapse-id", String(repeating: "c", count: 65))
    },
    Violation(name: "priority 7", part: "priority", expected: .badPriority) { $0.set("apns-priority", "7") },
    Violation(name: "unknown push type", part: "push-type", expected: .invalidPushType) {
        $0.set("apns-push-type", "banana")
    },
    Violation(name: "no push type", part: "push-type", expected: .invalidPushType) { $0.remove("apns-push-type") },
    Violation(name: "alert push type on LA topic", part: "push-type", expected: .deviceTokenNotForTopic) {
        $0.set("apns-push-type", "alert")
    },
    Violation(name: "expiration -1", part: "expiration", expected: .badExpirationDate) {
        $0.set("apns-expiration", "-1")
    },
    Violation(name: "token 31 bytes", part: "path", expected: .badDeviceToken) {
        $0.set(":path", "/3/device/\(Fixtures.hexToken(bytes: 31))")
    },
    Violation(name: "no authorization", part: "auth", expected: .missingProviderToken) { $0.remove("authorization") },
    Violation(name: "unknown JWT", part: "auth", expected: .invalidProviderToken) {
        $0.set("authorization", "bearer x.y.z")
    },
    Violation(name: "empty body", part: "body", expected: .payloadEmpty) { $0.body = "" },
    Violation(name: "4097-byte body", part: "body", expected: .payloadTooLarge) {
        $0.body = Fixtures.body(ofSize: 4097)
    },
    Violation(name: "body without aps", part: "body", expected: .badRequestPayload) { $0.body = #"{"apx":{}}"# },
    Violation(name: "unknown token", part: "path", expected: .unregistered) {
        $0.set(":path", "/3/device/\(Fixtures.hexToken(bytes: 32, seed: 9))")
    },
]

/// Known tokens on, and a malformed-JSON reason distinct from `PayloadEmpty` so both rules are visible.
let orderConfiguration: SimulatorConfiguration = {
    var configuration = SimulatorConfiguration()
    configuration.knownTokens = [Fixtures.token32]
    configuration.malformedPayloadReason = .badRequestPayload
    return configuration
}()

struct ViolationPair: CustomStringConvertible, Sendable {
    let first: Violation
    let second: Violation
    var description: String { "\(first.name) + \(second.name)" }
}

/// Every combinable pair (earlier rule, later rule).
let orderedPairs: [ViolationPair] = {
    var pairs: [ViolationPair] = []
    for (i, first) in deviceViolations.enumerated() {
        for second in deviceViolations[(i + 1)...] where second.part != first.part {
            pairs.append(ViolationPair(first: first, second: second))
        }
    }
    return pairs
}()

@Suite(.ownThread) struct RequestValidatorOrderTests {
    @Test func theBaselineRequestIsAccepted() {
        #expect(decide(.valid(), configuration: orderConfiguration) == .accept)
    }

    @Test(arguments: deviceViolations)
    func eachViolationAloneGivesItsReason(_ violation: Violation) {
        var request = TestRequest.valid()
        violation.apply(&request)
        #expect(decide(request, configuration: orderConfiguration).reason == violation.expected)
    }

    /// E.g. a request that is both BadMessageId and BadPath gets BadMessageId.
    @Test(arguments: orderedPairs)
    func theEarlierRuleWins(_ pair: ViolationPair) {
        var request = TestRequest.valid()
        pair.second.apply(&request)
        pair.first.apply(&request)
        #expect(decide(request, configuration: orderConfiguration).reason == pair.first.expected)
        // Applying them the other way round changes nothing: order comes from the validator, not the request.
        var reversed = TestRequest.valid()
        pair.first.apply(&reversed)
        pair.second.apply(&reversed)
        #expect(decide(reversed, configuration: orderConfiguration).reason == pair.first.expected)
    }

    @Test func badMessageIDBeatsBadPath() {
        var request = TestRequest.valid()
        request.set("apns-id", "nope")
        request.set(":path", "/nope")
        #expect(decide(request) == .reject(.badMessageId, timestamp: nil))
    }
}

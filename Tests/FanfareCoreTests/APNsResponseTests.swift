import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("APNs responses", .ownThread)
struct APNsResponseTests {
    static func parse(_ json: String) -> APNsErrorBody? {
        Array(json.utf8).withUnsafeBytes { APNsErrorBody.parse($0) }
    }

    @Test("parses reason and timestamp")
    func parsesBody() {
        #expect(
            Self.parse(#"{"reason":"Unregistered","timestamp":1735689600000}"#)
                == APNsErrorBody(reason: "Unregistered", timestamp: 1_735_689_600_000))
        #expect(Self.parse(#"{"reason":"BadDeviceToken"}"#) == APNsErrorBody(reason: "BadDeviceToken"))
        #expect(
            Self.parse(" \n{ \"timestamp\" : -5 ,\t\"reason\" :\r\"Shutdown\" } \n")
                == APNsErrorBody(reason: "Shutdown", timestamp: -5))
        #expect(Self.parse("{}") == APNsErrorBody())
        #expect(Self.parse(#"{"reason":"Unregistered"}"#)?.knownReason == .unregistered)
        #expect(Self.parse(#"{"reason":"SomethingNew"}"#)?.knownReason == nil)
    }

    @Test("ignores other keys, whatever their values")
    func ignoresOtherKeys() {
        let json =
            #"{"id":"x","nested":{"reason":"Fake","a":[1,2,{"b":null}]},"#
            + #""reason":"BadTopic","n":-1.5e3,"t":true}"#
        #expect(Self.parse(json) == APNsErrorBody(reason: "BadTopic"))
    }

    @Test("resolves escapes in keys and values")
    func escapes() {
        #expect(Self.parse(#"{"reason":"Bad\u0044evice\u0054oken"}"#)?.knownReason == .badDeviceToken)
        #expect(Self.parse(#"{"re\u0061son":"Forbidden"}"#) == APNsErrorBody(reason: "Forbidden"))
        #expect(Self.parse(#"{"reason":"a\"b\\c\n\ud83d\ude00"}"#)?.reason == "a\"b\\c\n😀")
    }

    @Test(
        "returns nil for malformed or mistyped bodies",
        arguments: [
            "", " ", "{", "}", "[]", "null", #""reason""#, #"{"reason":"x""#, #"{"reason":"x",}"#,
            #"{"reason" "x"}"#, #"{reason:"x"}"#, #"{"reason":"x"} x"#, #"{"reason":"x"}{}"#,
            #"{"reason":1}"#, #"{"reason":null}"#, #"{"reason":["x"]}"#, #"{"timestamp":"1"}"#,
            #"{"timestamp":1.5}"#, #"{"timestamp":1e3}"#, #"{"timestamp":9223372036854775808}"#,
            #"{"timestamp":01}"#, #"{"reason":"bad \u12"}"#, "{\"reason\":\"tab\there\"}",
            #"{"other":tru}"#,
        ])
    func rejectsMalformed(json: String) {
        #expect(Self.parse(json) == nil)
    }

    @Test("nesting counts the body's own object, as the validator does")
    func nestingLimit() {
        // Found by Fuzzing/FuzzJSON: 65 levels passed the parser but not JSONValidator (limit 64).
        func nested(_ levels: Int) -> String {
            String(repeating: #"{"a":"#, count: levels) + "1" + String(repeating: "}", count: levels)
        }
        #expect(Self.parse(nested(JSONValidator.maximumDepth)) == APNsErrorBody())
        #expect(Self.parse(nested(JSONValidator.maximumDepth + 1)) == nil)
        let deepest = Array(nested(JSONValidator.maximumDepth).utf8)
        #expect(deepest.withUnsafeBytes { JSONValidator.validate($0) } == nil)
    }

    @Test("timestamp covers the whole Int64 range")
    func timestampRange() {
        #expect(Self.parse(#"{"timestamp":9223372036854775807}"#)?.timestamp == Int64.max)
        #expect(Self.parse(#"{"timestamp":-9223372036854775808}"#)?.timestamp == Int64.min)
        #expect(Self.parse(#"{"timestamp":-9223372036854775809}"#) == nil)
        #expect(Self.parse(#"{"timestamp":0}"#)?.timestamp == 0)
    }

    /// Every documented reason with the status APNs pairs it with and what the sender must do.
    static let reasonTable: [APNsReason: (status: Int, action: PushAction)] = [
        .badCollapseId: (400, .fixConfiguration),
        .badDeviceToken: (400, .dropToken),
        .badExpirationDate: (400, .fixConfiguration),
        .badMessageId: (400, .fixConfiguration),
        .badPriority: (400, .fixConfiguration),
        .badTopic: (400, .fixConfiguration),
        .deviceTokenNotForTopic: (400, .dropToken),
        .duplicateHeaders: (400, .fixConfiguration),
        .idleTimeout: (400, .retryLater),
        .invalidPushType: (400, .fixConfiguration),
        .missingDeviceToken: (400, .fixConfiguration),
        .missingTopic: (400, .fixConfiguration),
        .payloadEmpty: (400, .discardMessage),
        .topicDisallowed: (400, .fixConfiguration),
        .featureNotEnabled: (400, .fixConfiguration),
        .missingChannelId: (400, .fixConfiguration),
        .badChannelId: (400, .fixConfiguration),
        .channelNotRegistered: (400, .fixConfiguration),
        .badRequestParams: (400, .fixConfiguration),
        .badRequestPayload: (400, .fixConfiguration),
        .missingPushType: (400, .fixConfiguration),
        .cannotCreateChannelConfig: (400, .fixConfiguration),
        .badCertificate: (403, .fixConfiguration),
        .badCertificateEnvironment: (403, .fixConfiguration),
        .expiredProviderToken: (403, .refreshProviderToken),
        .forbidden: (403, .fixConfiguration),
        .invalidProviderToken: (403, .fixConfiguration),
        .missingProviderToken: (403, .fixConfiguration),
        .unrelatedKeyIdInToken: (403, .fixConfiguration),
        .badEnvironmentKeyInToken: (403, .fixConfiguration),
        .badEnvironmentKeyIdInToken: (403, .fixConfiguration),
        .topicMismatch: (403, .fixConfiguration),
        .badPath: (404, .fixConfiguration),
        .methodNotAllowed: (405, .fixConfiguration),
        .expiredToken: (410, .dropToken),
        .unregistered: (410, .dropToken),
        .payloadTooLarge: (413, .discardMessage),
        .tooManyProviderTokenUpdates: (429, .fixConfiguration),
        .tooManyRequests: (429, .retryLater),
        .internalServerError: (500, .retryLater),
        .serviceUnavailable: (503, .retryOnNewConnection),
        .shutdown: (503, .retryOnNewConnection),
    ]

    @Test("the reason table covers every APNsReason case")
    func tableIsComplete() {
        #expect(Self.reasonTable.count == APNsReason.allCases.count)
    }

    @Test("classifies every documented reason", arguments: APNsReason.allCases)
    func classifiesReason(reason: APNsReason) throws {
        let expected = try #require(Self.reasonTable[reason])
        #expect(reason.status == expected.status)
        #expect(reason.action == expected.action)
        // Through the real parser, as the client sees it.
        let body = try #require(Self.parse(#"{"reason":"\#(reason.rawValue)"}"#))
        let outcome = PushOutcome.classify(status: expected.status, body: body)
        #expect(
            outcome
                == .failed(
                    status: expected.status, reason: reason, rawReason: reason.rawValue, action: expected.action,
                    timestamp: nil))
        #expect(outcome.action == expected.action)
        #expect(APNsReason(reasonString: reason.rawValue) == reason)
    }

    @Test(
        "unknown reasons fall back to the status",
        arguments: [
            (400, PushAction.fixConfiguration), (403, .fixConfiguration), (404, .fixConfiguration),
            (405, .fixConfiguration), (410, .dropToken), (413, .discardMessage), (429, .retryLater),
            (500, .retryLater), (502, .retryOnNewConnection), (503, .retryOnNewConnection), (599, .retryLater),
            (418, .fixConfiguration), (302, .fixConfiguration),
        ])
    func unknownReason(status: Int, action: PushAction) {
        let outcome = PushOutcome.classify(status: status, body: APNsErrorBody(reason: "BrandNewReason"))
        #expect(
            outcome
                == .failed(status: status, reason: nil, rawReason: "BrandNewReason", action: action, timestamp: nil))
        // No body at all: same action, empty raw reason.
        let bare = PushOutcome.classify(status: status, body: nil)
        #expect(bare == .failed(status: status, reason: nil, rawReason: "", action: action, timestamp: nil))
    }

    @Test("200 is delivered, with or without a body")
    func delivered() {
        #expect(PushOutcome.classify(status: 200, body: nil) == .delivered)
        #expect(PushOutcome.classify(status: 200, body: APNsErrorBody(reason: "BadTopic")) == .delivered)
        #expect(PushOutcome.delivered.action == .delivered)
        #expect(PushOutcome.delivered.isDelivered)
    }

    @Test("410 keeps the timestamp")
    func unregisteredTimestamp() throws {
        let body = try #require(Self.parse(#"{"reason":"Unregistered","timestamp":1735689600000}"#))
        let outcome = PushOutcome.classify(status: 410, body: body)
        #expect(
            outcome
                == .failed(
                    status: 410, reason: .unregistered, rawReason: "Unregistered", action: .dropToken,
                    timestamp: 1_735_689_600_000))
        #expect(!outcome.isDelivered)
        #expect(
            outcome.description == "failed with status 410 Unregistered (inactive since 1735689600000 ms): drop-token")
    }

    @Test("accepts Apple's spaced \"Service Unavailable\" spelling")
    func spacedServiceUnavailable() {
        #expect(APNsReason(reasonString: "Service Unavailable") == .serviceUnavailable)
        let outcome = PushOutcome.classify(status: 503, body: APNsErrorBody(reason: "Service Unavailable"))
        #expect(outcome.action == .retryOnNewConnection)
        #expect(APNsReason(reasonString: "unregistered") == nil)  // reasons are case-sensitive
    }
}

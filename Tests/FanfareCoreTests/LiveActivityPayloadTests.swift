import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("Live Activity payload", .ownThread)
struct LiveActivityPayloadTests {
    /// Encodes into a fresh buffer of `bufferSize` bytes; returns the JSON text.
    static func encode(
        _ content: LiveActivityContent, limit: Int = PayloadLimits.liveActivity, bufferSize: Int = 8192
    ) throws(PayloadError) -> String {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bufferSize, alignment: 8)
        defer { buffer.deallocate() }
        let count = try LiveActivityPayloadEncoder.encode(content, into: buffer, limit: limit)
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: buffer[0..<count]), as: UTF8.self)
        #expect(TestSupport.validate(text) == nil)
        return text
    }

    static func json(_ text: String) -> RawJSON {
        try! RawJSON(validating: text)
    }

    static let startAlert = LiveActivityAlert(title: .plain("Kick-off"), body: .plain("Team A vs Team B"))

    static func validStart() -> LiveActivityContent {
        LiveActivityContent(
            event: .start, timestamp: 1_735_689_600, contentState: json(#"{"home":0,"away":0}"#),
            alert: startAlert, attributesType: "MatchAttributes", attributes: json(#"{"matchId":"m-42"}"#))
    }

    @Test("minimal update")
    func minimalUpdate() throws {
        let content = LiveActivityContent(
            event: .update, timestamp: 1_735_689_600, contentState: Self.json(#"{"home":1,"away":0}"#))
        #expect(
            try Self.encode(content)
                == #"{"aps":{"timestamp":1735689600,"event":"update","content-state":{"home":1,"away":0}}}"#)
    }

    @Test("start with every start-only key")
    func fullStart() throws {
        var content = Self.validStart()
        content.staleDate = 1_735_693_200
        content.relevanceScore = 100
        content.inputPushToken = true
        content.inputPushChannel = "dHN0LXNyY2gtY2hubA=="
        content.alert?.sound = "chime.caf"
        #expect(
            try Self.encode(content)
                == #"{"aps":{"timestamp":1735689600,"event":"start","content-state":{"home":0,"away":0},"#
                + #""stale-date":1735693200,"relevance-score":100.0,"#
                + #""alert":{"title":"Kick-off","body":"Team A vs Team B","sound":"chime.caf"},"#
                + #""attributes-type":"MatchAttributes","attributes":{"matchId":"m-42"},"#
                + #""input-push-token":1,"input-push-channel":"dHN0LXNyY2gtY2hubA=="}}"#)
    }

    @Test("end with dismissal-date 0 emits the zero")
    func endDismissNow() throws {
        let content = LiveActivityContent(
            event: .end, timestamp: 1_735_696_800, contentState: Self.json(#"{"home":2,"away":1}"#), dismissalDate: 0)
        #expect(
            try Self.encode(content)
                == #"{"aps":{"timestamp":1735696800,"event":"end","content-state":{"home":2,"away":1},"#
                + #""dismissal-date":0}}"#
        )
        var later = content
        later.dismissalDate = 1_735_700_400
        #expect(try Self.encode(later).hasSuffix(#""dismissal-date":1735700400}}"#))
        later.dismissalDate = nil
        #expect(!(try Self.encode(later).contains("dismissal-date")))
    }

    @Test(
        "each optional key on an update",
        arguments: [
            (LiveActivityContent(event: .update, timestamp: 5, staleDate: 6), #""stale-date":6"#),
            (LiveActivityContent(event: .update, timestamp: 5, dismissalDate: 7), #""dismissal-date":7"#),
            (LiveActivityContent(event: .update, timestamp: 5, relevanceScore: 0.5), #""relevance-score":0.5"#),
            (LiveActivityContent(event: .update, timestamp: 5, relevanceScore: -1e-05), #""relevance-score":-1e-05"#),
            (
                LiveActivityContent(event: .update, timestamp: 5, alert: LiveActivityAlert(sound: "default")),
                #""alert":{"sound":"default"}"#
            ),
        ])
    func optionalKeys(content: LiveActivityContent, fragment: String) throws {
        let text = try Self.encode(content)
        #expect(text == #"{"aps":{"timestamp":5,"event":"update","# + fragment + "}}")
    }

    @Test("localized alert texts use loc-key and loc-args")
    func localizedAlert() throws {
        let alert = LiveActivityAlert(
            title: .localized(key: "GOAL_TITLE", args: ["Team A", "2"]),
            subtitle: .plain("2nd half"),
            body: .localized(key: "GOAL_BODY", args: []),
            sound: "goal.caf")
        let content = LiveActivityContent(event: .update, timestamp: 1, alert: alert)
        #expect(
            try Self.encode(content)
                == #"{"aps":{"timestamp":1,"event":"update","alert":{"title":{"loc-key":"GOAL_TITLE","#
                + #""loc-args":["Team A","2"]},"subtitle":"2nd half","body":{"loc-key":"GOAL_BODY"},"#
                + #""sound":"goal.caf"}}}"#)
    }

    @Test("alert text is escaped and round-trips")
    func alertEscaping() throws {
        let title = "\"Quote\" \\ new\nline \u{2028} 🎉 東京"
        let content = LiveActivityContent(event: .update, timestamp: 1, alert: LiveActivityAlert(title: .plain(title)))
        let text = try Self.encode(content)
        #expect(text.contains(#""title":"\"Quote\" \\ new\nline \u2028 🎉 東京""#))
    }

    @Test("start needs content-state and attributes")
    func startRequiredJSON() {
        var content = Self.validStart()
        content.contentState = nil
        #expect(throws: PayloadError.invalid("start requires content-state")) { try Self.encode(content) }
        content = Self.validStart()
        content.attributes = nil
        #expect(throws: PayloadError.invalid("start requires attributes")) { try Self.encode(content) }
    }

    @Test("start rule violations")
    func startRules() throws {
        #expect(try Self.encode(Self.validStart()).hasPrefix(#"{"aps":{"timestamp":1735689600,"event":"start""#))
        var content = Self.validStart()
        content.alert = nil
        #expect(throws: PayloadError.invalid("start requires an alert (without one the activity does not start)")) {
            try Self.encode(content)
        }
        content = Self.validStart()
        content.attributesType = nil
        #expect(throws: PayloadError.invalid("start requires attributes-type")) { try Self.encode(content) }
        content.attributesType = ""
        #expect(throws: PayloadError.invalid("attributes-type must not be empty")) { try Self.encode(content) }
        content = Self.validStart()
        content.alert = LiveActivityAlert()
        #expect(throws: PayloadError.invalid("alert needs a title, subtitle, body or sound")) {
            try Self.encode(content)
        }
        content = Self.validStart()
        content.inputPushChannel = ""
        #expect(throws: PayloadError.invalid("input-push-channel must not be empty")) { try Self.encode(content) }
    }

    @Test("start-only keys are rejected on update and end", arguments: [LiveActivityEvent.update, .end])
    func startOnlyKeys(event: LiveActivityEvent) {
        let base = LiveActivityContent(event: event, timestamp: 1, contentState: Self.json("{}"))
        var content = base
        content.attributesType = "MatchAttributes"
        #expect(throws: PayloadError.invalid("attributes-type is only allowed on start, not \(event.rawValue)")) {
            try Self.encode(content)
        }
        content = base
        content.attributes = Self.json("{}")
        #expect(throws: PayloadError.invalid("attributes is only allowed on start, not \(event.rawValue)")) {
            try Self.encode(content)
        }
        content = base
        content.inputPushToken = true
        #expect(throws: PayloadError.invalid("input-push-token is only allowed on start, not \(event.rawValue)")) {
            try Self.encode(content)
        }
        content = base
        content.inputPushChannel = "abc"
        #expect(throws: PayloadError.invalid("input-push-channel is only allowed on start, not \(event.rawValue)")) {
            try Self.encode(content)
        }
    }

    @Test("value rules", arguments: [Double.nan, .infinity, -.infinity])
    func nonFiniteRelevance(score: Double) {
        let content = LiveActivityContent(event: .update, timestamp: 1, relevanceScore: score)
        #expect(throws: PayloadError.invalid("relevance-score must be a finite number")) { try Self.encode(content) }
    }

    @Test("content-state must be an object and dates non-negative")
    func shapeRules() throws {
        let array = try RawJSON(validating: "[1]", requireObject: false)
        #expect(throws: PayloadError.invalid("content-state must be a JSON object")) {
            try Self.encode(LiveActivityContent(event: .update, timestamp: 1, contentState: array))
        }
        var start = Self.validStart()
        start.attributes = array
        #expect(throws: PayloadError.invalid("attributes must be a JSON object")) { try Self.encode(start) }
        #expect(throws: PayloadError.invalid("timestamp must be UNIX seconds (>= 0)")) {
            try Self.encode(LiveActivityContent(event: .update, timestamp: -1))
        }
        #expect(throws: PayloadError.self) {
            try Self.encode(LiveActivityContent(event: .end, timestamp: 1, dismissalDate: -1))
        }
        #expect(throws: PayloadError.self) {
            try Self.encode(LiveActivityContent(event: .update, timestamp: 1, staleDate: -1))
        }
    }

    /// An update whose content-state pads the payload to exactly `size` bytes.
    static func update(ofSize size: Int) -> LiveActivityContent {
        // {"aps":{"timestamp":1735689600,"event":"update","content-state":{"p":""}}} is 74 bytes.
        let overhead = 74
        precondition(size >= overhead)
        let state = json(#"{"p":""# + String(repeating: "x", count: size - overhead) + #""}"#)
        return LiveActivityContent(event: .update, timestamp: 1_735_689_600, contentState: state)
    }

    @Test("exactly 4096 bytes fits; 4097 is too large with the exact size")
    func sizeLimit() throws {
        #expect(try Self.encode(Self.update(ofSize: 74)).utf8.count == 74)
        #expect(try Self.encode(Self.update(ofSize: 4096)).utf8.count == 4096)
        #expect(throws: PayloadError.tooLarge(bytes: 4097, limit: 4096)) {
            try Self.encode(Self.update(ofSize: 4097))
        }
        #expect(throws: PayloadError.tooLarge(bytes: 20_000, limit: 4096)) {
            try Self.encode(Self.update(ofSize: 20_000))
        }
        // Broadcast limit.
        #expect(try Self.encode(Self.update(ofSize: 5120), limit: PayloadLimits.broadcast).utf8.count == 5120)
        #expect(throws: PayloadError.tooLarge(bytes: 5121, limit: 5120)) {
            try Self.encode(Self.update(ofSize: 5121), limit: PayloadLimits.broadcast)
        }
        // A buffer smaller than the limit is the effective limit.
        #expect(throws: PayloadError.tooLarge(bytes: 200, limit: 100)) {
            try Self.encode(Self.update(ofSize: 200), bufferSize: 100)
        }
        #expect(
            PayloadError.tooLarge(bytes: 4097, limit: 4096).description
                == "payload is 4097 bytes, over the 4096-byte limit; shrink content-state, attributes or alert text")
    }

    @Test("PayloadBuffer reuses one allocation and exposes the last encoding")
    func payloadBuffer() throws {
        let buffer = PayloadBuffer()
        #expect(buffer.count == 0)
        let first = try buffer.encode(Self.validStart())
        #expect(first.count == buffer.count)
        #expect(String(decoding: buffer.bytes, as: UTF8.self) == (try Self.encode(Self.validStart())))
        let address = buffer.bytes.baseAddress
        try buffer.encode(Self.update(ofSize: 5000), limit: PayloadLimits.broadcast)
        #expect(buffer.count == 5000)
        #expect(buffer.bytes.baseAddress == address)
        #expect(throws: PayloadError.tooLarge(bytes: 4100, limit: 4096)) {
            try buffer.encode(Self.update(ofSize: 4100))
        }
        #expect(buffer.count == 0)  // a failed encoding leaves nothing to send
        #expect(Int(bitPattern: address) % 64 == 0)
    }
}

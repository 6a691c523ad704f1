// The fast decoder of POST /v1/tokens accepts only what the generated decoder accepts, and reads it the same:
// hand-picked bodies and thousands of single-byte mutations of a valid one, each checked against the
// generated Codable types.
import FanfareService
import FanfareTestSupport
import Foundation
import Testing

@Suite("TokenBatchDecoder", .ownThread)
struct TokenBatchDecoderTests {
    /// What the generated decoder makes of a body, as the fast decoder's fields (nil if it rejects it).
    static func generated(_ body: [UInt8]) -> [RegistrationFields]? {
        guard let batch = try? JSONDecoder().decode(Components.Schemas.TokenBatch.self, from: Data(body)) else {
            return nil
        }
        return batch.tokens.map { item in
            switch item {
            case .update(let update):
                RegistrationFields(
                    token: update.token, kind: .update, channels: update.channels, activityID: update.activityId,
                    deviceID: update.deviceId, attributesType: update.attributesType,
                    frequentUpdates: update.frequentUpdates ?? false)
            case .pushToStart(let start):
                RegistrationFields(
                    token: start.token, kind: .pushToStart, channels: start.channels, activityID: start.activityId,
                    deviceID: start.deviceId, attributesType: start.attributesType,
                    frequentUpdates: start.frequentUpdates ?? false,
                    supportsBroadcast: start.supportsBroadcast ?? false)
            case .broadcast(let subscription):
                RegistrationFields(
                    token: nil, kind: .broadcast, channels: subscription.channels, activityID: subscription.activityId,
                    deviceID: subscription.deviceId, attributesType: subscription.attributesType,
                    frequentUpdates: subscription.frequentUpdates ?? false)
            }
        }
    }

    static func fast(_ body: [UInt8]) -> [RegistrationFields]? { body.withUnsafeBytes { TokenBatchDecoder.decode($0) } }

    /// The property: the fast decoder returns nil or exactly the generated decoder's reading.
    static func check(_ body: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        guard let fast = fast(body) else { return false }
        let reference = generated(body)
        #expect(
            reference != nil,
            "fast decoder accepted what the generated one rejects: \(String(decoding: body, as: UTF8.self))",
            sourceLocation: sourceLocation)
        #expect(reference == fast, "\(String(decoding: body, as: UTF8.self))", sourceLocation: sourceLocation)
        return true
    }

    static let token = String(repeating: "ab", count: 32)

    @Test("well-formed bodies are read as the generated types read them")
    func accepted() {
        let bodies = [
            registrationBody(0..<50, channel: "m"),
            #"{"tokens":[]}"#,
            #" { "tokens" : [ { "kind" : "push-to-start" , "token" : "\#(Self.token)", "channels" : [ "a" , "b" ] , "device_id" : "d" , "attributes_type" : "T" , "frequent_updates" : true , "activity_id" : null } ] } "#,
            "{\"tokens\":[{\"token\":\"\(Self.token)\",\"kind\":\"update\",\"channels\":[\"caf\\u00e9\",\"x\\\"y\\\\z\\/\\n\"],\"activity_id\":\"\u{1F600} é\"}]}",
            #"{"tokens":[{"token":"\#(Self.token)","kind":"update","channels":["m"],"activity_id":"a","frequent_updates":null,"device_id":null}]}"#,
            "{\r\n\t\"tokens\": [{\"token\":\"\(Self.token)\",\"kind\":\"update\",\"channels\":[],\"activity_id\":\"a\"}]\n}\n",
            #"{"tokens":[{"kind":"broadcast","channels":["m"],"activity_id":"a","device_id":"d","attributes_type":"T","frequent_updates":true}]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"push-to-start","channels":["m"],"device_id":"d","attributes_type":"T","supports_broadcast":true},{"kind":"broadcast","channels":["m"],"activity_id":"a"}]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"push-to-start","channels":["m"],"device_id":"d","attributes_type":"T","supports_broadcast":null}]}"#,
        ]
        for body in bodies { #expect(Self.check(Array(body.utf8)), "\(body)") }
    }

    @Test("anything else goes to the generated decoder (nil), never a different reading")
    func declined() {
        let bad = [
            "", "null", "[]", #"{"tokens":null}"#, #"{"tokens":[],"x":1}"#, #"{"tokens":[]}x"#, #"{"tokens":[] "#,
            #"{"tokens":[],"tokens":[]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"update","channels":["m"]}]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"other","channels":["m"],"activity_id":"a"}]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"update","channels":["m"],"activity_id":"a","extra":1}]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"update","channels":["m"],"activity_id":"a","frequent_updates":1}]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"update","channels":"m","activity_id":"a"}]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"update","kind":"update","channels":["m"],"activity_id":"a"}]}"#,
            #"{"tokens":[{"token":null,"kind":"update","channels":["m"],"activity_id":"a"}]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"push-to-start","channels":["m"],"device_id":"d"}]}"#,
            "{\"tokens\":[{\"token\":\"\(Self.token)\",\"kind\":\"update\",\"channels\":[\"\\ud83d\\ude00\"],\"activity_id\":\"a\"}]}",
            "{\"tokens\":[{\"token\":\"\(Self.token)\",\"kind\":\"update\",\"channels\":[\"a\u{0001}\"],\"activity_id\":\"a\"}]}",
            #"{"tokens":[{"token":"\#(Self.token)","kind":"update","channels":["m"],"activity_id":"a"},]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"broadcast","channels":["m"],"activity_id":"a"}]}"#,
            #"{"tokens":[{"kind":"broadcast","channels":["m"]}]}"#,
            #"{"tokens":[{"kind":"broadcast","channels":["m"],"activity_id":"a","supports_broadcast":true}]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"update","channels":["m"],"activity_id":"a","supports_broadcast":false}]}"#,
            #"{"tokens":[{"token":"\#(Self.token)","kind":"push-to-start","channels":["m"],"device_id":"d","attributes_type":"T","supports_broadcast":1}]}"#,
        ]
        for body in bad { #expect(Self.fast(Array(body.utf8)) == nil, "\(body)") }
        #expect(Self.fast([0x7B, 0x22, 0xFF, 0x22]) == nil)
    }

    @Test("single-byte mutations of a valid body: accepted only as the generated decoder reads them")
    func mutations() {
        let base = Array(
            (#"{"tokens":[{"token":"\#(Self.token)","kind":"update","channels":["m","n"],"activity_id":"a1","frequent_updates":false},"#
                + #"{"token":"\#(Self.token)","kind":"push-to-start","channels":["m"],"device_id":"d","attributes_type":"T","supports_broadcast":true},"#
                + #"{"kind":"broadcast","channels":["m"],"activity_id":"a2"}]}"#).utf8)
        let alphabet = Array(#"{}[]":,\ atfnu0x"#.utf8) + [0x00, 0x80, 0xC3]
        var generator = SystemRandomNumberGenerator()
        var accepted = 0
        for _ in 0..<3_000 {
            var body = base
            let position = Int.random(in: 0..<body.count, using: &generator)
            switch Int.random(in: 0..<3, using: &generator) {
            case 0: body.remove(at: position)
            case 1: body.insert(alphabet.randomElement(using: &generator)!, at: position)
            default: body[position] = alphabet.randomElement(using: &generator)!
            }
            if Self.check(body) { accepted += 1 }
        }
        // Some mutations stay valid (inside strings); the property is checked for each of them.
        #expect(accepted > 0)
    }
}

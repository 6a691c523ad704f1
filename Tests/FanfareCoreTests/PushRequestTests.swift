import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("push request headers", .ownThread)
struct PushRequestTests {
    @Test("apns-priority parses exactly 1, 5 and 10")
    func priority() {
        #expect(PushPriority(headerValue: "1") == .powerSaving)
        #expect(PushPriority(headerValue: "5") == .normal)
        #expect(PushPriority(headerValue: "10"[...]) == .immediate)
        for bad in ["", "0", "05", "10 ", " 5", "11", "high", "-1"] {
            #expect(PushPriority(headerValue: bad) == nil, "\(bad)")
            #expect(Array(bad.utf8).withUnsafeBytes { PushPriority(headerValue: $0) } == nil, "\(bad)")
        }
        for priority in PushPriority.allCases {
            let value = priority.headerValue.description
            #expect(Int(value) == priority.rawValue)
            #expect(PushPriority(headerValue: value) == priority)
            #expect(Array(value.utf8).withUnsafeBytes { PushPriority(headerValue: $0) } == priority)
        }
        #expect(PushPriority.default == .immediate)
    }

    @Test(
        "every push type knows its topic suffix",
        arguments: [
            (PushType.alert, ""), (.background, ""), (.complication, ".complication"),
            (.controls, ".push-type.controls"), (.fileprovider, ".pushkit.fileprovider"),
            (.liveactivity, ".push-type.liveactivity"), (.location, ".location-query"),
            (.pushtotalk, ".voip-ptt"), (.voip, ".voip"), (.widgets, ".push-type.widgets"),
        ])
    func topicSuffix(type: PushType, suffix: String) {
        #expect(type.requiredTopicSuffix == suffix)
        #expect(Topic.make(bundleID: "com.example.app", pushType: type) == "com.example.app" + suffix)
        #expect(Array(type.rawValue.utf8).withUnsafeBytes { PushType(headerValue: $0) } == type)
    }

    @Test("push types cover apns-spec §2.2")
    func pushTypes() {
        #expect(PushType.allCases.count == 11)
        #expect(PushType.mdm.requiredTopicSuffix == nil)
        #expect(Topic.make(bundleID: "x", pushType: .mdm) == nil)
        #expect(PushType.voip.payloadLimit == 5120)
        #expect(PushType.liveactivity.payloadLimit == 4096)
        #expect(Array("LiveActivity".utf8).withUnsafeBytes { PushType(headerValue: $0) } == nil)
    }

    @Test("Live Activity topics")
    func liveActivityTopic() {
        #expect(Topic.liveActivity(bundleID: "com.example.app") == "com.example.app.push-type.liveactivity")
        #expect(Topic.bundleID(fromLiveActivityTopic: "com.example.app.push-type.liveactivity") == "com.example.app")
        #expect(Topic.bundleID(fromLiveActivityTopic: "com.example.app") == nil)
        #expect(Topic.bundleID(fromLiveActivityTopic: ".push-type.liveactivity") == nil)
    }

    @Test("collapse ids are 1 to 64 bytes an HTTP header value may carry")
    func collapseID() throws {
        try CollapseID.validate("score-update")
        try CollapseID.validate(String(repeating: "a", count: 64))
        try CollapseID.validate(String(repeating: "é", count: 32))  // 64 bytes
        #expect(throws: CollapseIDError.tooLong(bytes: 65)) {
            try CollapseID.validate(String(repeating: "a", count: 65))
        }
        #expect(throws: CollapseIDError.tooLong(bytes: 66)) {
            try CollapseID.validate(String(repeating: "é", count: 33))
        }
        #expect(throws: CollapseIDError.empty) { try CollapseID.validate("") }
        #expect(CollapseIDError.tooLong(bytes: 65).description.contains("at most 64"))
        // What an HTTP field value may not carry is refused before it is sent.
        try CollapseID.validate("goal 1-0\tlive")
        #expect(throws: CollapseIDError.invalidByte(0x06, offset: 1)) { try CollapseID.validate("a\u{06}b") }
        #expect(throws: CollapseIDError.invalidByte(0x0A, offset: 5)) { try CollapseID.validate("score\n") }
        #expect(throws: CollapseIDError.invalidByte(0x7F, offset: 0)) { try CollapseID.validate("\u{7F}x") }
        #expect(throws: CollapseIDError.invalidByte(0x20, offset: 0)) { try CollapseID.validate(" score") }
        #expect(throws: CollapseIDError.invalidByte(0x09, offset: 5)) { try CollapseID.validate("score\t") }
        #expect(CollapseIDError.invalidByte(0x06, offset: 1).description.contains("control character"))
    }

    @Test("endpoints")
    func endpoints() {
        #expect(APNsEndpoint.production.host == "api.push.apple.com")
        #expect(APNsEndpoint.sandbox.host == "api.sandbox.push.apple.com")
        #expect(APNsEndpoint.port == 443)
        #expect(APNsEndpoint.alternatePort == 2197)
        #expect(APNsEndpoint.production.channelManagementPort == 2196)
        #expect(APNsEndpoint.sandbox.channelManagementPort == 2195)
        #expect(APNsEndpoint(rawValue: "sandbox") == .sandbox)
    }

    @Test("device paths")
    func devicePath() throws {
        let token = try TestSupport.token(byteCount: 100)
        var buffer = [UInt8](repeating: 0, count: APNsPath.maximumDevicePathByteCount + 1)
        let count = buffer.withUnsafeMutableBytes { APNsPath.writeDevicePath(for: token, to: $0.baseAddress!) }
        #expect(count == APNsPath.maximumDevicePathByteCount)
        #expect(String(decoding: buffer[0..<count], as: UTF8.self) == "/3/device/" + token.hexString)
        #expect(buffer[count] == 0)
        #expect(APNsPath.broadcast(bundleID: "com.example.app") == "/4/broadcasts/apps/com.example.app")
    }
}

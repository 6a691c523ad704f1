// A broadcast's request header block (apns-spec.md §8.3) exactly as `APNsConnection` writes it
// (`APNsRequestHeaders.write`), decoded by our HPACK decoder and by nghttp2's inflater: the same fields, in
// order, no apns-topic; the repeated fields go out as one-byte indexes from the second block on.
@_spi(Benchmarks) import FanfareClient
import FanfareCore
@testable import FanfareHTTP2
import FanfareTestSupport
import Testing

@Suite(.ownThread) struct BroadcastHeaderBlockTests {
    static let channelText = "dHN0LTEyMzQ1Njc4OTAxMg=="
    static let requestID = "6f1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"
    static let jwt = "eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyM0RFRkcifQ.eyJpc3MiOiJERUYxMjNHSElKIn0.c2lnbmF0dXJl"

    final class Encoder {
        var table = HPACKEncoderTable(maximumSize: 4096)
        let fields: APNsRequestHeaders.RepeatedFields
        init(header: BroadcastRequestIDHeader) {
            var registered: [HPACKCachedField] = []
            var table = HPACKEncoderTable(maximumSize: 4096)
            fields = APNsRequestHeaders.RepeatedFields(
                authority: "api.push.apple.com", usesProviderTokens: true, pushType: "liveactivity",
                topic: "com.example.app.push-type.liveactivity", broadcastBundleID: "com.example.app",
                broadcastRequestIDHeader: header,
                register: {
                    registered.append(table.register(nameIndex: $0, name: $1, value: $2))
                    return registered.last!
                })
            table.update(fields.authorization!, value: "bearer " + BroadcastHeaderBlockTests.jwt)
            self.table = table
        }

        func block(for job: PushJob) -> [UInt8] {
            var job = job
            return withUnsafePointer(to: &job) { pointer in
                HPACKTestSupport.writeBlock { writer in
                    table.beginBlock(&writer)
                    APNsRequestHeaders.write(pointer, fields: fields, table: &table, writer: &writer)
                }
            }
        }
    }

    static func job(priority: PushPriority, expiration: Int64 = 0) throws -> PushJob {
        let payload = try PushPayload(
            #"{"aps":{"timestamp":1,"event":"update","content-state":{}}}"#, limit: PayloadLimits.broadcast)
        return PushJob(
            channel: try BroadcastChannelID(channelText), payload: payload, priority: priority, expiration: expiration,
            apnsID: PushIdentifier(requestID))
    }

    static func expected(priority: String, expiration: String, idHeader: String) -> [Header] {
        [
            Header(":method", "POST"), Header(":scheme", "https"),
            Header(":path", "/4/broadcasts/apps/com.example.app"),
            Header(":authority", "api.push.apple.com"), Header("authorization", "bearer " + jwt),
            Header("apns-push-type", "liveactivity"), Header("apns-priority", priority),
            Header("apns-channel-id", channelText),
            Header(idHeader, requestID), Header("apns-expiration", expiration),
        ]
    }

    @Test(arguments: BroadcastRequestIDHeader.allCases)
    func bothDecodersReadTheBroadcastHeaders(header: BroadcastRequestIDHeader) throws {
        let encoder = Encoder(header: header)
        let inflater = NGHTTP2Inflater()
        var decoder = HPACKDecoder()
        let jobs = [
            try Self.job(priority: .immediate), try Self.job(priority: .normal, expiration: 1_900_000_000),
            try Self.job(priority: .immediate),
        ]
        let expectations = [
            Self.expected(priority: "10", expiration: "0", idHeader: header.rawValue),
            Self.expected(priority: "5", expiration: "1900000000", idHeader: header.rawValue),
            Self.expected(priority: "10", expiration: "0", idHeader: header.rawValue),
        ]
        var sizes: [Int] = []
        for (job, expected) in zip(jobs, expectations) {
            let block = encoder.block(for: job)
            sizes.append(block.count)
            #expect(try HPACKTestSupport.decode(&decoder, block) == expected)
            #expect(inflater.inflate(block) == .success(expected))
        }
        // Once inserted, path, authority, authorization, push type and priority are one byte each: what is left
        // is the two static indexes, the channel id, the request id and the expiration literals.
        let literals =
            (2 + 15 + 1 + Self.channelText.utf8.count) + (2 + header.rawValue.utf8.count + 1 + 36) + (2 + 15 + 1 + 1)
        #expect(sizes[2] == 2 + 5 + literals, "blocks: \(sizes)")
        #expect(sizes[0] > sizes[2] + Self.jwt.utf8.count)
    }

    @Test func tokenPushesAreUnchangedByTheBroadcastFields() throws {
        let encoder = Encoder(header: .apnsRequestID)
        let payload = try PushPayload(#"{"aps":{}}"#)
        let token = try DeviceToken(hex: String(repeating: "ab", count: 32))
        let job = PushJob(token: token, payload: payload, priority: .normal, apnsID: PushIdentifier(Self.requestID))
        let fields = try #require(try NGHTTP2Inflater().inflate(encoder.block(for: job)).get())
        #expect(
            fields.map { String(decoding: $0.name, as: UTF8.self) } == [
                ":method", ":scheme", ":path", ":authority", "authorization", "apns-push-type", "apns-topic",
                "apns-priority", "apns-id",
            ])
        #expect(fields[2] == Header(":path", "/3/device/" + String(repeating: "ab", count: 32)))
    }

    @Test func theTargetAddsNoSizeToAJob() {
        // A token push costs what it did: the channel shares the token's inline room.
        #expect(MemoryLayout<PushTarget>.size <= MemoryLayout<DeviceToken>.size + 3)
        #expect(MemoryLayout<PushJob>.stride == 280, "PushJob is \(MemoryLayout<PushJob>.stride) bytes")
    }
}

// The simulator's side of a request from a hostile client: header fields and body into a `RequestHead`,
// then `RequestValidator.decide` with the connection's provider-token state (`ConnectionAuthState`, claims
// decoded by `ProviderTokenDecoding`; signatures are the JWT target's job), several requests per
// connection. Checked: a 410 and only a 410 carries a timestamp; an accepted push is a POST to a push path
// with a body within the limit that FanfareCore's JSON validator also accepts; every error body parses
// back to its reason; every accepted-push log line is valid JSON.
//
// Input: config byte (bit 0 requirePushType, 1 acceptBroadcasts, 2 lowercase message ids only, 3 no JSON
// check, 4 known tokens only, 5 per-token rate limit 2, 6 faults, 7 small header arena), clock offset
// (u16 seconds), then requests: field count byte, per field a name (selector byte < 64: a known field,
// else a name chunk) and a value chunk; then the body (mode byte: 0 one chunk, 1 a chunk in two reads,
// 2 only a byte count).
import FanfareCore
import FanfareSimulator
import FuzzSupport

#if canImport(Glibc)
import Glibc
#endif

@main
enum FuzzSimulatorRequest {
    static func main() {
        runFuzzer(testOneInput, seeds: seeds)
    }
}

let knownToken = String(repeating: "ab", count: 32)
let baseTime: Int64 = 1_700_000_000

/// The log of accepted pushes, read back after each request: a file of this process's own in the working
/// directory, removed at exit.
let logPath = "fanfare-fuzz-accepted-\(getpid()).jsonl"
nonisolated(unsafe) var acceptedLog: AcceptedPushLog?

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let flags = input.byte()
    var configuration = SimulatorConfiguration()
    configuration.requirePushType = flags & 1 != 0
    configuration.acceptBroadcasts = flags & 2 != 0
    configuration.requireLowercaseMessageID = flags & 4 != 0
    if flags & 8 != 0 { configuration.malformedPayloadReason = nil }
    if flags & 16 != 0 { configuration.knownTokens = [knownToken] }
    if flags & 32 != 0 {
        configuration.perTokenRateLimit = 2
        configuration.perTokenRateTableCapacity = 4
    }
    if flags & 64 != 0 { configuration.faults = [FaultRule(reason: .tooManyRequests, probability: 0.3)] }
    if flags & 128 != 0 { configuration.requestHeadArenaBytes = 512 }
    do {
        try configuration.validate()
    } catch {
        require(false, "the fuzz configuration is invalid: \(error)")
    }
    var validator = RequestValidator(configuration: configuration)
    let auth = ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: UnsignedProviderTokenVerifier())
    var head = RequestHead(arenaCapacity: configuration.requestHeadArenaBytes, bodyCapacity: configuration.requestBodyCapacity)
    let now = SimulatorInstant(seconds: baseTime + Int64(input.uint16()) - 1000)

    while !input.isAtEnd {
        head.reset()
        for _ in 0..<(Int(input.byte()) % 24) {
            let selector = input.byte()
            let value = input.chunk()
            if selector < 64, let field = RequestHeaderField(rawValue: Int(selector) % RequestHeaderField.fieldCount) {
                field.name.withUTF8Buffer { head.add(name: UnsafeRawBufferPointer($0), value: value) }
            } else {
                let name = input.take(Int(selector) - 64)
                head.add(name: name, value: value)
            }
        }
        switch input.byte() % 3 {
        case 0:
            head.appendBody(input.chunk())
        case 1:
            let body = input.chunk()
            let split = body.isEmpty ? 0 : Int(input.byte()) % body.count
            head.appendBody(UnsafeRawBufferPointer(rebasing: body[0..<split]))
            head.appendBody(UnsafeRawBufferPointer(rebasing: body[split...]))
        default:
            head.appendBody(count: input.uint16())
        }
        let decision = validator.decide(head, auth: auth, now: now)
        check(decision, head, configuration, now: now)
    }
    return 0
}

func check(_ decision: SimulatorDecision, _ head: borrowing RequestHead, _ configuration: SimulatorConfiguration, now: SimulatorInstant) {
    switch decision {
    case .reject(let reason, let timestamp):
        require((timestamp != nil) == (reason.status == 410), "\(reason) with timestamp \(String(describing: timestamp))")
        // The error body parses back (the client reads it).
        var body = [UInt8](repeating: 0, count: ErrorResponseBodies.shared.maximumByteCount)
        let count = body.withUnsafeMutableBytes { ErrorResponseBodies.shared.write(decision, into: $0) }
        let parsed = body.withUnsafeBytes { APNsErrorBody.parse(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        require(parsed == APNsErrorBody(reason: reason.rawValue, timestamp: timestamp), "error body \(body[0..<count]) parsed to \(String(describing: parsed))")
    case .accept:
        let method = head.value(.method).map { Array($0) }
        require(method == Array("POST".utf8), "accepted a \(String(describing: method)) request")
        let path = head.value(.path).map { Array($0) } ?? []
        require(path.starts(with: "/3/device/".utf8) || path.starts(with: "/4/broadcasts/apps/".utf8), "accepted path \(path)")
        require(head.bodyByteCount >= 1 && head.bodyByteCount <= 5120, "accepted a body of \(head.bodyByteCount) bytes")
        if configuration.malformedPayloadReason != nil && head.isBodyFullyStored {
            // The simulator does not pair `\u` surrogate escapes (RFC 8259 leaves lone ones to the
            // implementation); it reads with FanfareCore's scanner, so every other rule is the same.
            if let problem = JSONValidator.validate(head.body, requireObject: true, allowNull: true) {
                require(problem.problem == .unpairedSurrogate, "the simulator accepted a body FanfareCore refuses: \(problem)")
            }
        }
        checkLogRecord(head, now: now)
    }
}

/// Appends the accepted push to the log and checks the line is one valid JSON object.
func checkLogRecord(_ head: borrowing RequestHead, now: SimulatorInstant) {
    if acceptedLog == nil {
        unlink(logPath)
        atexit { unlink(logPath) }
        acceptedLog = try? AcceptedPushLog(path: logPath, bufferCapacity: AcceptedPushLog.minimumBufferCapacity)
        require(acceptedLog != nil, "cannot open \(logPath)")
    }
    let apnsID: StaticString = "0b1cde6a-7b3c-4c6f-9a39-3f3f1ec3c1a0"
    do {
        try acceptedLog!.append(head, apnsID: UnsafeRawBufferPointer(start: apnsID.utf8Start, count: apnsID.utf8CodeUnitCount), now: now)
        try acceptedLog!.flush()
    } catch {
        require(false, "the accepted-push log failed: \(error)")
    }
    guard let file = fopen(logPath, "rb") else { return require(false, "cannot read \(logPath)") }
    var line = [UInt8](repeating: 0, count: 1 << 16)
    let count = line.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, file) }
    fclose(file)
    truncate(logPath, 0)
    require(count > 1 && line[count - 1] == 0x0A, "a log record that is not one line")
    let problem = line.withUnsafeBytes { JSONValidator.validate(UnsafeRawBufferPointer(rebasing: $0[0..<count - 1]), requireObject: true, allowNull: true) }
    // (The payload is embedded as sent: lone surrogate escapes the simulator accepted stay.)
    require(problem == nil || problem!.problem == .unpairedSurrogate, "log line is not valid JSON: \(problem!): \(String(decoding: line[0..<count], as: UTF8.self))")
}

// MARK: - Seeds

/// Accepted Live Activity pushes, each rule's rejection, a broadcast, token changes on one connection.
func seeds() -> [Seed] {
    let jwt = token(kid: "KEYID00001", iss: "TEAMID0001", iat: baseTime)
    let later = token(kid: "KEYID00001", iss: "TEAMID0001", iat: baseTime + 30)
    let payload = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"home":1,"away":0}}}"#
    let good: [(RequestHeaderField, String)] = [
        (.method, "POST"), (.scheme, "https"), (.path, "/3/device/" + knownToken), (.authority, "api.push.apple.com"),
        (.authorization, "bearer " + jwt), (.apnsTopic, "com.example.fanfare.push-type.liveactivity"),
        (.apnsPushType, "liveactivity"), (.apnsPriority, "10"), (.apnsExpiration, "0"),
        (.apnsID, "0B1CDE6A-7B3C-4C6F-9A39-3F3F1EC3C1A0"), (.apnsCollapseID, "score"), (.contentType, "application/json"),
    ]
    func program(flags: UInt8, _ requests: [([(RequestHeaderField, String)], String)]) -> [UInt8] {
        var writer = FuzzInputWriter()
        writer.byte(flags)
        writer.uint16(1000)
        for (fields, body) in requests {
            writer.byte(UInt8(fields.count))
            for (field, value) in fields {
                writer.byte(UInt8(field.rawValue))
                writer.chunk(value)
            }
            writer.byte(0)
            writer.chunk(body)
        }
        return writer.bytes
    }
    func replacing(_ field: RequestHeaderField, with value: String?) -> [(RequestHeaderField, String)] {
        good.compactMap { $0.0 == field ? value.map { (field, $0) } : $0 }
    }
    var seeds = [
        Seed("accepted", program(flags: 1, [(good, payload)])),
        Seed("escapes-in-body", program(flags: 1, [(good, #"{"aps":{"alert":"G\u00f6al \ud83d\ude00 \ud800","sound":null},"n":[-0.5e-3,1E+2,true]}"#)])),
        Seed("accepted-checks-on", program(flags: 0b0111_0001, [(good, payload), (good, payload), (good, payload)])),
        Seed("token-change", program(flags: 1, [(good, payload), (replacing(.authorization, with: "bearer " + later), payload)])),
        Seed("broadcast", program(flags: 3, [([
            (.method, "POST"), (.path, "/4/broadcasts/apps/com.example.fanfare"), (.apnsChannelID, "dHdvIGdvYWxz"),
            (.apnsPushType, "liveactivity"), (.authorization, "bearer " + jwt), (.apnsRequestID, "0b1cde6a-7b3c-4c6f-9a39-3f3f1ec3c1a0"),
        ], payload)])),
        Seed("rejections", program(flags: 1, [
            (replacing(.method, with: "GET"), payload),
            (replacing(.path, with: "/3/device/"), payload),
            (replacing(.apnsTopic, with: "com.other"), payload),
            (good + [(.apnsPriority, "5")], payload),
            (replacing(.apnsPriority, with: "7"), payload),
            (replacing(.apnsPushType, with: "alert"), payload),
            (replacing(.apnsExpiration, with: "-1"), payload),
            (replacing(.path, with: "/3/device/abc"), payload),
            (replacing(.authorization, with: nil), payload),
            (good, ""),
            (good, "{\"aps\":1}"),
            (good, "[" + String(repeating: "1,", count: 3000) + "1]"),
            (replacing(.apnsID, with: "not-a-uuid"), payload),
        ])),
    ]
    var unknown = FuzzInputWriter()
    unknown.byte(1)
    unknown.uint16(1000)
    unknown.byte(2)
    unknown.byte(200)  // an unrecognised name of 200 - 64 bytes
    unknown.chunk("value")
    unknown.raw([UInt8](repeating: UInt8(ascii: "x"), count: 136))
    unknown.byte(UInt8(RequestHeaderField.apnsTopic.rawValue))
    unknown.chunk(String(repeating: "t", count: 3000))
    unknown.byte(2)
    unknown.uint16(100)
    seeds.append(Seed("unknown-and-oversized", unknown.bytes))
    return seeds
}

/// An unsigned provider token with these claims (the simulator's `--unsigned` verifier reads the claims).
func token(kid: String, iss: String, iat: Int64) -> String {
    Base64.encode(Array(#"{"alg":"ES256","kid":"\#(kid)"}"#.utf8)) + "."
        + Base64.encode(Array(#"{"iss":"\#(iss)","iat":\#(iat)}"#.utf8)) + "."
        + Base64.encode([UInt8](repeating: 7, count: 64))
}

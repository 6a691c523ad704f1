import FanfareCore
import Synchronization
@testable import FanfareSimulator

/// Shared values for the simulator tests.
enum Fixtures {
    static let now = SimulatorInstant(seconds: 1_750_000_000)
    static let bundle = "com.example.fanfare"
    static let liveActivityTopic = "com.example.fanfare.push-type.liveactivity"
    static let goodJWT = "header.claims.good"
    /// 32-byte (64 hex) token.
    static let token32 = hexToken(bytes: 32)
    /// 80-byte (160 hex) token, the size observed for Live Activity tokens.
    static let token80 = hexToken(bytes: 80, seed: 7)
    static let body = #"{"aps":{"timestamp":1750000000,"event":"update","content-state":{"score":1}}}"#

    /// `count` bytes of deterministic hex text; different seeds give different tokens.
    static func hexToken(bytes count: Int, seed: Int = 1) -> String {
        let digits = Array("0123456789abcdef")
        var random = SimulatorRandom(seed: UInt64(seed), stream: 77)
        return String((0..<(2 * count)).map { _ in digits[Int(random.next() % 16)] })
    }

    /// A JSON body of exactly `count` bytes with an `aps` object.
    static func body(ofSize count: Int) -> String {
        let skeleton = #"{"aps":{"x":""}}"#
        precondition(count >= skeleton.utf8.count)
        return #"{"aps":{"x":""# + String(repeating: "a", count: count - skeleton.utf8.count) + #""}}"#
    }

    /// The configuration most tests use: the defaults.
    static var configuration: SimulatorConfiguration {
        SimulatorConfiguration()
    }

    static func identity(
        issuedAt: Int64 = now.seconds - 10, keyID: String = "KEYID00001", teamID: String = "TEAMID0001"
    )
        -> VerifiedProviderToken
    {
        VerifiedProviderToken(keyID: keyID, teamID: teamID, issuedAt: issuedAt)
    }
}

/// A verifier that knows a fixed set of JWT strings and counts its calls.
final class FakeVerifier: ProviderTokenVerifying {
    let tokens: [String: VerifiedProviderToken]
    private let calls = Atomic<Int>(0)

    init(_ tokens: [String: VerifiedProviderToken] = [Fixtures.goodJWT: Fixtures.identity()]) {
        self.tokens = tokens
    }

    var callCount: Int { calls.load(ordering: .relaxed) }

    func verify(jwt: UnsafeRawBufferPointer) -> VerifiedProviderToken? {
        calls.add(1, ordering: .relaxed)
        return tokens[String(decoding: jwt, as: UTF8.self)]
    }
}

/// A request as a list of header fields plus a body, easy to bend into each rejection.
struct TestRequest {
    var fields: [(name: String, value: String)]
    var body: String

    /// A Live Activity update that the default configuration accepts.
    static func valid(token: String = Fixtures.token32) -> TestRequest {
        TestRequest(
            fields: [
                (":method", "POST"),
                (":scheme", "https"),
                (":path", "/3/device/\(token)"),
                (":authority", "api.push.apple.com"),
                ("authorization", "bearer \(Fixtures.goodJWT)"),
                ("apns-push-type", "liveactivity"),
                ("apns-topic", Fixtures.liveActivityTopic),
                ("apns-priority", "10"),
                ("apns-expiration", "0"),
                ("apns-id", "123e4567-e89b-42d3-a456-426614174000"),
                ("content-type", "application/json"),
            ],
            body: Fixtures.body
        )
    }

    /// A broadcast (channel) push that the default configuration accepts.
    static func validBroadcast() -> TestRequest {
        TestRequest(
            fields: [
                (":method", "POST"),
                (":scheme", "https"),
                (":path", "/4/broadcasts/apps/\(Fixtures.bundle)"),
                ("authorization", "bearer \(Fixtures.goodJWT)"),
                ("apns-push-type", "liveactivity"),
                ("apns-channel-id", "dHdvLXdheS1jaGFubmVsLWlk"),
                ("apns-priority", "5"),
                ("apns-expiration", "0"),
                ("apns-request-id", "123e4567-e89b-42d3-a456-426614174000"),
            ],
            body: Fixtures.body
        )
    }

    /// Replaces the first field with `name`, or appends it.
    mutating func set(_ name: String, _ value: String) {
        if let index = fields.firstIndex(where: { $0.name == name }) {
            fields[index].value = value
        } else {
            fields.append((name, value))
        }
    }

    mutating func remove(_ name: String) {
        fields.removeAll { $0.name == name }
    }

    mutating func append(_ name: String, _ value: String) {
        fields.append((name, value))
    }

    func head(arenaCapacity: Int = RequestHead.defaultArenaCapacity) -> RequestHead {
        var head = RequestHead(arenaCapacity: arenaCapacity)
        for field in fields { head.add(field.name, field.value) }
        if !body.isEmpty { head.appendBody(body) }
        return head
    }
}

extension RequestHead {
    mutating func add(_ name: String, _ value: String) {
        let nameBytes = Array(name.utf8)
        let valueBytes = Array(value.utf8)
        nameBytes.withUnsafeBytes { name in
            valueBytes.withUnsafeBytes { value in add(name: name, value: value) }
        }
    }

    mutating func appendBody(_ text: String) {
        Array(text.utf8).withUnsafeBytes { appendBody($0) }
    }

    func string(_ field: RequestHeaderField) -> String? {
        value(field).map { String(decoding: $0, as: UTF8.self) }
    }
}

/// One decision for `request` on a fresh connection (unless `auth` is given).
func decide(
    _ request: TestRequest,
    configuration: SimulatorConfiguration = Fixtures.configuration,
    auth: ConnectionAuthState? = nil,
    now: SimulatorInstant = Fixtures.now
) -> SimulatorDecision {
    var validator = RequestValidator(configuration: configuration)
    let connection = auth ?? ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: FakeVerifier())
    let head = request.head()
    return validator.decide(head, auth: connection, now: now)
}

func withBytes<R>(_ text: String, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try Array(text.utf8).withUnsafeBytes(body)
}

extension SimulatorDecision {
    var reason: APNsReason? {
        if case .reject(let reason, _) = self { return reason }
        return nil
    }
}

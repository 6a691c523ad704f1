/// One run of a cluster node: a random id, new at every start of a node, that names every PostgreSQL session the
/// node opens (`application_name`), so that a live node can end the sessions of one that stalled and with them its
/// locks (`fenceStalledNodes`, docs/deployment.md "A stalled node").
public struct NodeIncarnation: Sendable, Hashable, CustomStringConvertible {
    /// 16 lower-case hex digits.
    public let hex: String

    /// A new, random incarnation.
    public init() {
        var generator = SystemRandomNumberGenerator()
        let bits = String(generator.next() as UInt64, radix: 16)
        hex = String(repeating: "0", count: 16 - bits.count) + bits
    }

    /// The incarnation spelled `hex` (16 lower-case hex digits, as a session name carries it); nil for anything else.
    public init?(hex: String) {
        guard hex.utf8.count == 16, hex.utf8.allSatisfy({ Self.hexDigits.contains($0) }) else { return nil }
        self.hex = hex
    }

    public var description: String { hex }

    /// The `application_name` of this incarnation's sessions (29 bytes; the server keeps 63).
    public var sessionName: String { Self.sessionNamePrefix + hex }

    /// Sessions whose name starts so belong to a node incarnation; any other session is never fenced.
    static let sessionNamePrefix = "fanfare-node "
    private static let hexDigits = Set("0123456789abcdef".utf8)
}

/// The JSON body of an APNs error response (`{"reason":"…"}`, plus `"timestamp"` in ms on 410,
/// apns-spec §7.2). The same JSON can arrive as GOAWAY debug data.
public struct APNsErrorBody: Sendable, Equatable {
    /// The reason string exactly as sent (escapes resolved).
    public var reason: String?
    /// Milliseconds since the UNIX epoch; APNs sends it with 410 (since when the token is inactive).
    public var timestamp: Int64?

    public init(reason: String? = nil, timestamp: Int64? = nil) {
        self.reason = reason
        self.timestamp = timestamp
    }

    /// The reason as a known ``APNsReason``, or nil when absent or not documented.
    public var knownReason: APNsReason? {
        reason.flatMap { APNsReason(reasonString: $0) }
    }

    /// Parses an error body strictly: it must be one valid JSON object. `reason`, when present, must be
    /// a string and `timestamp` an integer that fits `Int64`; other keys are skipped (validated, not
    /// stored). Returns nil for anything else: empty input, invalid JSON, trailing bytes, wrong types.
    /// Only the returned strings allocate.
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> APNsErrorBody? {
        var scanner = JSONScanner(bytes)
        var body = APNsErrorBody()
        do throws(Unreadable) {
            try scanner.scanObjectDocument(invalid: { _ in Unreadable() }) { scanner, key throws(Unreadable) in
                try body.read(Key(scanner, key.contents, hasEscapes: key.hasEscapes), &scanner)
            }
            return body
        } catch {
            return nil
        }
    }

    /// Invalid JSON, or a member of the wrong type: the body is not an APNs error body.
    private struct Unreadable: Error {}

    /// Reads one member's value at the cursor.
    private mutating func read(_ key: Key, _ scanner: inout JSONScanner) throws(Unreadable) {
        switch key {
        case .reason:
            guard scanner.peek() == UInt8(ascii: "\"") else { throw Unreadable() }
            let (range, hasEscapes) = try Self.readable { () throws(JSONValidationError) in try scanner.scanString() }
            reason = scanner.decodeString(range, hasEscapes: hasEscapes)
        case .timestamp:
            let start = scanner.offset
            guard let first = scanner.peek(),
                first == UInt8(ascii: "-") || (first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9"))
            else { throw Unreadable() }
            try Self.readable { () throws(JSONValidationError) in try scanner.scanNumber() }
            guard let value = Self.parseInteger(scanner.slice(start..<scanner.offset)) else { throw Unreadable() }
            timestamp = value
        case .other:
            // Inside the body's object.
            try Self.readable { () throws(JSONValidationError) in
                try scanner.scanValue(allowNull: true, enclosingDepth: 1)
            }
        }
    }

    private static func readable<T>(_ step: () throws(JSONValidationError) -> T) throws(Unreadable) -> T {
        do throws(JSONValidationError) {
            return try step()
        } catch {
            throw Unreadable()
        }
    }

    private enum Key {
        case reason, timestamp, other

        init(_ scanner: JSONScanner, _ range: Range<Int>, hasEscapes: Bool) {
            // Escaped keys are legal JSON ("re\u0061son"); decode those, compare the rest in place.
            func matches(_ name: StaticString) -> Bool {
                if hasEscapes {
                    let expected = UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
                    return scanner.decodeString(range, hasEscapes: true).utf8.elementsEqual(expected)
                }
                return scanner.slice(range, equals: name)
            }
            if matches("reason") {
                self = .reason
            } else if matches("timestamp") {
                self = .timestamp
            } else {
                self = .other
            }
        }
    }

    /// `-?[0-9]+` into Int64; nil for fractions, exponents or overflow.
    static func parseInteger(_ text: UnsafeRawBufferPointer) -> Int64? {
        var index = 0
        let negative = text.first == UInt8(ascii: "-")
        if negative { index = 1 }
        guard index < text.count else { return nil }
        var magnitude: UInt64 = 0
        while index < text.count {
            let byte = text[index]
            guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return nil }
            let (times10, overflow1) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
            guard !overflow1 && !overflow2 else { return nil }
            magnitude = sum
            index += 1
        }
        if negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { return nil }
            return magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude)
        }
        guard magnitude <= UInt64(Int64.max) else { return nil }
        return Int64(magnitude)
    }
}

extension APNsReason {
    /// Looks up a reason string as APNs sends it. Also accepts `"Service Unavailable"`, the spelling
    /// in Apple's broadcast error table (apns-spec §7.5).
    public init?(reasonString: some StringProtocol) {
        if let reason = APNsReason(rawValue: String(reasonString)) {
            self = reason
        } else if reasonString == "Service Unavailable" {
            self = .serviceUnavailable
        } else {
            return nil
        }
    }
}

/// The result of one push as the sender should act on it.
public enum PushOutcome: Sendable, Equatable, CustomStringConvertible {
    case delivered
    /// `reason` is nil when APNs sent no body or an undocumented reason; `rawReason` then holds what
    /// was sent ("" for no body) and `action` comes from the status alone.
    case failed(status: Int, reason: APNsReason?, rawReason: String, action: PushAction, timestamp: Int64?)

    /// Decides what a response means. 200 is delivered; a documented reason decides the action; an
    /// unknown or missing reason falls back to ``action(forStatus:)``.
    public static func classify(status: Int, body: APNsErrorBody?) -> PushOutcome {
        if status == 200 { return .delivered }
        let rawReason = body?.reason ?? ""
        let timestamp = body?.timestamp
        if let reason = body?.knownReason {
            return .failed(
                status: status, reason: reason, rawReason: rawReason, action: reason.action, timestamp: timestamp)
        }
        return .failed(
            status: status, reason: nil, rawReason: rawReason, action: action(forStatus: status),
            timestamp: timestamp)
    }

    /// The action for a non-200 status when the reason does not say more (apns-spec §7.3, §7.4).
    public static func action(forStatus status: Int) -> PushAction {
        switch status {
        case 200: return .delivered
        case 410: return .dropToken  // the token is no longer active for the topic
        case 413: return .discardMessage  // this payload can never fit
        case 429: return .retryLater  // per-token rate limit: back off
        case 500: return .retryLater
        case 502, 503, 504: return .retryOnNewConnection  // this server is going away or overloaded
        case 500..<600: return .retryLater
        default: return .fixConfiguration  // 400, 403, 404, 405, other 4xx and unexpected statuses
        }
    }

    public var action: PushAction {
        switch self {
        case .delivered: return .delivered
        case .failed(_, _, _, let action, _): return action
        }
    }

    public var isDelivered: Bool {
        if case .delivered = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .delivered:
            return "delivered"
        case .failed(let status, _, let rawReason, let action, let timestamp):
            var text = "failed with status \(status)"
            if !rawReason.isEmpty { text += " \(rawReason)" }
            if let timestamp { text += " (inactive since \(timestamp) ms)" }
            return text + ": \(action.rawValue)"
        }
    }
}

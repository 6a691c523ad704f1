import FanfareCore
import FanfareStorage

/// A decoder for the one body that is big and frequent: `POST /v1/tokens` (`TokenBatch`, up to 10,000 items).
/// The generated Codable path spends about 100 µs per item (JSONDecoder's generic containers and the
/// additional-properties check), which caps registration near 8,000 tokens/s; this reads the bytes once.
///
/// It only ever accepts: anything it does not recognise exactly as the schema's shape (malformed JSON, a
/// wrong type, a missing, unknown or repeated field, an unknown `kind`, a number, a lone surrogate escape)
/// returns nil, and the request goes through the generated decoder, which gives the canonical
/// answer. So both paths accept the same bodies and every error comes from one place.
///
/// FanfareCore's `JSONScanner` reads the tokens of the grammar (strings, literals, whitespace); this type
/// knows the schema.
package struct TokenBatchDecoder {
    private var scanner: JSONScanner

    private init(_ bytes: UnsafeRawBufferPointer) { scanner = JSONScanner(bytes) }

    /// The items of a well-formed `TokenBatch`, or nil (use the generated decoder).
    package static func decode(_ body: UnsafeRawBufferPointer) -> [RegistrationFields]? {
        var decoder = TokenBatchDecoder(body)
        return decoder.batch()
    }

    private mutating func batch() -> [RegistrationFields]? {
        guard take(UInt8(ascii: "{")), let key = string(), key == "tokens", take(UInt8(ascii: ":")),
            take(UInt8(ascii: "["))
        else { return nil }
        var items: [RegistrationFields] = []
        if !take(UInt8(ascii: "]")) {
            repeat {
                guard let item = registration() else { return nil }
                items.append(item)
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "]")) else { return nil }
        }
        guard take(UInt8(ascii: "}")) else { return nil }
        scanner.skipWhitespace()
        return scanner.peek() == nil ? items : nil
    }

    private mutating func registration() -> RegistrationFields? {
        guard take(UInt8(ascii: "{")) else { return nil }
        var fields = ItemFields()
        if !take(UInt8(ascii: "}")) {
            repeat {
                guard let key = string(), take(UInt8(ascii: ":")), field(key, into: &fields) else { return nil }
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "}")) else { return nil }
        }
        return fields.registration()
    }

    /// One item's fields as read so far (nil: absent or null), and the keys seen (a bit each: at most once).
    private struct ItemFields {
        var token: String?
        var kind: RegistrationFields.Kind?
        var channels: [String]?
        var activityID: String?
        var deviceID: String?
        var attributesType: String?
        var frequentUpdates: Bool?
        var supportsBroadcast: Bool?
        var environment: APNsEnvironment?
        var seen = 0

        /// The item, if it has the schema's fields for its kind (the discriminated variants): required ones
        /// present, others absent.
        func registration() -> RegistrationFields? {
            guard let kind, let channels else { return nil }
            switch kind {
            case .update: guard token != nil, activityID != nil, supportsBroadcast == nil else { return nil }
            case .pushToStart: guard token != nil, deviceID != nil, attributesType != nil else { return nil }
            case .broadcast: guard token == nil, activityID != nil, supportsBroadcast == nil else { return nil }
            }
            return RegistrationFields(
                token: token, kind: kind, channels: channels, activityID: activityID, deviceID: deviceID,
                attributesType: attributesType, frequentUpdates: frequentUpdates ?? false,
                supportsBroadcast: supportsBroadcast ?? false, environment: environment)
        }
    }

    /// Reads the value of `key` into `fields`; false for an unknown or repeated key, or a value of another type.
    private mutating func field(_ key: String, into fields: inout ItemFields) -> Bool {
        let bit: Int
        switch key {
        case "token":
            bit = 1
            fields.token = string()
            if fields.token == nil { return false }
        case "kind":
            bit = 2
            switch string() {
            case "update": fields.kind = .update
            case "push-to-start": fields.kind = .pushToStart
            case "broadcast": fields.kind = .broadcast
            default: return false
            }
        case "channels":
            bit = 4
            fields.channels = stringArray()
            if fields.channels == nil { return false }
        case "activity_id":
            bit = 8
            guard let value = optionalString() else { return false }
            fields.activityID = value
        case "device_id":
            bit = 16
            guard let value = optionalString() else { return false }
            fields.deviceID = value
        case "attributes_type":
            bit = 32
            guard let value = optionalString() else { return false }
            fields.attributesType = value
        case "frequent_updates":
            bit = 64
            guard let value = optionalBool() else { return false }
            fields.frequentUpdates = value
        case "supports_broadcast":
            bit = 128
            guard let value = optionalBool() else { return false }
            fields.supportsBroadcast = value
        case "environment":
            bit = 256
            switch string() {
            case "production": fields.environment = .production
            case "sandbox": fields.environment = .sandbox
            default: return false
            }
        default:
            return false
        }
        guard fields.seen & bit == 0 else { return false }
        fields.seen |= bit
        return true
    }

    // MARK: - Values

    /// `null` (→ .some(nil)) or a string; nil if neither.
    private mutating func optionalString() -> String?? {
        if literal("null") { return .some(nil) }
        return string().map { .some($0) }
    }

    private mutating func optionalBool() -> Bool?? {
        if literal("null") { return .some(nil) }
        if literal("true") { return .some(true) }
        if literal("false") { return .some(false) }
        return nil
    }

    private mutating func stringArray() -> [String]? {
        guard take(UInt8(ascii: "[")) else { return nil }
        var values: [String] = []
        if take(UInt8(ascii: "]")) { return values }
        repeat {
            guard let value = string() else { return nil }
            values.append(value)
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "]")) ? values : nil
    }

    /// A JSON string (escapes resolved); nil if the next value is not one, or not a valid one, or if it escapes
    /// a UTF-16 surrogate (those go to the generated decoder, as they always have).
    private mutating func string() -> String? {
        scanner.skipWhitespace()
        guard scanner.peek() == UInt8(ascii: "\""), let scanned = try? scanner.scanString() else { return nil }
        if scanned.hasEscapes && escapesSurrogate(scanner.slice(scanned.contents)) { return nil }
        return scanner.decodeString(scanned.contents, hasEscapes: scanned.hasEscapes)
    }

    /// Whether the contents of a scanned string hold a `\uD800`...`\uDFFF` escape.
    private func escapesSurrogate(_ contents: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        while index < contents.count {
            guard contents[index] == UInt8(ascii: "\\") else {
                index += 1
                continue
            }
            // The scanner checked every escape: a backslash starts `\X` or `\uXXXX`.
            guard contents[index + 1] == UInt8(ascii: "u") else {
                index += 2
                continue
            }
            // D800...DFFF: the first hex digit D, the second 8 or more.
            if JSONScanner.hexValue(contents[index + 2]) == 0xD, JSONScanner.hexValue(contents[index + 3])! >= 8 {
                return true
            }
            index += 6
        }
        return false
    }

    // MARK: - Tokens of the grammar

    private mutating func take(_ byte: UInt8) -> Bool {
        scanner.skipWhitespace()
        guard scanner.peek() == byte else { return false }
        scanner.offset += 1
        return true
    }

    /// `null`, `true` or `false`.
    private mutating func literal(_ word: StaticString) -> Bool {
        scanner.skipLiteral(word)
    }
}

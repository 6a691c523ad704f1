/// A decoder for the one body that is big and frequent: `POST /v1/tokens` (`TokenBatch`, up to 10,000 items).
/// The generated Codable path spends about 100 µs per item (JSONDecoder's generic containers and the
/// additional-properties check), which caps registration near 8,000 tokens/s; this reads the bytes once.
///
/// It only ever accepts: anything it does not recognise exactly as the schema's shape (malformed JSON, a
/// wrong type, a missing, unknown or repeated field, an unknown `kind`, a number, an escape it does not
/// handle) returns nil, and the request goes through the generated decoder, which gives the canonical
/// answer. So both paths accept the same bodies and every error comes from one place.
package struct TokenBatchDecoder {
    private let bytes: UnsafeRawBufferPointer
    private var position = 0

    private init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// The items of a well-formed `TokenBatch`, or nil (use the generated decoder).
    package static func decode(_ body: UnsafeRawBufferPointer) -> [RegistrationFields]? {
        var decoder = TokenBatchDecoder(body)
        return decoder.batch()
    }

    private mutating func batch() -> [RegistrationFields]? {
        guard take(UInt8(ascii: "{")), let key = string(), key == "tokens", take(UInt8(ascii: ":")), take(UInt8(ascii: "["))
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
        skipWhitespace()
        return position == bytes.count ? items : nil
    }

    private mutating func registration() -> RegistrationFields? {
        guard take(UInt8(ascii: "{")) else { return nil }
        var token: String?
        var kind: RegistrationFields.Kind?
        var channels: [String]?
        var activityID: String?
        var deviceID: String?
        var attributesType: String?
        var frequentUpdates: Bool?
        var supportsBroadcast: Bool?
        var seen = 0
        if !take(UInt8(ascii: "}")) {
            repeat {
                guard let key = string(), take(UInt8(ascii: ":")) else { return nil }
                let bit: Int
                switch key {
                case "token":
                    bit = 1
                    token = string()
                    if token == nil { return nil }
                case "kind":
                    bit = 2
                    switch string() {
                    case "update": kind = .update
                    case "push-to-start": kind = .pushToStart
                    case "broadcast": kind = .broadcast
                    default: return nil
                    }
                case "channels":
                    bit = 4
                    channels = stringArray()
                    if channels == nil { return nil }
                case "activity_id":
                    bit = 8
                    guard let value = optionalString() else { return nil }
                    activityID = value
                case "device_id":
                    bit = 16
                    guard let value = optionalString() else { return nil }
                    deviceID = value
                case "attributes_type":
                    bit = 32
                    guard let value = optionalString() else { return nil }
                    attributesType = value
                case "frequent_updates":
                    bit = 64
                    guard let value = optionalBool() else { return nil }
                    frequentUpdates = value
                case "supports_broadcast":
                    bit = 128
                    guard let value = optionalBool() else { return nil }
                    supportsBroadcast = value
                default:
                    return nil
                }
                guard seen & bit == 0 else { return nil }
                seen |= bit
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "}")) else { return nil }
        }
        // The schema's fields per kind (the discriminated variants): required ones present, others absent.
        guard let kind, let channels else { return nil }
        switch kind {
        case .update: guard token != nil, activityID != nil, supportsBroadcast == nil else { return nil }
        case .pushToStart: guard token != nil, deviceID != nil, attributesType != nil else { return nil }
        case .broadcast: guard token == nil, activityID != nil, supportsBroadcast == nil else { return nil }
        }
        return RegistrationFields(
            token: token, kind: kind, channels: channels, activityID: activityID, deviceID: deviceID,
            attributesType: attributesType, frequentUpdates: frequentUpdates ?? false,
            supportsBroadcast: supportsBroadcast ?? false)
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

    /// A JSON string. Plain strings are read in one step; escapes other than the simple ones and BMP `\u`
    /// (no surrogates) return nil, as do control characters and invalid UTF-8.
    private mutating func string() -> String? {
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { return nil }
        position += 1
        let start = position
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                let raw = UnsafeRawBufferPointer(rebasing: bytes[start..<position])
                position += 1
                return String(validating: raw, as: UTF8.self)
            }
            if byte == UInt8(ascii: "\\") {
                position = start
                return escapedString()
            }
            if byte < 0x20 { return nil }
            position += 1
        }
        return nil
    }

    private mutating func escapedString() -> String? {
        var scalars: [UInt8] = []
        while position < bytes.count {
            let byte = bytes[position]
            position += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(validating: scalars, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard position < bytes.count else { return nil }
                let escape = bytes[position]
                position += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalars.append(escape)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"):
                    guard position + 4 <= bytes.count else { return nil }
                    var value: UInt32 = 0
                    for _ in 0..<4 {
                        guard let digit = Self.hexValue(bytes[position]) else { return nil }
                        value = value << 4 | UInt32(digit)
                        position += 1
                    }
                    guard let scalar = Unicode.Scalar(value) else { return nil }  // surrogates: not here
                    scalars.append(contentsOf: String(Character(scalar)).utf8)
                default: return nil
                }
            default:
                if byte < 0x20 { return nil }
                scalars.append(byte)
            }
        }
        return nil
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    // MARK: - Tokens of the grammar

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func take(_ byte: UInt8) -> Bool {
        skipWhitespace()
        guard position < bytes.count, bytes[position] == byte else { return false }
        position += 1
        return true
    }

    /// `null`, `true` or `false`, followed by a delimiter.
    private mutating func literal(_ word: StaticString) -> Bool {
        skipWhitespace()
        let count = word.utf8CodeUnitCount
        guard position + count <= bytes.count else { return false }
        for offset in 0..<count where bytes[position + offset] != word.utf8Start[offset] { return false }
        position += count
        return true
    }
}

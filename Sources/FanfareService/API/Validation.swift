import FanfareCore

/// The schema's rules the generated decoder does not check (patterns, lengths, ranges), with problems that name
/// the field. The OpenAPI document is the source of truth; these repeat its numbers.
package enum Validation {
    /// `ChannelName`: `^[A-Za-z0-9._~:-]{1,200}$`.
    package static func isChannelName(_ name: some StringProtocol) -> Bool {
        let bytes = name.utf8
        guard !bytes.isEmpty && bytes.count <= 200 else { return false }
        return bytes.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"),
                UInt8(ascii: ":"), UInt8(ascii: "-"):
                return true
            default: return false
            }
        }
    }

    package static func channel(_ name: String, field: String = "channel", index: Int? = nil) throws(ServiceProblem) {
        guard isChannelName(name) else {
            throw .badRequest(
                .invalidChannel,
                "\(field): '\(PrintableText.escaping(String(name.prefix(64))))' is not a channel name (1 to 200 of A-Z a-z 0-9 . _ ~ : -)",
                index: index, field: field)
        }
    }

    /// A token in hex (`TokenHex`).
    package static func token(_ hex: String, field: String, index: Int? = nil) throws(ServiceProblem) -> DeviceToken {
        do {
            return try DeviceToken(hex: hex)
        } catch {
            throw .badRequest(.invalidToken, "\(field): \(error)", index: index, field: field)
        }
    }

    /// A string's length in code points (what JSON Schema's minLength / maxLength count).
    package static func length(
        _ value: String?, field: String, min: Int = 0, max: Int, index: Int? = nil
    ) throws(ServiceProblem) {
        guard let value else { return }
        let count = value.unicodeScalars.count
        guard count >= min && count <= max else {
            throw .badRequest(
                .invalidRequest, "\(field) must be \(min) to \(max) characters long (got \(count))", index: index,
                field: field)
        }
    }

    /// `UnixSeconds`: 0...32503680000 (year 3000).
    package static let latestUnixSeconds: Int64 = 32_503_680_000

    package static func unixSeconds(_ value: Int64?, field: String) throws(ServiceProblem) {
        guard let value else { return }
        guard value >= 0 && value <= latestUnixSeconds else {
            throw .badRequest(
                .invalidRequest, "\(field) must be UNIX seconds in 0...\(latestUnixSeconds) (got \(value))",
                field: field)
        }
    }
}

import FanfareCore
import FanfareRegistry
import NIOCore

/// Rows in COPY's text format (tab-separated, `\N` for NULL, backslash escapes), for `incoming`.
enum CopyText {
    static func write(_ registration: TokenRegistration, ordinal: Int, appID: Int64, to buffer: inout ByteBuffer) {
        buffer.writeString(String(ordinal))
        buffer.writeInteger(UInt8(ascii: "\t"))
        // bytea as hex: `\x...`, its backslash escaped for COPY.
        buffer.writeString("\\\\x")
        buffer.writeString(registration.token.hexString)
        buffer.writeInteger(UInt8(ascii: "\t"))
        buffer.writeString(String(registration.kind.rawValue))
        for value in [registration.activityID, registration.deviceID, registration.attributesType] {
            buffer.writeInteger(UInt8(ascii: "\t"))
            writeText(value, to: &buffer)
        }
        buffer.writeInteger(UInt8(ascii: "\t"))
        buffer.writeString(String(appID))
        buffer.writeString(registration.frequentUpdates ? "\tt" : "\tf")
        buffer.writeString(registration.supportsBroadcast ? "\tt" : "\tf")
        buffer.writeInteger(UInt8(ascii: "\t"))
        writeText(arrayLiteral(registration.channels), to: &buffer)
        // The engine's shard hash (`DeviceToken.shardHash`) as its bit pattern: nodes load one shard's tokens
        // by it (`forEachRegistration(shards:of:)`).
        buffer.writeString("\t\(registration.createdAt)\t\(registration.lastSeenAt)\t\(Int64(bitPattern: registration.token.shardHash))\n")
    }

    /// A text value with COPY's escapes; nil is NULL.
    static func writeText(_ value: String?, to buffer: inout ByteBuffer) {
        guard let value else {
            buffer.writeString("\\N")
            return
        }
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\\"): buffer.writeString("\\\\")
            case UInt8(ascii: "\t"): buffer.writeString("\\t")
            case UInt8(ascii: "\n"): buffer.writeString("\\n")
            case UInt8(ascii: "\r"): buffer.writeString("\\r")
            default: buffer.writeInteger(byte)
            }
        }
    }

    /// A text[] literal: every element quoted, `"` and `\` escaped inside.
    static func arrayLiteral(_ elements: [String]) -> String {
        var literal = "{"
        for (index, element) in elements.enumerated() {
            if index > 0 { literal += "," }
            literal += "\""
            for character in element.unicodeScalars {
                if character == "\"" || character == "\\" { literal += "\\" }
                literal.unicodeScalars.append(character)
            }
            literal += "\""
        }
        return literal + "}"
    }
}

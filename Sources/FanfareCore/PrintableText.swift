/// Text that came from the network (GOAWAY debug data, APNs error bodies and reasons, TLS peer errors),
/// made safe to print: a hostile or broken server must not be able to move a terminal's cursor, rewrite a
/// log line or smuggle escape sequences through our messages.
///
/// Printable ASCII stays as it is; `\` becomes `\\`; tab, newline and carriage return become `\t` `\n` `\r`;
/// every other byte (controls, DEL, anything above 0x7F, so also C1 controls and bidi overrides) becomes
/// `\xNN`. The result is one line of printable ASCII, at most about four times `limit` long.
public enum PrintableText {
    /// `bytes`, escaped; past `limit` bytes the rest is cut and `…(N more bytes)` says how much.
    public static func escaping(_ bytes: UnsafeRawBufferPointer, limit: Int = 512) -> String {
        var text = ""
        text.reserveCapacity(min(bytes.count, limit) + 8)
        let shown = min(bytes.count, max(0, limit))
        for index in 0..<shown {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\\"): text += "\\\\"
            case UInt8(ascii: "\t"): text += "\\t"
            case UInt8(ascii: "\n"): text += "\\n"
            case UInt8(ascii: "\r"): text += "\\r"
            case 0x20...0x7E: text.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                text += "\\x"
                text.unicodeScalars.append(hexDigit(byte >> 4))
                text.unicodeScalars.append(hexDigit(byte & 0xF))
            }
        }
        if bytes.count > shown { text += "…(\(bytes.count - shown) more bytes)" }
        return text
    }

    /// The UTF-8 of `text`, escaped (for strings that were decoded from network bytes, e.g. JSON).
    public static func escaping(_ text: String, limit: Int = 512) -> String {
        var copy = text
        return copy.withUTF8 { escaping(UnsafeRawBufferPointer($0), limit: limit) }
    }

    /// True when `escaping` would return the text unchanged (short, printable ASCII, no backslash).
    public static func isPrintable(_ text: String, limit: Int = 512) -> Bool {
        text.utf8.count <= limit && text.utf8.allSatisfy { $0 >= 0x20 && $0 <= 0x7E && $0 != UInt8(ascii: "\\") }
    }

    private static func hexDigit(_ value: UInt8) -> Unicode.Scalar {
        Unicode.Scalar(value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10)
    }
}

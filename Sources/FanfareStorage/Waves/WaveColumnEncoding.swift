/// How the wave tables encode what has no SQL type of its own: start keys and failure counts by reason. Both
/// are parsed back strictly (`StoredWaveColumns`).
package enum WaveColumnEncoding {
    /// Why a stored value cannot be decoded.
    package struct Malformed: Error {
        package var reason: String
    }

    // MARK: Start keys: 8 bytes each, big-endian.

    package static func startKeys(_ keys: [UInt64]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(keys.count * 8)
        for key in keys {
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: key >> shift)) }
        }
        return bytes
    }

    package static func startKeys(_ bytes: UnsafeRawBufferPointer) throws(Malformed) -> [UInt64] {
        guard bytes.count % 8 == 0 else {
            throw Malformed(reason: "holds \(bytes.count) bytes, not a multiple of 8")
        }
        var keys: [UInt64] = []
        keys.reserveCapacity(bytes.count / 8)
        var key: UInt64 = 0
        for (index, byte) in bytes.enumerated() {
            key = key << 8 | UInt64(byte)
            if index % 8 == 7 {
                keys.append(key)
                key = 0
            }
        }
        return keys
    }

    // MARK: Failure counts: `name=count` pairs joined by `;`, sorted by name, e.g. `BadTopic=2;Unconfirmed=1`.
    // In names, `%`, `=`, `;` and control characters are written `%XX` (two uppercase hex digits), so any name
    // round-trips and the text stays readable in the sqlite3 shell.

    package static func failureCounts(_ counts: [String: Int]) -> String {
        var text: [UInt8] = []
        for (name, count) in counts.sorted(by: { $0.key < $1.key }) {
            if !text.isEmpty { text.append(separator) }
            for byte in name.utf8 {
                if needsEscape(byte) {
                    text.append(percent)
                    text.append(hexDigits[Int(byte >> 4)])
                    text.append(hexDigits[Int(byte & 0x0F)])
                } else {
                    text.append(byte)
                }
            }
            text.append(equals)
            text.append(contentsOf: String(count).utf8)
        }
        return String(decoding: text, as: UTF8.self)
    }

    package static func failureCounts(_ text: String) throws(Malformed) -> [String: Int] {
        var counts: [String: Int] = [:]
        guard !text.isEmpty else { return counts }
        for entry in text.utf8.split(separator: separator, omittingEmptySubsequences: false) {
            guard let equalsIndex = entry.firstIndex(of: equals) else {
                throw Malformed(reason: "has an entry without '='")
            }
            let name = try unescape(entry[..<equalsIndex])
            let digits = entry[entry.index(after: equalsIndex)...]
            guard !digits.isEmpty, digits.count <= 19, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                let count = Int(String(decoding: digits, as: UTF8.self))
            else {
                throw Malformed(reason: "has a count that is not a decimal number for '\(name)'")
            }
            guard counts.updateValue(count, forKey: name) == nil else {
                throw Malformed(reason: "names '\(name)' twice")
            }
        }
        return counts
    }

    private static func unescape(_ escaped: Substring.UTF8View.SubSequence) throws(Malformed) -> String {
        var bytes: [UInt8] = []
        var index = escaped.startIndex
        while index != escaped.endIndex {
            let byte = escaped[index]
            index = escaped.index(after: index)
            if byte == percent {
                guard index != escaped.endIndex, let high = hexValue(escaped[index]) else {
                    throw Malformed(reason: "has a malformed %-escape")
                }
                index = escaped.index(after: index)
                guard index != escaped.endIndex, let low = hexValue(escaped[index]) else {
                    throw Malformed(reason: "has a malformed %-escape")
                }
                index = escaped.index(after: index)
                bytes.append(high << 4 | low)
            } else if needsEscape(byte) {
                throw Malformed(reason: "has an unescaped control character in a name")
            } else {
                bytes.append(byte)
            }
        }
        guard !bytes.isEmpty else { throw Malformed(reason: "has an entry with an empty name") }
        guard let name = String(validating: bytes, as: UTF8.self) else {
            throw Malformed(reason: "has a name that is not UTF-8")
        }
        return name
    }

    private static let separator = UInt8(ascii: ";")
    private static let equals = UInt8(ascii: "=")
    private static let percent = UInt8(ascii: "%")
    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == 0x7F || byte == percent || byte == equals || byte == separator
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

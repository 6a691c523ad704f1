import FanfareCore

/// The shape of a push body, as far as the simulator checks it.
public enum PayloadShape: Sendable, Equatable {
    /// A JSON object whose `aps` member is an object.
    case objectWithAPS
    /// Valid JSON, but not an object with an `aps` object.
    case missingAPS
    /// Not valid JSON (RFC 8259, UTF-8), or nested deeper than `JSONValidator.maximumDepth`.
    case malformed

    /// Classifies a push body.
    init(of body: UnsafeRawBufferPointer) {
        guard let member = SimulatorJSON.topLevelMember(body, key: "aps") else {
            self = .malformed
            return
        }
        guard let range = member else {
            self = .missingAPS
            return
        }
        self = body[range.lowerBound] == UInt8(ascii: "{") ? .objectWithAPS : .missingAPS
    }
}

/// JSON as the simulated APNs reads it: FanfareCore's `JSONScanner`, with lone `\u` surrogate escapes
/// accepted (RFC 8259 §8.2 leaves them to the implementation; the simulator has always taken them, and
/// FuzzSimulatorRequest checks that this is its only difference from `JSONValidator`). It validates syntax
/// and UTF-8 and locates top-level members; it builds no values and allocates nothing.
enum SimulatorJSON {
    static let rules = JSONScanner.Rules(maximumDepth: JSONValidator.maximumDepth, pairsSurrogates: false)

    /// Whether `bytes` is exactly one JSON value (with optional surrounding whitespace).
    static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var scanner = JSONScanner(bytes, rules: rules)
        return (try? scanner.scanDocument()) != nil
    }

    /// Validates `bytes` as a JSON document and finds a member of the top-level object.
    /// Returns nil when the document is invalid; `.some(nil)` when it is valid but not an object or has no
    /// such member; otherwise the byte range of the (first) member's value. Keys are compared as raw bytes
    /// (a key spelled with escapes does not match).
    static func topLevelMember(_ bytes: UnsafeRawBufferPointer, key: StaticString) -> Range<Int>?? {
        var scanner = JSONScanner(bytes, rules: rules)
        do throws(JSONValidationError) {
            return .some(try scanner.scanDocument(findingMember: key))
        } catch {
            return nil  // (not `try?`: it would flatten the two optionals)
        }
    }

    /// Validates `bytes` as one JSON object and calls `visit` with each top-level member's raw key bytes
    /// (escapes not decoded) and value range, in order. nil when the document is not valid JSON (the members
    /// before the problem were visited: ignore what they said); false when it is valid but not an object.
    static func forEachTopLevelMember(
        _ bytes: UnsafeRawBufferPointer, _ visit: (UnsafeRawBufferPointer, Range<Int>) -> Void
    ) -> Bool? {
        var scanner = JSONScanner(bytes, rules: rules)
        scanner.skipWhitespace()
        guard scanner.peek() == UInt8(ascii: "{") else { return (try? scanner.scanDocument()) == nil ? nil : false }
        do throws(JSONValidationError) {
            try scanner.scanObjectDocument(invalid: { $0 }) { scanner, key throws(JSONValidationError) in
                let start = scanner.offset
                try scanner.scanValue(allowNull: true, enclosingDepth: 1)
                visit(scanner.slice(key.contents), start..<scanner.offset)
            }
            return true
        } catch {
            return nil
        }
    }

    /// Copies valid JSON without insignificant whitespace (so a payload fits on one log line).
    /// Returns the number of bytes written; the destination needs `source.count` bytes of room.
    static func writeMinified(
        _ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer, at offset: Int
    ) -> Int {
        precondition(offset >= 0 && offset + source.count <= destination.count, "no room for the payload")
        var written = 0
        var inString = false
        var escaped = false
        for byte in source {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
            } else if byte == UInt8(ascii: "\"") {
                inString = true
            } else if JSONScanner.isWhitespace(byte) {
                continue
            }
            destination[offset + written] = byte
            written += 1
        }
        return written
    }
}

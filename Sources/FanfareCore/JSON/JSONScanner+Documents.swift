/// Whole documents: one value with optional whitespace around it, and the top-level object walked member by
/// member (what every reader of an object-shaped body needs).
extension JSONScanner {
    /// Scans the whole input as one JSON value with optional whitespace around it.
    package mutating func scanDocument(allowNull: Bool = true) throws(JSONValidationError) {
        skipWhitespace()
        try scanValue(allowNull: allowNull)
        try scanEnd()
    }

    /// After the document's value: nothing but whitespace may follow.
    package mutating func scanEnd() throws(JSONValidationError) {
        skipWhitespace()
        if let trailing = peek() { throw fail(.unexpectedByte(trailing, expected: .endOfInput)) }
    }

    /// Scans the whole input as one JSON object (whitespace around it allowed), handing each member to
    /// `member` in order: the scanner with its cursor on the value, and the key's contents. `member` must
    /// consume the value (one it does not read: `scanValue(allowNull: true, enclosingDepth: 1)`). A JSON
    /// problem is thrown as `invalid(problem)`; `member` throws what it likes.
    package mutating func scanObjectDocument<Failure: Error>(
        invalid: (JSONValidationError) -> Failure,
        member: (inout JSONScanner, _ key: (contents: Range<Int>, hasEscapes: Bool)) throws(Failure) -> Void
    ) throws(Failure) {
        func json<T>(_ step: (inout JSONScanner) throws(JSONValidationError) -> T) throws(Failure) -> T {
            do throws(JSONValidationError) {
                return try step(&self)
            } catch {
                throw invalid(error)
            }
        }
        skipWhitespace()
        try json { scanner throws(JSONValidationError) in try scanner.expect(UInt8(ascii: "{"), .value) }
        skipWhitespace()
        if peek() == UInt8(ascii: "}") {
            offset += 1
        } else {
            while true {
                let key = try json { scanner throws(JSONValidationError) in
                    guard scanner.peek() == UInt8(ascii: "\"") else { throw scanner.mismatch(.objectKey) }
                    let key = try scanner.scanString()
                    scanner.skipWhitespace()
                    try scanner.expect(UInt8(ascii: ":"), .colon)
                    scanner.skipWhitespace()
                    return key
                }
                let valueStart = offset
                try member(&self, key)
                assert(offset > valueStart, "scanObjectDocument: `member` did not consume the value")
                skipWhitespace()
                if peek() == UInt8(ascii: ",") {
                    offset += 1
                    skipWhitespace()
                    continue
                }
                try json { scanner throws(JSONValidationError) in
                    try scanner.expect(UInt8(ascii: "}"), .commaOrObjectEnd)
                }
                break
            }
        }
        try json { scanner throws(JSONValidationError) in try scanner.scanEnd() }
    }

    /// Scans the whole input as one JSON value and finds the top-level object's first member named `key`
    /// (compared as raw bytes: a key spelled with escapes does not match). Returns the member value's byte
    /// range, or nil when the value is not an object or has no such member; throws when the input is not one
    /// valid JSON value. The simulator runs this per push.
    package mutating func scanDocument(findingMember key: StaticString) throws(JSONValidationError) -> Range<Int>? {
        skipWhitespace()
        guard peek() == UInt8(ascii: "{") else {
            try scanDocument()
            return nil
        }
        var found: Range<Int>?
        try scanObjectDocument(invalid: { $0 }) { scanner, member throws(JSONValidationError) in
            let start = scanner.offset
            try scanner.scanValue(allowNull: true, enclosingDepth: 1)
            if found == nil, scanner.slice(member.contents, equals: key) { found = start..<scanner.offset }
        }
        return found
    }
}

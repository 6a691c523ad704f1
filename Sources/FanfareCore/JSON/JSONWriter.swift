/// Writes JSON into a caller-owned buffer with a hard capacity. It never allocates.
///
/// Overflow is sticky and cheap to check: once a write does not fit, that write and every later one
/// is dropped, ``overflowed`` turns true, and ``count`` keeps growing as if the buffer were large
/// enough. So after one pass ``count`` is the exact size the document needs, fitted or not.
///
/// Commas and colons are inserted automatically. Structural misuse (a value in an object without a
/// key, `endArray()` closing an object, nesting deeper than ``maximumDepth``, two top-level values)
/// is a programming error and traps with `precondition`.
///
/// Strings are escaped for JSON: `"` `\` and every control character below U+0020 (`\b \f \n \r \t`,
/// others as `\u00XX`), plus U+2028/U+2029 as `\u2028`/`\u2029` (JavaScript line terminators). All other
/// Unicode passes through as UTF-8; ill-formed UTF-8 in ``string(utf8:)`` is replaced by U+FFFD so the
/// output is always valid JSON.
public struct JSONWriter {
    /// Containers may nest this deep (same limit as ``JSONValidator/maximumDepth``).
    public static let maximumDepth = 64

    @usableFromInline let base: UnsafeMutableRawPointer?
    /// Bytes that fit; writes beyond are dropped.
    public let capacity: Int
    @usableFromInline var logicalCount: Int = 0
    @usableFromInline var depth: Int = 0
    /// Bit d set: the container at depth d (0-based) is an object.
    @usableFromInline var objectLevels: UInt64 = 0
    /// Bit d set: the container at depth d already holds an element (the next one needs a comma).
    @usableFromInline var nonEmptyLevels: UInt64 = 0
    /// True between `key(_:)` and the key's value.
    @usableFromInline var awaitingValue = false
    @usableFromInline var wroteTopLevelValue = false

    /// Writes into `buffer`, at most `buffer.count` bytes.
    @inlinable
    public init(buffer: UnsafeMutableRawBufferPointer) {
        self.base = buffer.baseAddress
        self.capacity = buffer.count
    }

    /// Writes into the first `capacity` bytes of `buffer` (for a limit below the buffer's size).
    @inlinable
    public init(buffer: UnsafeMutableRawBufferPointer, capacity: Int) {
        precondition(capacity >= 0 && capacity <= buffer.count, "JSONWriter: capacity exceeds the buffer")
        self.base = buffer.baseAddress
        self.capacity = capacity
    }

    /// A writer with no buffer: it only measures (``count``) what the calls would produce; every write
    /// counts as an overflow, so ``overflowed`` is true once anything was written.
    @inlinable
    public static func counting() -> JSONWriter {
        JSONWriter(buffer: UnsafeMutableRawBufferPointer(start: nil, count: 0))
    }

    /// Bytes the document needs so far; equals the bytes written while ``overflowed`` is false.
    @inlinable public var count: Int { logicalCount }

    /// True once any write did not fit; the buffer then holds only a prefix.
    @inlinable public var overflowed: Bool { logicalCount > capacity }

    /// True when exactly one complete top-level value has been written.
    @inlinable public var isComplete: Bool { wroteTopLevelValue && depth == 0 }

    /// The bytes written so far (a prefix when ``overflowed``).
    @inlinable
    public var writtenBytes: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base, count: Swift.min(logicalCount, capacity))
    }

    // MARK: Containers

    @inlinable
    public mutating func beginObject() {
        openContainer(isObject: true, bracket: UInt8(ascii: "{"))
    }

    @inlinable
    public mutating func endObject() {
        closeContainer(isObject: true, bracket: UInt8(ascii: "}"))
    }

    @inlinable
    public mutating func beginArray() {
        openContainer(isObject: false, bracket: UInt8(ascii: "["))
    }

    @inlinable
    public mutating func endArray() {
        closeContainer(isObject: false, bracket: UInt8(ascii: "]"))
    }

    // MARK: Keys

    /// Writes an object key and its colon; the next call must write the value.
    @inlinable
    public mutating func key(_ name: StaticString) {
        beforeKey()
        name.withUTF8Buffer { writeQuoted(utf8: UnsafeRawBufferPointer($0)) }
        append(UInt8(ascii: ":"))
    }

    @inlinable
    public mutating func key(_ name: String) {
        beforeKey()
        writeQuoted(name)
        append(UInt8(ascii: ":"))
    }

    // MARK: Values

    @inlinable
    public mutating func string(_ value: String) {
        beforeValue()
        writeQuoted(value)
    }

    @inlinable
    public mutating func string(_ value: StaticString) {
        beforeValue()
        value.withUTF8Buffer { writeQuoted(utf8: UnsafeRawBufferPointer($0)) }
    }

    /// Writes UTF-8 bytes as a JSON string (ill-formed sequences become U+FFFD).
    @inlinable
    public mutating func string(utf8: UnsafeRawBufferPointer) {
        beforeValue()
        writeQuoted(utf8: utf8)
    }

    @inlinable
    public mutating func int(_ value: Int64) {
        beforeValue()
        writeInteger(value)
    }

    @inlinable
    public mutating func int(_ value: Int) {
        int(Int64(value))
    }

    /// Writes a finite double in its shortest round-trip form (`5.0`, `0.1`, `1e-05`, `1e+20`).
    ///
    /// Non-finite values have no JSON form: passing NaN or ±infinity traps (`precondition`), so callers
    /// check `isFinite` first and report a typed error (the payload encoder does). The text is the
    /// standard library's `description` form, which is always a valid JSON number for finite values.
    public mutating func double(_ value: Double) {
        precondition(value.isFinite, "JSONWriter.double: \(value) has no JSON representation")
        beforeValue()
        var sink = DoubleTextSink(writer: self)
        value.write(to: &sink)
        self = sink.writer
    }

    @inlinable
    public mutating func bool(_ value: Bool) {
        beforeValue()
        append(static: value ? "true" : "false")
    }

    @inlinable
    public mutating func null() {
        beforeValue()
        append(static: "null")
    }

    /// Embeds an already-validated JSON value verbatim (e.g. ``RawJSON`` bytes).
    @inlinable
    public mutating func raw(_ json: UnsafeRawBufferPointer) {
        assert(JSONValidator.validate(json) == nil, "JSONWriter.raw: bytes are not one valid JSON value")
        beforeValue()
        append(bytes: json)
    }

    // MARK: Structure bookkeeping

    @inlinable
    mutating func openContainer(isObject: Bool, bracket: UInt8) {
        beforeValue()
        precondition(depth < Self.maximumDepth, "JSONWriter: nesting deeper than \(Self.maximumDepth)")
        let bit: UInt64 = 1 << UInt64(depth)
        objectLevels = isObject ? objectLevels | bit : objectLevels & ~bit
        nonEmptyLevels &= ~bit
        depth += 1
        append(bracket)
    }

    @inlinable
    mutating func closeContainer(isObject: Bool, bracket: UInt8) {
        precondition(depth > 0, "JSONWriter: closing a container that was never opened")
        let bit: UInt64 = 1 << UInt64(depth - 1)
        precondition((objectLevels & bit != 0) == isObject, "JSONWriter: mismatched end of object/array")
        precondition(!awaitingValue, "JSONWriter: object closed after a key without a value")
        depth -= 1
        append(bracket)
    }

    @inlinable
    mutating func beforeKey() {
        precondition(depth > 0, "JSONWriter: key outside an object")
        let bit: UInt64 = 1 << UInt64(depth - 1)
        precondition(objectLevels & bit != 0, "JSONWriter: key inside an array")
        precondition(!awaitingValue, "JSONWriter: two keys in a row")
        if nonEmptyLevels & bit != 0 { append(UInt8(ascii: ",")) }
        nonEmptyLevels |= bit
        awaitingValue = true
    }

    @inlinable
    mutating func beforeValue() {
        guard depth > 0 else {
            precondition(!wroteTopLevelValue, "JSONWriter: a document holds one top-level value")
            wroteTopLevelValue = true
            return
        }
        let bit: UInt64 = 1 << UInt64(depth - 1)
        if objectLevels & bit != 0 {
            precondition(awaitingValue, "JSONWriter: value inside an object without key(_:)")
            awaitingValue = false
        } else {
            if nonEmptyLevels & bit != 0 { append(UInt8(ascii: ",")) }
            nonEmptyLevels |= bit
        }
    }

    // MARK: Bytes

    @inlinable
    mutating func append(_ byte: UInt8) {
        if logicalCount < capacity {
            base.unsafelyUnwrapped.storeBytes(of: byte, toByteOffset: logicalCount, as: UInt8.self)
        }
        logicalCount += 1
    }

    /// Appends all of `bytes` or, if they do not fit, none of them.
    @inlinable
    mutating func append(bytes: UnsafeRawBufferPointer) {
        let length = bytes.count
        if length > 0 && logicalCount + length <= capacity {
            (base.unsafelyUnwrapped + logicalCount).copyMemory(from: bytes.baseAddress!, byteCount: length)
        }
        logicalCount += length
    }

    @inlinable
    mutating func append(static text: StaticString) {
        append(bytes: UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    @usableFromInline
    mutating func writeInteger(_ value: Int64) {
        // Digits are produced least significant first into a stack buffer, then copied in order.
        var digits = InlineArray<20, UInt8>(repeating: 0)  // UInt64.max has 20 digits
        var magnitude = value.magnitude
        var first = 20
        repeat {
            first -= 1
            digits[first] = UInt8(truncatingIfNeeded: magnitude % 10) &+ UInt8(ascii: "0")
            magnitude /= 10
        } while magnitude != 0
        if value < 0 { append(UInt8(ascii: "-")) }
        digits.span.withUnsafeBytes { append(bytes: UnsafeRawBufferPointer(rebasing: $0[first...])) }
    }

    @usableFromInline
    mutating func writeQuoted(_ text: String) {
        var text = text  // withUTF8 is mutating; native strings are not copied
        text.withUTF8 { writeQuoted(utf8: UnsafeRawBufferPointer($0)) }
    }

    /// Writes `"…"` with escaping. Runs of bytes that need no escaping are copied in one go.
    @usableFromInline
    mutating func writeQuoted(utf8 text: UnsafeRawBufferPointer) {
        append(UInt8(ascii: "\""))
        var index = 0
        var runStart = 0
        while true {
            index = PlainASCII.runEnd(text, from: index)
            guard index < text.count else { break }
            let byte = text[index]
            if byte >= 0x80 {
                let length = UTF8Validation.multiByteSequenceLength(text, at: index)
                let isLineSeparator =
                    length == 3 && byte == 0xE2 && text[index + 1] == 0x80
                    && (text[index + 2] == 0xA8 || text[index + 2] == 0xA9)
                if length > 0 && !isLineSeparator {
                    index += length
                    continue
                }
                append(bytes: UnsafeRawBufferPointer(rebasing: text[runStart..<index]))
                if isLineSeparator {
                    append(static: text[index + 2] == 0xA8 ? "\\u2028" : "\\u2029")
                    index += 3
                } else {
                    append(static: "\u{FFFD}")  // ill-formed byte: replaced, never copied
                    index += 1
                }
                runStart = index
                continue
            }
            append(bytes: UnsafeRawBufferPointer(rebasing: text[runStart..<index]))
            writeEscape(byte)
            index += 1
            runStart = index
        }
        append(bytes: UnsafeRawBufferPointer(rebasing: text[runStart..<index]))
        append(UInt8(ascii: "\""))
    }

    @usableFromInline
    mutating func writeEscape(_ byte: UInt8) {
        assert(byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""): append(static: "\\\"")
        case UInt8(ascii: "\\"): append(static: "\\\\")
        case 0x0A: append(static: "\\n")
        case 0x0D: append(static: "\\r")
        case 0x09: append(static: "\\t")
        case 0x08: append(static: "\\b")
        case 0x0C: append(static: "\\f")
        default:
            append(static: "\\u00")
            let hexDigits: StaticString = "0123456789abcdef"
            append(hexDigits.utf8Start[Int(byte >> 4)])
            append(hexDigits.utf8Start[Int(byte & 0x0F)])
        }
    }
}

/// Receives `Double.write(to:)` output. The standard library formats into a stack buffer and hands it
/// to `_writeASCII`; implementing that requirement keeps the bytes out of a `String` (no allocation,
/// even for 24-character forms). `write(_:)` is the documented fallback and gives the same bytes.
struct DoubleTextSink: TextOutputStream {
    var writer: JSONWriter

    mutating func write(_ string: String) {
        var string = string
        string.withUTF8 { writer.append(bytes: UnsafeRawBufferPointer($0)) }
    }

    mutating func _writeASCII(_ buffer: UnsafeBufferPointer<UInt8>) {
        writer.append(bytes: UnsafeRawBufferPointer(buffer))
    }
}

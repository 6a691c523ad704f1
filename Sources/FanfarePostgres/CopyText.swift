import FanfareCore
import FanfareStorage
import NIOCore

/// Rows in COPY's text format (tab-separated, `\N` for NULL, backslash escapes), for `incoming`. Written straight
/// into the buffer, with no String per field: a batch of 100,000 registrations is about 25 MB of it.
enum CopyText {
    static func write(_ registration: TokenRegistration, ordinal: Int, appID: Int64, to buffer: inout ByteBuffer) {
        writeDecimal(Int64(ordinal), to: &buffer)
        // bytea as hex: `\x...`, its backslash escaped for COPY.
        buffer.writeStaticString("\t\\\\x")
        let token = registration.token
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: token.hexCount) { destination in
            token.writeLowercaseHex(to: destination.baseAddress!)
        }
        buffer.writeInteger(UInt8(ascii: "\t"))
        writeDecimal(Int64(registration.kind.rawValue), to: &buffer)
        for value in [registration.activityID, registration.deviceID, registration.attributesType] {
            buffer.writeInteger(UInt8(ascii: "\t"))
            writeText(value, to: &buffer)
        }
        buffer.writeInteger(UInt8(ascii: "\t"))
        writeDecimal(appID, to: &buffer)
        buffer.writeStaticString(registration.frequentUpdates ? "\tt" : "\tf")
        buffer.writeStaticString(registration.supportsBroadcast ? "\tt" : "\tf")
        buffer.writeInteger(UInt8(ascii: "\t"))
        writeArray(registration.channels, to: &buffer)
        buffer.writeInteger(UInt8(ascii: "\t"))
        writeDecimal(registration.createdAt, to: &buffer)
        buffer.writeInteger(UInt8(ascii: "\t"))
        writeDecimal(registration.lastSeenAt, to: &buffer)
        // The engine's shard hash (`DeviceToken.shardHash`) as its bit pattern: nodes load one shard's tokens
        // by it (`forEachRegistration(shards:of:)`).
        buffer.writeInteger(UInt8(ascii: "\t"))
        writeDecimal(Int64(bitPattern: token.shardHash), to: &buffer)
        buffer.writeInteger(UInt8(ascii: "\n"))
    }

    /// A text value with COPY's escapes; nil is NULL.
    static func writeText(_ value: String?, to buffer: inout ByteBuffer) {
        guard let value else {
            buffer.writeStaticString("\\N")
            return
        }
        for byte in value.utf8 { writeEscaped(byte, to: &buffer) }
    }

    /// A text[] literal, every element quoted with `"` and `\` escaped inside, then COPY's escapes over the
    /// whole literal (so a backslash of the literal is doubled once more).
    static func writeArray(_ elements: [String], to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "{"))
        for (index, element) in elements.enumerated() {
            if index > 0 { buffer.writeInteger(UInt8(ascii: ",")) }
            buffer.writeInteger(UInt8(ascii: "\""))
            for byte in element.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                    writeEscaped(UInt8(ascii: "\\"), to: &buffer)
                }
                writeEscaped(byte, to: &buffer)
            }
            buffer.writeInteger(UInt8(ascii: "\""))
        }
        buffer.writeInteger(UInt8(ascii: "}"))
    }

    /// One byte of a text field with COPY's escapes.
    @inline(__always)
    static func writeEscaped(_ byte: UInt8, to buffer: inout ByteBuffer) {
        switch byte {
        case UInt8(ascii: "\\"): buffer.writeStaticString("\\\\")
        case UInt8(ascii: "\t"): buffer.writeStaticString("\\t")
        case UInt8(ascii: "\n"): buffer.writeStaticString("\\n")
        case UInt8(ascii: "\r"): buffer.writeStaticString("\\r")
        default: buffer.writeInteger(byte)
        }
    }

    /// A signed decimal, without making a String.
    static func writeDecimal(_ value: Int64, to buffer: inout ByteBuffer) {
        // 20 digits and a sign cover every Int64; the magnitude as UInt64 covers Int64.min.
        var magnitude = value.magnitude
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 21) { digits in
            var start = 21
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if value < 0 {
                start -= 1
                digits[start] = UInt8(ascii: "-")
            }
            buffer.writeBytes(UnsafeBufferPointer(rebasing: digits[start..<21]))
        }
    }
}

extension CopyText {
    /// A row of `incoming_subscriptions`.
    static func write(
        _ subscription: BroadcastSubscription, ordinal: Int, appID: Int64, to buffer: inout ByteBuffer
    ) {
        writeDecimal(Int64(ordinal), to: &buffer)
        buffer.writeInteger(UInt8(ascii: "\t"))
        writeDecimal(appID, to: &buffer)
        for value in [subscription.activityID, subscription.deviceID, subscription.attributesType] {
            buffer.writeInteger(UInt8(ascii: "\t"))
            writeText(value, to: &buffer)
        }
        buffer.writeStaticString(subscription.frequentUpdates ? "\tt\t" : "\tf\t")
        writeArray(subscription.channels, to: &buffer)
        buffer.writeInteger(UInt8(ascii: "\t"))
        writeDecimal(subscription.createdAt, to: &buffer)
        buffer.writeInteger(UInt8(ascii: "\t"))
        writeDecimal(subscription.lastSeenAt, to: &buffer)
        buffer.writeInteger(UInt8(ascii: "\n"))
    }
}

import FanfareCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `close(2)`, reachable from inside `AcceptedPushLog` whose own `close()` shadows the name.
private func closeDescriptor(_ descriptor: Int32) {
    _ = close(descriptor)
}

/// Why the accepted-push log failed.
public enum AcceptedPushLogError: Error, Equatable, CustomStringConvertible {
    case cannotOpen(path: String, errno: Int32)
    case writeFailed(path: String, errno: Int32)

    public var description: String {
        switch self {
        case .cannotOpen(let path, let code):
            "cannot open accepted-push log '\(path)': \(String(cString: strerror(code))); check the directory exists and is writable"
        case .writeFailed(let path, let code):
            "cannot write accepted-push log '\(path)': \(String(cString: strerror(code))); check free disk space"
        }
    }
}

/// A JSON-lines log of accepted pushes, one object per line:
///
/// ```
/// {"time":1735689600123,"token":"<hex>","topic":"com.example.fanfare.push-type.liveactivity",
///  "push-type":"liveactivity","priority":10,"apns-id":"<uuid>","expiration":0,"collapse-id":null,
///  "environment":"production","bundle-id":"com.example.fanfare","key-id":"KEYID00001","team-id":"TEAMID0001",
///  "payload":{"aps":{...}}}
/// ```
/// (shown wrapped; each record is a single line). `time` is milliseconds since the epoch; `priority` is 10
/// when the header was absent; absent headers are `null`; a broadcast push has `"token":null` and an extra
/// `"channel-id"` and `"apns-request-id"` (the request's, or null). `environment` is the listener's the push
/// arrived at, `bundle-id` the app its topic (or broadcast path) named, `key-id` and `team-id` the `kid` and `iss` of
/// the provider token it was accepted with (`AcceptedPushOrigin`; null when not known). `payload` is the body
/// re-emitted without insignificant whitespace; a body that is not
/// valid JSON (when the simulator's JSON check is off) is `"payload":null` plus `"payload-text":"…"`.
///
/// `apns-id` is the response's: the request's own when it sent a valid one (lower-cased), so a push sent
/// twice with the same `apns-id` shows up as two lines with the same id.
///
/// Threading: one log object per worker thread (not thread-safe), all of them may open the same path.
/// The file is opened with `O_APPEND` and each flush is one `write(2)` of whole lines, so lines from
/// different workers never interleave. Records are buffered and written when the buffer cannot take the
/// next record, on `flush()` and on `close()`/deinit.
///
/// Guarantees (as `APNsSimulator` uses it): a push's record is handed to the kernel with `write(2)` before
/// its 200 is written to the connection (each worker flushes before its connections produce output: one
/// write per batch of responses, not per push). So every push a client saw answered 200 is in the file even
/// if the simulator is then killed with SIGKILL: the page cache outlives the process. Not promised:
/// surviving a machine crash or power loss (no fsync), and the converse (a line whose 200 was lost with a
/// reset or killed connection is there although no client saw it: that push reached "APNs"). A kill in the
/// middle of a `write(2)` can leave the last line cut short; its 200s had not been sent. The next
/// `AcceptedPushLog` on the file ends such a line with a newline first, so readers can skip the one line
/// that is not valid JSON. A failed write (disk full) drops the buffered records and throws; the simulator
/// counts it (`SimulatorStats.acceptedLogWriteFailures`) and the guarantee does not hold for those records.
public final class AcceptedPushLog {
    public static let defaultBufferCapacity = 256 * 1024
    /// Smallest buffer accepted: room for one worst-case record from a default-sized `RequestHead`.
    public static let minimumBufferCapacity = 64 * 1024

    public let path: String
    @exclusivity(unchecked) private var descriptor: Int32
    private let buffer: UnsafeMutableRawBufferPointer
    @exclusivity(unchecked) private var used = 0
    /// Records appended so far.
    @exclusivity(unchecked) public private(set) var recordCount = 0

    public init(path: String, bufferCapacity: Int = AcceptedPushLog.defaultBufferCapacity) throws(AcceptedPushLogError)
    {
        precondition(bufferCapacity >= Self.minimumBufferCapacity, "log buffer too small")
        // 0600: the log holds device tokens and payloads.
        let descriptor = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .cannotOpen(path: path, errno: errno) }
        if let code = Self.terminateCutLine(descriptor) {
            closeDescriptor(descriptor)
            throw .writeFailed(path: path, errno: code)
        }
        self.path = path
        self.descriptor = descriptor
        buffer = .allocate(byteCount: bufferCapacity, alignment: 16)
    }

    /// A file whose last byte is not a newline ends in a line cut short by a killed writer: end it, so the
    /// next record starts on a line of its own. Returns errno on failure.
    private static func terminateCutLine(_ descriptor: Int32) -> Int32? {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return errno }
        guard status.st_size > 0 else { return nil }
        var last: UInt8 = 0
        guard pread(descriptor, &last, 1, status.st_size - 1) == 1 else { return errno }
        guard last != UInt8(ascii: "\n") else { return nil }
        var newline = UInt8(ascii: "\n")
        while write(descriptor, &newline, 1) != 1 {
            if errno != EINTR { return errno }
        }
        return nil
    }

    /// Whether records are waiting for `flush()`.
    @inline(__always)
    public var hasBufferedRecords: Bool { used > 0 }

    /// The most bytes one record can take for a request head of these capacities (size a buffer with it). The
    /// origin's key and team come from the JWT, which is in the arena: the arena counts twice. A bundle id is at most
    /// 255 bytes (`SimulatorConfiguration.validate`).
    public static func worstCaseRecordBytes(arenaCapacity: Int, bodyCapacity: Int) -> Int {
        Self.fixedRecordBytes + 6 * (36 + 255 + 2 * arenaCapacity + bodyCapacity)
    }

    /// Keys, punctuation, numbers and an origin's environment.
    static let fixedRecordBytes = 512

    deinit {
        try? close()
        buffer.deallocate()
    }

    /// Adds one accepted push. `apnsID` is the `apns-id` of the response (echoed or generated); `origin` says where
    /// it arrived and with which key.
    public func append(
        _ head: borrowing RequestHead, apnsID: UnsafeRawBufferPointer, now: SimulatorInstant,
        origin: AcceptedPushOrigin = AcceptedPushOrigin()
    ) throws(AcceptedPushLogError) {
        precondition(descriptor >= 0, "log is closed")
        let bound = Self.recordBound(head, apnsID: apnsID, origin: origin)
        // Size the buffer with worstCaseRecordBytes for the heads it logs; this is a programming error.
        precondition(bound <= buffer.count, "a record cannot fit the log buffer; raise bufferCapacity")
        if bound > buffer.count - used { try flush() }

        let start = used
        put("{\"time\":")
        used += DecimalWriter.write(now.milliseconds, into: buffer, at: used)

        let path = head.value(.path)
        let route = path.map { RequestRoute.classify(path: $0) } ?? .unknown
        put(",\"token\":")
        if route == .device, let path {
            putString(RequestRoute.deviceToken(inPath: path))
        } else {
            put("null")
        }
        if route == .broadcast {
            put(",\"channel-id\":")
            putOptionalString(head.value(.apnsChannelID))
            // The sender's id for the broadcast (a resend carries the same one); null when it sent none.
            put(",\"apns-request-id\":")
            putOptionalString(head.value(.apnsRequestID))
        }
        put(",\"topic\":")
        putOptionalString(head.value(.apnsTopic))
        put(",\"push-type\":")
        putOptionalString(head.value(.apnsPushType))
        put(",\"priority\":")
        if let priority = head.value(.apnsPriority), let number = HeaderSyntax.parseNonNegativeInteger(priority) {
            used += DecimalWriter.write(number, into: buffer, at: used)
        } else {
            put("10")
        }
        put(",\"apns-id\":")
        putString(apnsID)
        put(",\"expiration\":")
        if let expiration = head.value(.apnsExpiration), let number = HeaderSyntax.parseNonNegativeInteger(expiration) {
            used += DecimalWriter.write(number, into: buffer, at: used)
        } else {
            put("null")
        }
        put(",\"collapse-id\":")
        putOptionalString(head.value(.apnsCollapseID))
        putOrigin(origin)
        put(",\"payload\":")
        let body = head.body
        if head.isBodyFullyStored, body.count > 0, SimulatorJSON.isValid(body) {
            used += SimulatorJSON.writeMinified(body, into: buffer, at: used)
        } else {
            put("null,\"payload-text\":")
            putString(body)
        }
        put("}\n")
        assert(used - start <= bound, "record bound underestimated")
        recordCount += 1
    }

    /// Writes buffered records to the file.
    public func flush() throws(AcceptedPushLogError) {
        guard used > 0 else { return }
        var offset = 0
        while offset < used {
            let result = write(descriptor, buffer.baseAddress! + offset, used - offset)
            if result < 0 {
                if errno == EINTR { continue }
                let code = errno
                used = 0  // drop what cannot be written rather than retrying forever
                throw .writeFailed(path: path, errno: code)
            }
            offset += result
        }
        used = 0
    }

    /// Flushes and closes the file; later appends are a programming error.
    public func close() throws(AcceptedPushLogError) {
        guard descriptor >= 0 else { return }
        defer {
            closeDescriptor(descriptor)
            descriptor = -1
        }
        try flush()
    }

    // MARK: - Record building (no allocation)

    /// An upper bound of one record's size: fixed keys plus 6 bytes per value byte (the `\u00XX` escape).
    static func recordBound(
        _ head: borrowing RequestHead, apnsID: UnsafeRawBufferPointer, origin: AcceptedPushOrigin
    ) -> Int {
        let valueBytes =
            apnsID.count + head.body.count + (head.value(.path)?.count ?? 0)
            + (head.value(.apnsChannelID)?.count ?? 0) + (head.value(.apnsRequestID)?.count ?? 0)
            + (head.value(.apnsTopic)?.count ?? 0)
            + (head.value(.apnsPushType)?.count ?? 0) + (head.value(.apnsCollapseID)?.count ?? 0)
            + (origin.bundleID?.count ?? 0) + (origin.keyID?.utf8.count ?? 0) + (origin.teamID?.utf8.count ?? 0)
        return Self.fixedRecordBytes + 6 * valueBytes
    }

    /// `"environment"`, `"bundle-id"`, `"key-id"` and `"team-id"`: interned or borrowed bytes, nothing built per line.
    private func putOrigin(_ origin: AcceptedPushOrigin) {
        put(",\"environment\":")
        switch origin.environment {
        case .production?: put("\"production\"")
        case .sandbox?: put("\"sandbox\"")
        case nil: put("null")
        }
        put(",\"bundle-id\":")
        putOptionalString(origin.bundleID)
        put(",\"key-id\":")
        putOptionalString(origin.keyID)
        put(",\"team-id\":")
        putOptionalString(origin.teamID)
    }

    private func put(_ literal: StaticString) {
        literal.withUTF8Buffer { bytes in
            (buffer.baseAddress! + used).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            used += bytes.count
        }
    }

    private func putByte(_ byte: UInt8) {
        buffer[used] = byte
        used += 1
    }

    private func putOptionalString(_ value: UnsafeRawBufferPointer?) {
        if let value { putString(value) } else { put("null") }
    }

    /// A `String`'s UTF-8 in place (a key or team id is a small string: no allocation).
    private func putOptionalString(_ value: String?) {
        guard var value else { return put("null") }
        value.withUTF8 { putString(UnsafeRawBufferPointer($0)) }
    }

    /// A JSON string: quotes, backslash and control bytes escaped; valid UTF-8 kept; invalid bytes → U+FFFD.
    private func putString(_ value: UnsafeRawBufferPointer) {
        putByte(UInt8(ascii: "\""))
        var index = 0
        while index < value.count {
            let byte = value[index]
            switch byte {
            case UInt8(ascii: "\""):
                put("\\\"")
            case UInt8(ascii: "\\"):
                put("\\\\")
            case 0x0A:
                put("\\n")
            case 0x0D:
                put("\\r")
            case 0x09:
                put("\\t")
            case 0x00..<0x20:
                put("\\u00")
                putByte(Self.hexDigit(byte >> 4))
                putByte(Self.hexDigit(byte & 0xF))
            case 0x20..<0x80:
                putByte(byte)
            default:
                let length = UTF8Validation.multiByteSequenceLength(value, at: index)
                if length > 0 {
                    for offset in 0..<length { putByte(value[index + offset]) }
                    index += length
                    continue
                }
                put("\\ufffd")
            }
            index += 1
        }
        putByte(UInt8(ascii: "\""))
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}

/// Where an accepted push arrived and with which provider key, for its log record (`AcceptedPushLog.append`).
public struct AcceptedPushOrigin {
    /// The environment of the listener it arrived at.
    public var environment: SimulatorConfiguration.Environment?
    /// The bundle id of the app its topic (or broadcast path) named; the bytes must outlive the `append` call.
    public var bundleID: UnsafeRawBufferPointer?
    /// The provider token's `kid` and `iss`.
    public var keyID: String?
    public var teamID: String?

    public init(
        environment: SimulatorConfiguration.Environment? = nil, bundleID: UnsafeRawBufferPointer? = nil,
        keyID: String? = nil, teamID: String? = nil
    ) {
        self.environment = environment
        self.bundleID = bundleID
        self.keyID = keyID
        self.teamID = teamID
    }
}

import FanfareCore

/// Writes APNs error bodies — `{"reason":"X"}` or `{"reason":"X","timestamp":<ms>}` — into caller
/// buffers without allocating. The per-reason prefixes are built once; the same bytes serve as GOAWAY
/// debug data.
public struct ErrorResponseBodies: Sendable {
    /// `{"reason":"<Reason>"` for each reason, by `ReasonTable` index.
    private let prefixes: [[UInt8]]
    /// Bytes needed for the longest body, timestamp included; size response buffers with it.
    public let maximumByteCount: Int

    /// Shared, immutable; built on first use.
    public static let shared = ErrorResponseBodies()

    public init() {
        prefixes = ReasonTable.all.map { Array("{\"reason\":\"\($0.rawValue)\"".utf8) }
        maximumByteCount = (prefixes.map(\.count).max() ?? 0) + Self.timestampKey.count + 20 + 1
    }

    private static let timestampKey = Array(",\"timestamp\":".utf8)

    /// The body for a rejection: its byte count written at the start of `buffer`.
    /// Precondition: `buffer.count >= maximumByteCount` (or at least the body's size).
    @discardableResult
    public func write(reason: APNsReason, timestamp: Int64?, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let prefix = prefixes[ReasonTable.index(of: reason)]
        let needed = prefix.count + 1 + (timestamp == nil ? 0 : Self.timestampKey.count + 20)
        precondition(buffer.count >= needed, "error body buffer too small")
        var written = copy(prefix, into: buffer, at: 0)
        if let timestamp {
            written += copy(Self.timestampKey, into: buffer, at: written)
            written += DecimalWriter.write(timestamp, into: buffer, at: written)
        }
        buffer[written] = UInt8(ascii: "}")
        return written + 1
    }

    /// The body for a decision; 0 bytes for `.accept` (a 200 has no body).
    @discardableResult
    public func write(_ decision: SimulatorDecision, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        switch decision {
        case .accept: return 0
        case .reject(let reason, let timestamp): return write(reason: reason, timestamp: timestamp, into: buffer)
        }
    }

    private func copy(_ bytes: [UInt8], into buffer: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        bytes.withUnsafeBytes { source in
            (buffer.baseAddress! + offset).copyMemory(from: source.baseAddress!, byteCount: source.count)
        }
        return bytes.count
    }
}

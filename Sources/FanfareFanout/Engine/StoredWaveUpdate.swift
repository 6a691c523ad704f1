import FanfareClient
import FanfareCore
import FanfareStorage

/// A stored wave (`WaveRecord`) made sendable again on this engine: after a restart (`resume`) or on another node
/// (`startShared`). Its update and payload as published, and its times moved onto this process's monotonic clock.
struct StoredWaveUpdate {
    let update: ChannelUpdate
    let payload: PushPayload
    /// When it was published, on the monotonic clock (its age kept; 1 if older than the clock).
    let publishedAt: UInt64
    /// Its `freshUntil` on the monotonic clock; 0 when it has none.
    let deadline: UInt64
    /// A start on a linked channel: the body for push-to-start tokens that support broadcast (nil: none, or the
    /// stored one does not parse, and those tokens get `payload`).
    let channelPayload: PushPayload?

    /// Why a record cannot be sent: its event is unknown, or its payload does not parse.
    enum Unusable: Error, CustomStringConvertible {
        case event(String)
        case payload(String)

        var description: String {
            switch self {
            case .event(let event): "has event '\(event)'"
            case .payload(let error): "has a stored payload that is unusable (\(error))"
            }
        }
    }

    init(_ record: WaveRecord, wallNow: Int64, wallMilliseconds: Int64, monotonicNow: UInt64) throws(Unusable) {
        guard let event = LiveActivityEvent(rawValue: record.event) else { throw .event(record.event) }
        do {
            payload = try record.payload.withUnsafeBytes { bytes throws(PayloadError) in try PushPayload(copying: bytes)
            }
        } catch {
            throw .payload("\(error)")
        }
        channelPayload = record.channelPayload.flatMap { bytes in
            try? bytes.withUnsafeBytes { bytes throws(PayloadError) in try PushPayload(copying: bytes) }
        }
        var content = LiveActivityContent(event: event, timestamp: record.timestamp)
        content.dismissalDate = record.dismissalDate
        update = ChannelUpdate(
            channel: record.channel, content: content, priority: UpdatePriority(rawValue: record.priority) ?? .auto,
            freshUntil: record.freshUntil, collapseID: record.collapseID)
        let age = UInt64(max(0, wallMilliseconds - record.publishedAt)) &* 1_000_000
        publishedAt = monotonicNow > age ? monotonicNow - age : 1
        deadline =
            record.freshUntil.map { freshUntil -> UInt64 in
                let ahead = max(0, min(freshUntil - wallNow, FanoutEngine.longestFreshness))
                return monotonicNow &+ UInt64(ahead) * 1_000_000_000
            } ?? 0
    }
}

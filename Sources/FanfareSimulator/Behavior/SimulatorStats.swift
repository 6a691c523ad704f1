import FanfareCore
import Synchronization

/// One worker's counters. Plain integers, mutated only by the worker's thread; the per-reason table is
/// preallocated, so `record` never allocates. Workers publish copies to a `SimulatorStatsBoard`.
public struct SimulatorStats: Sendable, Equatable {
    /// 200 responses.
    public private(set) var accepted = 0
    /// Rejections by reason, indexed by `ReasonTable.index(of:)`.
    private var rejections: [Int]
    /// Request body bytes received (all requests).
    public var requestBodyBytes = 0
    /// Body bytes of accepted pushes.
    public var acceptedPayloadBytes = 0
    public var connectionsOpened = 0
    public var connectionsClosed = 0
    public var goAwaysSent = 0
    /// Streams refused with RST_STREAM (REFUSED_STREAM): the client exceeded the stream limit, the worker
    /// reached `maxStreamsPerWorker`, a GOAWAY was sent, or the refusal was injected.
    public var streamsRefused = 0
    /// Of `streamsRefused`, those refused on purpose (`refusedStreamProbability`).
    public var streamsRefusedInjected = 0
    /// Malformed requests (RFC 9113 §8.1.1: bad field names or values, pseudo-header misuse, connection-specific
    /// fields, a body that differs from its content-length) reset with PROTOCOL_ERROR.
    public var streamsMalformed = 0
    /// Connections reset abruptly on purpose (`connectionReset`).
    public var connectionsReset = 0
    /// Responses held back on purpose (`heldResponses`).
    public var responsesHeld = 0
    /// Accepted-push log writes that failed (their records are lost; see `AcceptedPushLog`).
    public var acceptedLogWriteFailures = 0
    /// Channel-file saves that failed (the management port's changes since were undone, its connections reset).
    public var channelSaveFailures = 0
    /// Most streams one worker held at once (over all its connections).
    public var maxStreamsInUse = 0
    /// Times a worker grew its stream pool (each an allocation of one chunk of request heads).
    public var streamPoolGrowths = 0

    public init() {
        rejections = Array(repeating: 0, count: ReasonTable.count)
    }

    /// Counts one answered request.
    public mutating func record(_ decision: SimulatorDecision, bodyBytes: Int) {
        requestBodyBytes &+= bodyBytes
        switch decision {
        case .accept:
            accepted &+= 1
            acceptedPayloadBytes &+= bodyBytes
        case .reject(let reason, _):
            rejections[ReasonTable.index(of: reason)] &+= 1
        }
    }

    /// Rejections with `reason`.
    public func count(of reason: APNsReason) -> Int {
        rejections[ReasonTable.index(of: reason)]
    }

    /// Responses with HTTP `status` (200 = accepted).
    public func count(status: Int) -> Int {
        if status == 200 { return accepted }
        var total = 0
        for (index, reason) in ReasonTable.all.enumerated() where reason.status == status {
            total += rejections[index]
        }
        return total
    }

    /// All responses.
    public var totalResponses: Int { accepted + rejections.reduce(0, +) }

    /// All rejections.
    public var totalRejections: Int { rejections.reduce(0, +) }

    /// Adds another worker's counters.
    public mutating func merge(_ other: SimulatorStats) {
        accepted += other.accepted
        for index in 0..<rejections.count { rejections[index] += other.rejections[index] }
        requestBodyBytes += other.requestBodyBytes
        acceptedPayloadBytes += other.acceptedPayloadBytes
        connectionsOpened += other.connectionsOpened
        connectionsClosed += other.connectionsClosed
        goAwaysSent += other.goAwaysSent
        streamsRefused += other.streamsRefused
        streamsRefusedInjected += other.streamsRefusedInjected
        streamsMalformed += other.streamsMalformed
        connectionsReset += other.connectionsReset
        responsesHeld += other.responsesHeld
        acceptedLogWriteFailures += other.acceptedLogWriteFailures
        channelSaveFailures += other.channelSaveFailures
        maxStreamsInUse = max(maxStreamsInUse, other.maxStreamsInUse)
        streamPoolGrowths += other.streamPoolGrowths
    }

    /// Copies `other` into this value's own storage, element by element, so the two never share the
    /// per-reason table (a later `record` on either then cannot trigger a copy-on-write allocation).
    public mutating func overwrite(with other: SimulatorStats) {
        accepted = other.accepted
        for index in 0..<rejections.count { rejections[index] = other.rejections[index] }
        requestBodyBytes = other.requestBodyBytes
        acceptedPayloadBytes = other.acceptedPayloadBytes
        connectionsOpened = other.connectionsOpened
        connectionsClosed = other.connectionsClosed
        goAwaysSent = other.goAwaysSent
        streamsRefused = other.streamsRefused
        streamsRefusedInjected = other.streamsRefusedInjected
        streamsMalformed = other.streamsMalformed
        connectionsReset = other.connectionsReset
        responsesHeld = other.responsesHeld
        acceptedLogWriteFailures = other.acceptedLogWriteFailures
        channelSaveFailures = other.channelSaveFailures
        maxStreamsInUse = other.maxStreamsInUse
        streamPoolGrowths = other.streamPoolGrowths
    }

    /// Response lines ("200 OK: N", "410 Unregistered: N", …, by status then reason; reasons never seen
    /// are omitted) followed by the connection counters.
    public func summary() -> String {
        var lines = ["200 OK: \(accepted)"]
        for (reason, count) in rejectionsByStatus() {
            lines.append("\(reason.status) \(reason.rawValue): \(count)")
        }
        lines.append("total responses: \(totalResponses)")
        lines.append("request body bytes: \(requestBodyBytes)")
        lines.append("accepted payload bytes: \(acceptedPayloadBytes)")
        lines.append("connections opened: \(connectionsOpened)")
        lines.append("connections closed: \(connectionsClosed)")
        lines.append("GOAWAYs sent: \(goAwaysSent)")
        lines.append("streams refused: \(streamsRefused) (injected: \(streamsRefusedInjected))")
        if streamsMalformed > 0 { lines.append("malformed requests reset: \(streamsMalformed)") }
        lines.append("connections reset: \(connectionsReset)")
        lines.append("responses held: \(responsesHeld)")
        lines.append("most streams at once: \(maxStreamsInUse)")
        if acceptedLogWriteFailures > 0 { lines.append("ACCEPTED-LOG WRITE FAILURES: \(acceptedLogWriteFailures)") }
        if channelSaveFailures > 0 { lines.append("CHANNEL FILE SAVE FAILURES: \(channelSaveFailures)") }
        return lines.joined(separator: "\n")
    }

    /// The same data as one JSON object:
    /// `{"accepted":N,"byStatus":{"200":N,...},"byReason":{"Unregistered":N,...},"requestBodyBytes":N,...}`.
    public func summaryJSON() -> String {
        var statuses: [Int: Int] = [200: accepted]
        for (reason, count) in rejectionsByStatus() { statuses[reason.status, default: 0] += count }
        let byStatus = statuses.keys.sorted().map { "\"\($0)\":\(statuses[$0]!)" }.joined(separator: ",")
        // Reason strings are ASCII letters (APNsReason raw values), so they need no JSON escaping.
        let byReason = rejectionsByStatus().map { "\"\($0.0.rawValue)\":\($0.1)" }.joined(separator: ",")
        return "{\"accepted\":\(accepted),\"rejected\":\(totalRejections),\"byStatus\":{\(byStatus)},"
            + "\"byReason\":{\(byReason)},\"requestBodyBytes\":\(requestBodyBytes),"
            + "\"acceptedPayloadBytes\":\(acceptedPayloadBytes),\"connectionsOpened\":\(connectionsOpened),"
            + "\"connectionsClosed\":\(connectionsClosed),\"goAwaysSent\":\(goAwaysSent),"
            + "\"streamsRefused\":\(streamsRefused),\"streamsRefusedInjected\":\(streamsRefusedInjected),"
            + "\"connectionsReset\":\(connectionsReset),\"responsesHeld\":\(responsesHeld),"
            + "\"maxStreamsInUse\":\(maxStreamsInUse),\"acceptedLogWriteFailures\":\(acceptedLogWriteFailures),\"channelSaveFailures\":\(channelSaveFailures),"
            + "\"streamsMalformed\":\(streamsMalformed)}"
    }

    /// Non-zero rejection counts, ordered by status, then reason name.
    private func rejectionsByStatus() -> [(APNsReason, Int)] {
        ReasonTable.all.enumerated()
            .filter { rejections[$0.offset] > 0 }
            .map { ($0.element, rejections[$0.offset]) }
            .sorted { ($0.0.status, $0.0.rawValue) < ($1.0.status, $1.0.rawValue) }
    }
}

/// Where workers publish their counters for the control plane (CLI progress line, final summary).
/// Each worker calls `publish` now and then (e.g. once per second and at exit) — a lock per publish,
/// never per request; readers merge the latest snapshots.
public final class SimulatorStatsBoard: Sendable {
    private let slots: Mutex<[SimulatorStats]>
    public let workerCount: Int

    public init(workerCount: Int) {
        precondition(workerCount > 0, "a stats board needs at least one worker")
        self.workerCount = workerCount
        slots = Mutex(Array(repeating: SimulatorStats(), count: workerCount))
    }

    /// Replaces worker `worker`'s snapshot with `stats` (copied element-wise, see `overwrite`).
    public func publish(worker: Int, _ stats: SimulatorStats) {
        precondition(worker >= 0 && worker < workerCount, "worker index out of range")
        slots.withLock { $0[worker].overwrite(with: stats) }
    }

    /// The latest snapshot of one worker.
    public func snapshot(worker: Int) -> SimulatorStats {
        precondition(worker >= 0 && worker < workerCount, "worker index out of range")
        return slots.withLock { slot in
            var copy = SimulatorStats()
            copy.overwrite(with: slot[worker])
            return copy
        }
    }

    /// All workers' latest snapshots merged.
    public func total() -> SimulatorStats {
        slots.withLock { slot in
            var merged = SimulatorStats()
            for stats in slot { merged.merge(stats) }
            return merged
        }
    }
}

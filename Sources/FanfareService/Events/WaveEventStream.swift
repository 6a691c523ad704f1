import FanfareFanout
internal import Foundation
import Synchronization

/// A wave's progress as Server-Sent Events: `retry: 1000`, then a `progress` event at once and every
/// `interval` while the wave runs, then `complete` with the final report and the end of the stream; or
/// `shutdown` if the service stops first. A wave that completed before a restart (its final report read from
/// the registry) gets `retry: 1000` and its `complete` event at once. Pull-based: nothing runs while the client
/// is not reading, and a client that goes away ends it.
package struct WaveEventStream: AsyncSequence, Sendable {
    package typealias Element = ArraySlice<UInt8>

    /// What the events report.
    package enum Source: Sendable {
        /// A wave the engine runs or retains.
        case live(Wave)
        /// The final report the wave store kept.
        case stored(WaveReport)
        /// Several nodes: the report as the store sums it, read again every interval until complete.
        case shared(WaveReport, read: @Sendable () async -> WaveReport?)
    }

    let source: Source
    let interval: Duration
    let stopping: StopSignal
    /// Held while the stream lives (`EventStreamLimiter`); nil when streams are not capped.
    let ticket: EventStreamLimiter.Ticket?
    let encode: @Sendable (WaveReport) -> [UInt8]

    package func makeAsyncIterator() -> Iterator {
        Iterator(stream: self)
    }

    package struct Iterator: AsyncIteratorProtocol {
        let stream: WaveEventStream
        var sent = 0
        var finished = false

        package mutating func next() async -> ArraySlice<UInt8>? {
            guard !finished else { return nil }
            let wave: Wave
            switch stream.source {
            case .stored(let report):
                sent = 1
                finished = true
                return ArraySlice(Array("retry: 1000\n\n".utf8) + event("complete", stream.encode(report)))
            case .shared(let first, let read):
                return await nextShared(first, read)
            case .live(let live):
                wave = live
            }
            if sent == 0 {
                sent = 1
                return ArraySlice(Array("retry: 1000\n\n".utf8) + event("progress", stream.encode(wave.report)))
            }
            // Wait one interval, waking early for completion or shutdown.
            let step = Duration.milliseconds(20)
            var waited = Duration.zero
            while waited < stream.interval && !wave.isComplete && !stream.stopping.isSet {
                try? await Task.sleep(for: step)
                waited += step
                if Task.isCancelled { return nil }
            }
            sent += 1
            if wave.isComplete {
                finished = true
                return ArraySlice(event("complete", stream.encode(wave.report)))
            }
            if stream.stopping.isSet {
                finished = true
                return ArraySlice(event("shutdown", Array(#"{"reason":"the service is shutting down"}"#.utf8)))
            }
            return ArraySlice(event("progress", stream.encode(wave.report)))
        }

        private mutating func nextShared(
            _ first: WaveReport, _ read: @Sendable () async -> WaveReport?
        ) async -> ArraySlice<UInt8>? {
            var report = first
            if sent > 0 {
                let step = Duration.milliseconds(20)
                var waited = Duration.zero
                while waited < stream.interval && !stream.stopping.isSet {
                    try? await Task.sleep(for: step)
                    waited += step
                    if Task.isCancelled { return nil }
                }
                if stream.stopping.isSet {
                    finished = true
                    sent += 1
                    return ArraySlice(event("shutdown", Array(#"{"reason":"the service is shutting down"}"#.utf8)))
                }
                guard let latest = await read() else { return nil }
                report = latest
            }
            let opening = sent == 0 ? Array("retry: 1000\n\n".utf8) : []
            sent += 1
            if report.isComplete { finished = true }
            return ArraySlice(opening + event(report.isComplete ? "complete" : "progress", stream.encode(report)))
        }

        private func event(_ name: String, _ data: [UInt8]) -> [UInt8] {
            Array("id: \(sent)\nevent: \(name)\ndata: ".utf8) + data + Array("\n\n".utf8)
        }
    }
}

/// Set once, read from anywhere (the service is stopping: long-running answers end).
package final class StopSignal: Sendable {
    private let flag = Atomic<Bool>(false)
    package init() {}
    package var isSet: Bool { flag.load(ordering: .acquiring) }
    package func set() { flag.store(true, ordering: .releasing) }
}

extension WaveEventStream.Source {
    /// The report as it is now (a shared one: as last read).
    package var report: WaveReport {
        switch self {
        case .live(let wave): wave.report
        case .stored(let report), .shared(let report, _): report
        }
    }
}

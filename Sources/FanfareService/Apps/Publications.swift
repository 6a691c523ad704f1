import FanfareFanout
import FanfareStorage

/// One part of a publication (a wave on one environment's engine), wherever it is known.
enum PartSource: Sendable {
    /// The engine runs or retains it.
    case live(Wave)
    /// The final report the wave store kept.
    case stored(WaveReport)

    /// Wave `id` on one of `engines` (memory first, then the store; nil if none of them has it: another app's
    /// wave, or pruned).
    static func find(_ id: UInt64, in engines: [FanoutEngine]) throws -> PartSource? {
        for engine in engines {
            if let wave = engine.wave(id: id) { return .live(wave) }
        }
        for engine in engines {
            if let report = try engine.report(id: id) { return .stored(report) }
        }
        return nil
    }

    var report: WaveReport {
        switch self {
        case .live(let wave): wave.report
        case .stored(let report): report
        }
    }

    /// The publication as one report: its first wave's id, channel and event; counts summed over its parts.
    static func merged(_ parts: [PartSource]) -> WaveReport {
        Publications.merged(parts.map(\.report))
    }
}

/// A publication is one publish on an app that sends in several environments: a wave per environment, named
/// by the first one's id (`WaveStore.publicationParts`). The API shows it as one wave.
enum Publications {
    /// Reports summed: outcomes and attempts add up; the first answer is the earliest, the makespan the longest;
    /// the state is the least advanced part's (running before paused before interrupted before complete).
    static func merged(_ reports: [WaveReport]) -> WaveReport {
        precondition(!reports.isEmpty, "a publication has at least one wave")
        var merged = reports[0]
        for part in reports.dropFirst() {
            merged.targeted += part.targeted
            merged.sent += part.sent
            merged.delivered += part.delivered
            merged.failed += part.failed
            merged.superseded += part.superseded
            merged.downgraded += part.downgraded
            merged.expired += part.expired
            merged.invalidated += part.invalidated
            merged.retried += part.retried
            merged.possibleDuplicates += part.possibleDuplicates
            merged.resentAfterRestart += part.resentAfterRestart
            merged.restarts = max(merged.restarts, part.restarts)
            merged.failedByReason.merge(part.failedByReason, uniquingKeysWith: +)
            merged.timeToFirstAck = [merged.timeToFirstAck, part.timeToFirstAck].compactMap { $0 }.min()
            merged.makespan = [merged.makespan, part.makespan].compactMap { $0 }.max()
            merged.state = rank(part.state) < rank(merged.state) ? part.state : merged.state
            if merged.broadcast == nil { merged.broadcast = part.broadcast }
        }
        return merged
    }

    private static func rank(_ state: WaveState) -> Int {
        switch state {
        case .running: 0
        case .paused: 1
        case .interrupted: 2
        case .complete: 3
        }
    }

    /// Reports newest first, each publication once (its parts merged into its first wave's report).
    static func group(_ reports: [WaveReport], store: any WaveStore) throws -> [WaveReport] {
        let byID = Dictionary(reports.map { ($0.id, $0) }) { first, _ in first }
        var partOfAnother = Set<UInt64>()
        var grouped: [WaveReport] = []
        for report in reports.sorted(by: { $0.id < $1.id }) where !partOfAnother.contains(report.id) {
            let parts = try store.publicationParts(of: report.id)
            guard parts.count > 1 else {
                grouped.append(report)
                continue
            }
            partOfAnother.formUnion(parts.dropFirst())
            grouped.append(merged(parts.compactMap { byID[$0] }))
        }
        return grouped.sorted { $0.id > $1.id }
    }
}

extension ChannelSummary {
    /// One summary per channel over an app's environments, sorted by name: audiences added up, the newest
    /// timestamp, every live wave.
    static func merged(_ summaries: [ChannelSummary]) -> [ChannelSummary] {
        var byChannel: [String: ChannelSummary] = [:]
        for summary in summaries {
            guard var merged = byChannel[summary.channel] else {
                byChannel[summary.channel] = summary
                continue
            }
            merged.updateTokens += summary.updateTokens
            merged.pushToStartTokens += summary.pushToStartTokens
            merged.latestTimestamp = [merged.latestTimestamp, summary.latestTimestamp].compactMap { $0 }.max()
            merged.liveWaves += summary.liveWaves
            byChannel[summary.channel] = merged
        }
        return byChannel.values.sorted { $0.channel < $1.channel }
    }
}

import FanfareCore
import FanfareFanout
import FanfareStorage
internal import Foundation
internal import OpenAPIRuntime

extension FanfareAPI {
    package func publishUpdate(_ input: Operations.PublishUpdate.Input) async throws -> Operations.PublishUpdate.Output
    {
        let channel = input.path.channel
        try Validation.channel(channel)
        guard case .json(let body) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        guard !lifecycle.isDraining else {
            throw ServiceProblem.unavailable(
                .shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        }
        try Validation.unixSeconds(body.freshUntil, field: "fresh_until")
        try Validation.length(body.collapseId, field: "collapse_id", min: 1, max: 64)
        let fields = ContentFields(
            event: LiveActivityEvent(body.event), contentState: body.contentState, alert: body.alert,
            timestamp: body.timestamp, staleDate: body.staleDate, dismissalDate: body.dismissalDate,
            relevanceScore: body.relevanceScore, attributesType: body.attributesType, attributes: body.attributes,
            inputPushToken: body.inputPushToken, inputPushChannel: body.inputPushChannel)
        let content = try fields.content(now: nowSeconds)
        let priority = UpdatePriority(body.priority)
        let update = ChannelUpdate(
            channel: channel, content: content, priority: priority, freshUntil: body.freshUntil,
            collapseID: body.collapseId)
        if engine.configuration.leasedShards {
            // Several nodes: the wave is sent by the nodes holding its shards; any node answers its status.
            // offPool maps a refusal (PublishError) like the single node's below.
            let id: UInt64
            do {
                id = try await offPool { [engine] () throws -> UInt64 in try engine.publishShared(update) }
            } catch let problem as ServiceProblem where problem.code == .backPressure {
                metrics.refused("publish")
                throw problem
            }
            monitor.publishedShared(
                id: id, channel: channel, event: content.event.rawValue, timestamp: content.timestamp,
                priority: priority)
            return .accepted(
                .init(
                    headers: .init(location: "/v1/waves/\(id)"),
                    body: .json(.init(waveId: Int64(clamping: id), channel: channel))))
        }
        let wave: Wave
        do {
            wave = try engine.publish(update)
        } catch {
            if case .backPressure = error { metrics.refused("publish") }
            if case .tooManyUnfinishedWaves = error { metrics.refused("publish") }
            throw ErrorMapping.fromPublish(error, retryAfter: retryAfter)
        }
        monitor.started(wave, priority: priority)
        return .accepted(
            .init(
                headers: .init(location: "/v1/waves/\(wave.id)"),
                body: .json(.init(waveId: Int64(clamping: wave.id), channel: channel))))
    }

    package func getWave(_ input: Operations.GetWave.Input) async throws -> Operations.GetWave.Output {
        let report: WaveReport
        switch try await waveSource(input.path.waveId) {
        case .live(let wave): report = wave.report
        case .stored(let stored), .shared(let stored, _): report = stored
        }
        return .ok(.init(body: .json(Self.report(report))))
    }

    /// A wave the engine keeps in memory, else the final report the wave store kept (a wave that completed
    /// before a restart, or one no longer retained in memory).
    func waveSource(_ id: Int64) async throws -> WaveEventStream.Source {
        guard id >= 1 else {
            throw ServiceProblem.badRequest(.invalidParameter, "wave_id must be at least 1", field: "wave_id")
        }
        // Several nodes: this node's memory has only its shards' parts; the store has every shard's progress.
        if !engine.configuration.leasedShards, let wave = engine.wave(id: UInt64(id)) { return .live(wave) }
        let stored = try await offPool { [engine] in try engine.report(id: UInt64(id)) }
        guard let stored else {
            throw ServiceProblem(
                .notFound, .notFound,
                "wave \(id) is not known (the engine keeps unfinished waves and the newest complete ones, the registry "
                    + "the newest final reports)")
        }
        if engine.configuration.leasedShards && !stored.isComplete {
            return .shared(stored) { [sharedReports] in await sharedReports.report(id: UInt64(id)) }
        }
        return .stored(stored)
    }

    package func listWaves(_ input: Operations.ListWaves.Input) async throws -> Operations.ListWaves.Output {
        let query = input.query
        if let channel = query.channel { try Validation.channel(channel) }
        let limit = query.limit ?? 50
        guard (1...1000).contains(limit) else {
            throw ServiceProblem.badRequest(
                .invalidParameter, "limit must be in 1...1000 (got \(limit))", field: "limit")
        }
        if let before = query.before, before < 1 {
            throw ServiceProblem.badRequest(
                .invalidParameter, "before must be at least 1 (got \(before))", field: "before")
        }
        // Memory first (running waves and the newest complete ones), then the stored final reports of waves not
        // in memory (from before a restart), merged newest first. Several nodes: no node's memory has a whole
        // wave, so the running ones are the store's, summed over every node's shards.
        let memory =
            engine.configuration.leasedShards
            ? try await offPool { [engine] in try engine.sharedRunningReports() }
            : engine.waves.map(\.report)
        let known = Set(memory.map(\.id))
        // Without filters the page is the newest `limit` of memory and store together, so the store's newest
        // `limit + 1` suffice (the extra one says whether there is more); a filter may need them all.
        let listed = configuration.storedWaveReportsListed
        let reading = query.before == nil && query.channel == nil ? min(limit + 1, listed) : listed
        let stored = try await offPool { [engine] in try engine.storedReports(limit: reading) }
        var candidates = memory
        candidates.append(contentsOf: stored.lazy.filter { !known.contains($0.id) })
        candidates.sort { $0.id > $1.id }
        var page: [WaveReport] = []
        var more = false
        for report in candidates {
            if let channel = query.channel, report.channel != channel { continue }
            if let before = query.before, report.id >= UInt64(before) { continue }
            if page.count == limit {
                more = true
                break
            }
            page.append(report)
        }
        let next = more ? page.last.map { Int64(clamping: $0.id) } : nil
        return .ok(.init(body: .json(.init(waves: page.map { Self.report($0) }, nextBefore: next))))
    }

    package func getWaveEvents(_ input: Operations.GetWaveEvents.Input) async throws -> Operations.GetWaveEvents.Output
    {
        let source = try await waveSource(input.path.waveId)
        guard let ticket = eventStreams.admit() else {
            throw ServiceProblem.unavailable(
                .backPressure,
                "\(eventStreams.limit) event streams are open on this node (--max-event-streams); follow the wave "
                    + "with GET /v1/waves/{id}, or retry later", retryAfter: retryAfter)
        }
        let stream = WaveEventStream(
            source: source, interval: configuration.eventInterval, stopping: lifecycle.stopping, ticket: ticket,
            encode: { Self.reportJSON($0) })
        return .ok(.init(body: .textEventStream(HTTPBody(stream, length: .unknown, iterationBehavior: .single))))
    }

    package func getChannel(_ input: Operations.GetChannel.Input) async throws -> Operations.GetChannel.Output {
        let channel = input.path.channel
        try Validation.channel(channel)
        guard let summary = await engine.channelSummary(channel) else {
            throw ServiceProblem.unavailable(.shuttingDown, "the engine is shutting down", retryAfter: retryAfter)
        }
        return .ok(.init(body: .json(try await channels([summary])[0])))
    }

    package func listChannels(_ input: Operations.ListChannels.Input) async throws -> Operations.ListChannels.Output {
        guard let summaries = await engine.channelSummaries() else {
            throw ServiceProblem.unavailable(.shuttingDown, "the engine is shutting down", retryAfter: retryAfter)
        }
        return .ok(.init(body: .json(.init(channels: try await channels(summaries)))))
    }

    /// Channels' summaries with their broadcast links and subscribers (several nodes: read from the shared store,
    /// once for all of them).
    func channels(_ summaries: [ChannelSummary]) async throws -> [Components.Schemas.ChannelSummary] {
        let (links, counts) = try await offPool { [engine] in
            (try engine.broadcastLinks, try engine.broadcastSubscriberCounts())
        }
        let linkByChannel = Dictionary(links.map { ($0.channel, $0) }) { first, _ in first }
        return summaries.map { summary in
            Self.channel(summary, link: linkByChannel[summary.channel], subscribers: counts[summary.channel] ?? 0)
        }
    }

    static func channel(
        _ summary: ChannelSummary, link: BroadcastLink?, subscribers: Int
    ) -> Components.Schemas.ChannelSummary {
        .init(
            channel: summary.channel,
            audience: .init(update: summary.updateTokens, pushToStart: summary.pushToStartTokens),
            latestTimestamp: summary.latestTimestamp, liveWaves: summary.liveWaves.map { Self.report($0.report) },
            broadcastChannelId: link?.channelID, broadcastSubscribers: subscribers)
    }

    // MARK: - Reports

    package static func report(_ report: WaveReport) -> Components.Schemas.WaveReport {
        let state: Components.Schemas.WaveState =
            switch report.state {
            case .running: .running
            case .paused: .paused
            case .complete: .complete
            case .interrupted: .interrupted
            }
        return Components.Schemas.WaveReport(
            id: Int64(clamping: report.id), channel: report.channel, event: .init(report.event),
            timestamp: report.timestamp,
            state: state, targeted: report.targeted, accounted: report.accounted, sent: report.sent,
            delivered: report.delivered, failed: report.failed, superseded: report.superseded,
            downgraded: report.downgraded, expired: report.expired, invalidated: report.invalidated,
            retried: report.retried, possibleDuplicates: report.possibleDuplicates,
            resentAfterRestart: report.resentAfterRestart, restarts: report.restarts,
            failedByReason: .init(additionalProperties: report.failedByReason),
            timeToFirstAckSeconds: report.timeToFirstAck.map { Double($0) / 1e9 },
            makespanSeconds: report.makespan.map { Double($0) / 1e9 }, broadcast: report.broadcast.map(Self.broadcast))
    }

    /// A report as the JSON of `GET /v1/waves/{id}` (for the event stream).
    static func reportJSON(_ report: WaveReport) -> [UInt8] {
        (try? ServiceProblem.encoder.encode(Self.report(report))).map { [UInt8]($0) } ?? Array("{}".utf8)
    }
}

extension LiveActivityEvent {
    init(_ event: Components.Schemas.ChannelUpdate.EventPayload) {
        switch event {
        case .start: self = .start
        case .update: self = .update
        case .end: self = .end
        }
    }

    init(_ event: Components.Schemas.PushRequest.EventPayload) {
        switch event {
        case .start: self = .start
        case .update: self = .update
        case .end: self = .end
        }
    }
}

extension Components.Schemas.WaveReport.EventPayload {
    init(_ event: LiveActivityEvent) {
        switch event {
        case .start: self = .start
        case .update: self = .update
        case .end: self = .end
        }
    }
}

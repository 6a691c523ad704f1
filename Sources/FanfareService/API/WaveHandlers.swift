import FanfareCore
import FanfareFanout
import FanfareStorage
internal import Foundation
internal import OpenAPIRuntime

extension FanfareAPI {
    package func publishUpdate(_ input: Operations.PublishUpdate.Input) async throws -> Operations.PublishUpdate.Output
    {
        guard case .json(let body) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        let (id, channel) = try await publish(body, channel: input.path.channel, in: try app(nil))
        return .accepted(
            .init(
                headers: .init(location: "/v1/waves/\(id)"),
                body: .json(.init(waveId: Int64(clamping: id), channel: channel))))
    }

    package func publishUpdateInApp(
        _ input: Operations.PublishUpdateInApp.Input
    ) async throws -> Operations.PublishUpdateInApp.Output {
        guard case .json(let body) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        let app = try app(input.path.app)
        let (id, channel) = try await publish(body, channel: input.path.channel, in: app)
        return .accepted(
            .init(
                headers: .init(location: "/v1/apps/\(app.id)/waves/\(id)"),
                body: .json(.init(waveId: Int64(clamping: id), channel: channel))))
    }

    /// Publishes on every environment of `app` as one publication (one wave per environment, saved together);
    /// returns the publication's id (its first wave's).
    private func publish(
        _ body: Components.Schemas.ChannelUpdate, channel: String, in app: ServedApp
    ) async throws -> (UInt64, String) {
        try Validation.channel(channel)
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
        let engine = app.primaryEngine
        if engine.configuration.leasedShards {
            // Several nodes: the wave is sent by the nodes holding its shards; any node answers its status.
            // offPool maps a refusal (PublishError) like the single node's below.
            let id: UInt64
            do {
                id = try await offPool { () throws -> UInt64 in try engine.publishShared(update) }
            } catch let problem as ServiceProblem where problem.code == .backPressure {
                metrics.refused("publish")
                throw problem
            }
            monitor.publishedShared(
                id: id, channel: channel, event: content.event.rawValue, timestamp: content.timestamp,
                priority: priority)
            return (id, channel)
        }
        let waves: [Wave]
        do {
            waves = try FanoutEngine.publish(update, on: app.engines)
        } catch {
            if case .backPressure = error { metrics.refused("publish") }
            if case .tooManyUnfinishedWaves = error { metrics.refused("publish") }
            throw ErrorMapping.fromPublish(error, retryAfter: retryAfter)
        }
        for wave in waves { monitor.started(wave, priority: priority) }
        return (waves[0].id, channel)
    }

    package func getWave(_ input: Operations.GetWave.Input) async throws -> Operations.GetWave.Output {
        .ok(.init(body: .json(Self.report(try await waveSource(input.path.waveId, in: try app(nil)).report))))
    }

    package func getWaveInApp(_ input: Operations.GetWaveInApp.Input) async throws -> Operations.GetWaveInApp.Output {
        .ok(
            .init(body: .json(Self.report(try await waveSource(input.path.waveId, in: try app(input.path.app)).report)))
        )
    }

    /// A wave (or a publication's waves, one per environment) of `app`: the engines' memory, else the final
    /// reports the wave store kept (waves that completed before a restart, or no longer retained in memory).
    func waveSource(_ id: Int64, in app: ServedApp) async throws -> WaveEventStream.Source {
        guard id >= 1 else {
            throw ServiceProblem.badRequest(.invalidParameter, "wave_id must be at least 1", field: "wave_id")
        }
        let engines = app.engines
        let engine = app.primaryEngine
        // Several nodes: this node's memory has only its shards' parts; the store has every shard's progress.
        if engine.configuration.leasedShards {
            let stored = try await offPool { try engine.report(id: UInt64(id)) }
            guard let stored else { throw Self.unknownWave(id) }
            if !stored.isComplete {
                return .shared(stored) { [sharedReports] in await sharedReports.report(id: UInt64(id)) }
            }
            return .stored(stored)
        }
        let parts = try await offPool { [store] in try store.publicationParts(of: UInt64(id)) }
        let sources = try await offPool { () throws -> [PartSource] in
            try parts.compactMap { part in try PartSource.find(part, in: engines) }
        }
        guard !sources.isEmpty else { throw Self.unknownWave(id) }
        if sources.count == 1, case .live(let wave) = sources[0] { return .live(wave) }
        let first = PartSource.merged(sources)
        if first.isComplete { return .stored(first) }
        return .shared(first) { PartSource.merged(sources) }
    }

    private static func unknownWave(_ id: Int64) -> ServiceProblem {
        ServiceProblem(
            .notFound, .notFound,
            "wave \(id) is not known (the engine keeps unfinished waves and the newest complete ones, the registry "
                + "the newest final reports)")
    }

    package func listWaves(_ input: Operations.ListWaves.Input) async throws -> Operations.ListWaves.Output {
        let query = input.query
        let page = try await wavePage(
            channel: query.channel, limit: query.limit, before: query.before, in: try app(nil))
        return .ok(.init(body: .json(page)))
    }

    package func listWavesInApp(
        _ input: Operations.ListWavesInApp.Input
    ) async throws -> Operations.ListWavesInApp.Output {
        let query = input.query
        let app = try app(input.path.app)
        let page = try await wavePage(channel: query.channel, limit: query.limit, before: query.before, in: app)
        return .ok(.init(body: .json(page)))
    }

    /// Newest first: memory first (running waves and the newest complete ones), then the stored final reports of
    /// waves not in memory (from before a restart); a publication's waves listed as one. Several nodes: no node's
    /// memory has a whole wave, so the running ones are the store's, summed over every node's shards.
    private func wavePage(
        channel: String?, limit: Int?, before: Int64?, in app: ServedApp
    ) async throws -> Components.Schemas.WavePage {
        if let channel { try Validation.channel(channel) }
        let limit = limit ?? 50
        guard (1...1000).contains(limit) else {
            throw ServiceProblem.badRequest(
                .invalidParameter, "limit must be in 1...1000 (got \(limit))", field: "limit")
        }
        if let before, before < 1 {
            throw ServiceProblem.badRequest(
                .invalidParameter, "before must be at least 1 (got \(before))", field: "before")
        }
        let engines = app.engines
        let memory =
            app.primaryEngine.configuration.leasedShards
            ? try await offPool { try engines.flatMap { try $0.sharedRunningReports() } }
            : engines.flatMap { $0.waves.map(\.report) }
        let known = Set(memory.map(\.id))
        // Without filters the page is the newest `limit` of memory and store together, so the store's newest
        // `limit + 1` per engine suffice (the extra one says whether there is more); a filter may need them all.
        let listed = configuration.storedWaveReportsListed
        let reading = before == nil && channel == nil ? min(limit + 1, listed) : listed
        let stored = try await offPool { try engines.flatMap { try $0.storedReports(limit: reading) } }
        let candidates = memory + stored.filter { !known.contains($0.id) }
        // A publication's waves are listed as one (only an app in several environments has any).
        let publications =
            engines.count > 1
            ? try await offPool { [store] in try Publications.group(candidates, store: store) }
            : candidates.sorted { $0.id > $1.id }
        var page: [WaveReport] = []
        var more = false
        for report in publications {
            if let channel, report.channel != channel { continue }
            if let before, report.id >= UInt64(before) { continue }
            if page.count == limit {
                more = true
                break
            }
            page.append(report)
        }
        let next = more ? page.last.map { Int64(clamping: $0.id) } : nil
        return .init(waves: page.map { Self.report($0) }, nextBefore: next)
    }

    package func getWaveEvents(_ input: Operations.GetWaveEvents.Input) async throws -> Operations.GetWaveEvents.Output
    {
        let stream = try await events(input.path.waveId, in: try app(nil))
        return .ok(.init(body: .textEventStream(HTTPBody(stream, length: .unknown, iterationBehavior: .single))))
    }

    package func getWaveEventsInApp(
        _ input: Operations.GetWaveEventsInApp.Input
    ) async throws -> Operations.GetWaveEventsInApp.Output {
        let stream = try await events(input.path.waveId, in: try app(input.path.app))
        return .ok(.init(body: .textEventStream(HTTPBody(stream, length: .unknown, iterationBehavior: .single))))
    }

    private func events(_ id: Int64, in app: ServedApp) async throws -> WaveEventStream {
        let source = try await waveSource(id, in: app)
        guard let ticket = eventStreams.admit() else {
            throw ServiceProblem.unavailable(
                .backPressure,
                "\(eventStreams.limit) event streams are open on this node (--max-event-streams); follow the wave "
                    + "with GET /v1/waves/{id}, or retry later", retryAfter: retryAfter)
        }
        return WaveEventStream(
            source: source, interval: configuration.eventInterval, stopping: lifecycle.stopping, ticket: ticket,
            encode: { Self.reportJSON($0) })
    }

    package func getChannel(_ input: Operations.GetChannel.Input) async throws -> Operations.GetChannel.Output {
        .ok(.init(body: .json(try await channel(input.path.channel, in: try app(nil)))))
    }

    package func getChannelInApp(
        _ input: Operations.GetChannelInApp.Input
    ) async throws -> Operations.GetChannelInApp.Output {
        .ok(.init(body: .json(try await channel(input.path.channel, in: try app(input.path.app)))))
    }

    private func channel(_ channel: String, in app: ServedApp) async throws -> Components.Schemas.ChannelSummary {
        try Validation.channel(channel)
        var summaries: [ChannelSummary] = []
        for engine in app.engines {
            guard let summary = await engine.channelSummary(channel) else {
                throw ServiceProblem.unavailable(.shuttingDown, "the engine is shutting down", retryAfter: retryAfter)
            }
            summaries.append(summary)
        }
        return try await channels(ChannelSummary.merged(summaries), in: app)[0]
    }

    package func listChannels(_ input: Operations.ListChannels.Input) async throws -> Operations.ListChannels.Output {
        .ok(.init(body: .json(.init(channels: try await allChannels(in: try app(nil))))))
    }

    package func listChannelsInApp(
        _ input: Operations.ListChannelsInApp.Input
    ) async throws -> Operations.ListChannelsInApp.Output {
        .ok(.init(body: .json(.init(channels: try await allChannels(in: try app(input.path.app))))))
    }

    private func allChannels(in app: ServedApp) async throws -> [Components.Schemas.ChannelSummary] {
        var summaries: [ChannelSummary] = []
        for engine in app.engines {
            guard let some = await engine.channelSummaries() else {
                throw ServiceProblem.unavailable(.shuttingDown, "the engine is shutting down", retryAfter: retryAfter)
            }
            summaries.append(contentsOf: some)
        }
        return try await channels(ChannelSummary.merged(summaries), in: app)
    }

    /// Channels' summaries with their broadcast links and subscribers (several nodes: read from the shared store,
    /// once for all of them). An app in two environments: the production link, subscribers of both.
    func channels(_ summaries: [ChannelSummary], in app: ServedApp) async throws -> [Components.Schemas.ChannelSummary]
    {
        let engines = app.engines
        let (links, counts) = try await offPool { () throws -> ([BroadcastLink], [String: Int]) in
            var links: [BroadcastLink] = []
            var counts: [String: Int] = [:]
            for engine in engines {
                links.append(contentsOf: try engine.broadcastLinks)
                counts.merge(try engine.broadcastSubscriberCounts(), uniquingKeysWith: +)
            }
            return (links, counts)
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

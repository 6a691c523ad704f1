import FanfareCore
import FanfareFanout
import FanfareStorage

extension FanfareAPI {
    package func registerTokens(
        _ input: Operations.RegisterTokens.Input
    ) async throws -> Operations.RegisterTokens.Output {
        guard case .json(let batch) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        let (registered, replaced) = try await register(batch.tokens.map(RegistrationFields.init), in: try app(nil))
        return .ok(.init(body: .json(.init(registered: registered, replaced: replaced))))
    }

    package func registerTokensInApp(
        _ input: Operations.RegisterTokensInApp.Input
    ) async throws -> Operations.RegisterTokensInApp.Output {
        guard case .json(let batch) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        let app = try app(input.path.app)
        let (registered, replaced) = try await register(batch.tokens.map(RegistrationFields.init), in: app)
        return .ok(.init(body: .json(.init(registered: registered, replaced: replaced))))
    }

    func checkBatchSize(_ count: Int) throws(ServiceProblem) {
        guard count >= 1 else {
            throw .badRequest(.invalidRequest, "tokens must list at least one token", field: "tokens")
        }
        guard count <= configuration.maxBatchItems else {
            var problem = ServiceProblem.badRequest(
                .batchTooLarge, "tokens has \(count) items; at most \(configuration.maxBatchItems) per request",
                field: "tokens")
            problem.size = count
            problem.limit = configuration.maxBatchItems
            throw problem
        }
    }

    /// A `POST .../tokens` batch (from the generated types or `TokenBatchDecoder`): the schema's rules, then one
    /// durable write (tokens and subscriptions in one transaction, whichever environments they are in), then
    /// the app's engines. Returns (registered, replaced).
    func register(_ items: [RegistrationFields], in app: ServedApp) async throws -> (registered: Int, replaced: Int) {
        try checkBatchSize(items.count)
        let checked = try RegistrationItems(checking: items, app: app, now: configuration.wallClockMilliseconds())
        defer { census.invalidate() }  // also after a failure: part of it may be durable
        let engines = app.engines
        let result = try await offPool {
            try FanoutEngine.register(checked.tokens, subscriptions: checked.subscriptions, on: engines)
        }
        return (items.count, result.replacedCount)
    }

    package func deleteTokens(_ input: Operations.DeleteTokens.Input) async throws -> Operations.DeleteTokens.Output {
        guard case .json(let deletion) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        let (removed, notFound) = try await delete(deletion.tokens, in: try app(nil))
        return .ok(.init(body: .json(.init(removed: removed, notFound: notFound))))
    }

    package func deleteTokensInApp(
        _ input: Operations.DeleteTokensInApp.Input
    ) async throws -> Operations.DeleteTokensInApp.Output {
        guard case .json(let deletion) = input.body else {
            throw ServiceProblem.badRequest(.invalidRequest, "expected JSON")
        }
        let (removed, notFound) = try await delete(deletion.tokens, in: try app(input.path.app))
        return .ok(.init(body: .json(.init(removed: removed, notFound: notFound))))
    }

    /// Removes tokens of `app` (every environment; another app's tokens are not found). (removed, not found).
    private func delete(_ hexTokens: [String], in app: ServedApp) async throws -> (Int, Int) {
        try checkBatchSize(hexTokens.count)
        var tokens: [DeviceToken] = []
        tokens.reserveCapacity(hexTokens.count)
        for (index, hex) in hexTokens.enumerated() {
            tokens.append(try Validation.token(hex, field: "tokens[\(index)]", index: index))
        }
        let batch = tokens
        defer { census.invalidate() }
        let engines = app.engines
        let removed = try await offPool { try FanoutEngine.unregister(batch, on: engines) }
        return (removed, tokens.count - removed)
    }

    package func getToken(_ input: Operations.GetToken.Input) async throws -> Operations.GetToken.Output {
        .ok(.init(body: .json(try await ledger(input.path.token, in: try app(nil)))))
    }

    package func getTokenInApp(_ input: Operations.GetTokenInApp.Input) async throws -> Operations.GetTokenInApp.Output
    {
        .ok(.init(body: .json(try await ledger(input.path.token, in: try app(input.path.app)))))
    }

    /// What the registry knows of a token in `app` (each of its environments, production first).
    private func ledger(_ hex: String, in app: ServedApp) async throws -> Components.Schemas.TokenLedger {
        let token = try Validation.token(hex, field: "token")
        let lifetime = configuration.fanout.activityLifetime
        let bundleID = app.bundleID
        let environments = app.environments
        let entry = try await offPool { [store] () throws -> TokenLedgerEntry? in
            for environment in environments {
                if let entry = try store.ledger(
                    token: token, bundleID: bundleID, environment: environment, activityLifetime: lifetime)
                {
                    return entry
                }
            }
            return nil
        }
        guard let entry else {
            throw ServiceProblem(
                .notFound, .notFound, "the registry knows nothing of token \(token.hexString.prefix(16))…")
        }
        return Self.ledgerBody(entry)
    }

    private static func ledgerBody(_ entry: TokenLedgerEntry) -> Components.Schemas.TokenLedger {
        let registration = entry.registration
        return Components.Schemas.TokenLedger(
            token: entry.token.hexString, registered: registration != nil,
            kind: registration.map { $0.kind == .update ? .update : .pushToStart }, channels: registration?.channels,
            activityId: registration?.activityID, deviceId: registration?.deviceID,
            attributesType: registration?.attributesType, frequentUpdates: registration?.frequentUpdates,
            supportsBroadcast: registration?.supportsBroadcast, bundleId: entry.bundleID,
            environment: entry.environment == .production ? .production : .sandbox, createdAt: registration?.createdAt,
            lastSeenAt: registration?.lastSeenAt, startedBy: entry.startedBy?.hexString,
            activities: entry.activities.map { activity in
                .init(
                    activityId: activity.activityID, path: activity.isBroadcastSubscription ? .broadcast : .token,
                    token: activity.token?.hexString, channels: activity.channels, createdAt: activity.createdAt)
            },
            retiresAt: entry.retiresByLifetimeAt,
            pendingRetirements: entry.pendingRetirements.sorted { $0.key < $1.key }.map {
                .init(channel: $0.key, dueAt: $0.value)
            },
            history: entry.history.map { event in
                .init(
                    event: eventName(event.kind), at: event.at, kind: kindName(event.registrationKind),
                    activityId: event.activityID, replacedBy: event.replacedBy?.hexString, channel: event.channel,
                    reason: event.reason, invalidSince: event.invalidSince)
            })
    }

    private static func eventName(_ kind: TokenLedgerEvent.Kind) -> Components.Schemas.LedgerEvent.EventPayload {
        switch kind {
        case .registered: .registered
        case .replaced: .replaced
        case .retiredChannelEnded: .retiredChannelEnded
        case .retiredLifetime: .retiredLifetime
        case .invalidated: .invalidated
        case .unregistered: .unregistered
        }
    }

    private static func kindName(_ kind: LedgerRegistrationKind) -> Components.Schemas.LedgerEvent.KindPayload {
        switch kind {
        case .update: .update
        case .pushToStart: .pushToStart
        case .broadcastSubscription: .broadcast
        }
    }
}

/// A checked `POST /v1/tokens` batch: its tokens and its broadcast subscriptions.
package struct RegistrationItems: Sendable {
    package var tokens: [TokenRegistration] = []
    package var subscriptions: [BroadcastSubscription] = []

    init() {}

    /// Each item checked against the schema's rules and the registry's, in order: the first bad one is the error.
    /// An item's environment must be one `app` sends in.
    init(checking items: [RegistrationFields], app: ServedApp, now: Int64) throws(ServiceProblem) {
        try self.init(
            checking: items, app: app.id, bundleID: app.bundleID, environments: app.environments, now: now)
    }

    /// As above, for app `app` (its bundle id, the environments it sends in).
    init(
        checking items: [RegistrationFields], app: String, bundleID: String, environments: [APNsEnvironment],
        defaultEnvironment: APNsEnvironment = .production, now: Int64
    ) throws(ServiceProblem) {
        tokens.reserveCapacity(items.count)
        for (index, fields) in items.enumerated() {
            let environment = fields.environment ?? defaultEnvironment
            guard environments.contains(environment) else {
                let served = environments.map(\.description).joined(separator: " and ")
                throw ServiceProblem(
                    .unprocessableContent, .environmentNotServed,
                    "tokens[\(index)]: app \(app) sends in \(served) only (no provider key of it may sign for "
                        + "\(environment))", index: index, field: "tokens[\(index)].environment")
            }
            switch try fields.item(index: index, bundleID: bundleID, environment: environment, now: now) {
            case .token(let registration): tokens.append(registration)
            case .subscription(let subscription): subscriptions.append(subscription)
            }
        }
    }
}

/// One registration item as the API gives it (from the generated types or the fast decoder).
package struct RegistrationFields: Equatable, Sendable {
    /// The item's `kind`.
    package enum Kind: Sendable, Equatable {
        case update, pushToStart, broadcast
    }

    /// Nil for a `broadcast` item.
    var token: String?
    var kind: Kind
    var channels: [String]
    var activityID: String?
    var deviceID: String?
    var attributesType: String?
    var frequentUpdates: Bool
    var supportsBroadcast: Bool
    /// nil: production.
    var environment: APNsEnvironment?

    package init(
        token: String?, kind: Kind, channels: [String], activityID: String?, deviceID: String?, attributesType: String?,
        frequentUpdates: Bool, supportsBroadcast: Bool = false, environment: APNsEnvironment? = nil
    ) {
        self.environment = environment
        self.token = token
        self.kind = kind
        self.channels = channels
        self.activityID = activityID
        self.deviceID = deviceID
        self.attributesType = attributesType
        self.frequentUpdates = frequentUpdates
        self.supportsBroadcast = supportsBroadcast
    }

    /// An item of the generated types (the request bodies the fast decoder left to them).
    init(_ item: Components.Schemas.TokenRegistration) {
        switch item {
        case .update(let update):
            self.init(
                token: update.token, kind: .update, channels: update.channels, activityID: update.activityId,
                deviceID: update.deviceId, attributesType: update.attributesType,
                frequentUpdates: update.frequentUpdates ?? false,
                environment: update.environment.map(APNsEnvironment.init))
        case .pushToStart(let start):
            self.init(
                token: start.token, kind: .pushToStart, channels: start.channels, activityID: start.activityId,
                deviceID: start.deviceId, attributesType: start.attributesType,
                frequentUpdates: start.frequentUpdates ?? false, supportsBroadcast: start.supportsBroadcast ?? false,
                environment: start.environment.map(APNsEnvironment.init))
        case .broadcast(let subscription):
            self.init(
                token: nil, kind: .broadcast, channels: subscription.channels, activityID: subscription.activityId,
                deviceID: subscription.deviceId, attributesType: subscription.attributesType,
                frequentUpdates: subscription.frequentUpdates ?? false,
                environment: subscription.environment.map(APNsEnvironment.init))
        }
    }

    /// What a checked item registers.
    enum Item {
        case token(TokenRegistration)
        case subscription(BroadcastSubscription)
    }

    /// Checks the schema's rules (the generated decoder checked types and required fields only).
    func item(index: Int, bundleID: String, environment: APNsEnvironment, now: Int64) throws(ServiceProblem) -> Item {
        let prefix = "tokens[\(index)]"
        guard !channels.isEmpty && channels.count <= 64 else {
            throw .badRequest(
                .invalidRegistration, "\(prefix).channels must list 1 to 64 channels (got \(channels.count))",
                index: index,
                field: "\(prefix).channels")
        }
        for (position, channel) in channels.enumerated() {
            try Validation.channel(channel, field: "\(prefix).channels[\(position)]", index: index)
        }
        if Set(channels).count != channels.count {
            throw .badRequest(
                .invalidRegistration, "\(prefix).channels lists a channel twice", index: index,
                field: "\(prefix).channels")
        }
        try Validation.length(activityID, field: "\(prefix).activity_id", min: 1, max: 256, index: index)
        try Validation.length(deviceID, field: "\(prefix).device_id", min: 1, max: 256, index: index)
        try Validation.length(attributesType, field: "\(prefix).attributes_type", min: 1, max: 256, index: index)
        if supportsBroadcast && kind != .pushToStart {
            throw .badRequest(
                .invalidRegistration, "\(prefix): supports_broadcast is for push-to-start tokens", index: index,
                field: "\(prefix).supports_broadcast")
        }
        let tokenKind: TokenKind
        switch kind {
        case .update:
            guard activityID != nil else {
                throw .badRequest(
                    .invalidRegistration, "\(prefix): an update token needs activity_id", index: index,
                    field: "\(prefix).activity_id")
            }
            tokenKind = .update
        case .pushToStart:
            guard deviceID != nil, attributesType != nil else {
                throw .badRequest(
                    .invalidRegistration, "\(prefix): a push-to-start token needs device_id and attributes_type",
                    index: index,
                    field: deviceID == nil ? "\(prefix).device_id" : "\(prefix).attributes_type")
            }
            tokenKind = .pushToStart
        case .broadcast:
            guard token == nil else {
                throw .badRequest(
                    .invalidRegistration, "\(prefix): a broadcast subscription has no token", index: index,
                    field: "\(prefix).token")
            }
            guard let activityID else {
                throw .badRequest(
                    .invalidRegistration, "\(prefix): a broadcast subscription needs activity_id", index: index,
                    field: "\(prefix).activity_id")
            }
            return .subscription(
                BroadcastSubscription(
                    activityID: activityID, deviceID: deviceID, attributesType: attributesType, bundleID: bundleID,
                    environment: environment, frequentUpdates: frequentUpdates, channels: channels, createdAt: now,
                    lastSeenAt: now))
        }
        guard let token else {
            throw .badRequest(
                .invalidRegistration, "\(prefix): token is missing", index: index, field: "\(prefix).token")
        }
        let device = try Validation.token(token, field: "\(prefix).token", index: index)
        return .token(
            TokenRegistration(
                token: device, kind: tokenKind, activityID: activityID, deviceID: deviceID,
                attributesType: attributesType,
                bundleID: bundleID, environment: environment, frequentUpdates: frequentUpdates,
                supportsBroadcast: supportsBroadcast, channels: channels, createdAt: now, lastSeenAt: now))
    }
}

extension APNsEnvironment {
    init(_ environment: Components.Schemas.Environment) {
        self = environment == .sandbox ? .sandbox : .production
    }
}

import FanfareCore
import FanfareFanout
import FanfareRegistry

extension FanfareAPI {
    package func registerTokens(_ input: Operations.RegisterTokens.Input) async throws -> Operations.RegisterTokens.Output {
        guard case .json(let batch) = input.body else { throw ServiceProblem.badRequest(.invalidRequest, "expected JSON") }
        let registrations = try makeRegistrations(batch.tokens)
        try await register(registrations)
        return .ok(.init(body: .json(.init(registered: registrations.count))))
    }

    /// Durable, then loaded into the engine.
    func register(_ registrations: [TokenRegistration]) async throws {
        try await offPool { [engine] in try engine.register(registrations) }
    }

    func checkBatchSize(_ count: Int) throws(ServiceProblem) {
        guard count >= 1 else { throw .badRequest(.invalidRequest, "tokens must list at least one token", field: "tokens") }
        guard count <= configuration.maxBatchItems else {
            var problem = ServiceProblem.badRequest(
                .batchTooLarge, "tokens has \(count) items; at most \(configuration.maxBatchItems) per request", field: "tokens")
            problem.size = count
            problem.limit = configuration.maxBatchItems
            throw problem
        }
    }

    /// `POST /v1/tokens` from `TokenBatchDecoder`'s items: the same rules, then the same durable write.
    func register(_ items: [RegistrationFields]) async throws -> Int {
        try checkBatchSize(items.count)
        let now = configuration.wallClockMilliseconds()
        var registrations: [TokenRegistration] = []
        registrations.reserveCapacity(items.count)
        for (index, fields) in items.enumerated() {
            registrations.append(try fields.registration(index: index, bundleID: bundleID, environment: environment, now: now))
        }
        try await register(registrations)
        return registrations.count
    }

    /// The schema's rules for each item, then the registry's (the index names the first bad item).
    func makeRegistrations(_ items: [Components.Schemas.TokenRegistration]) throws(ServiceProblem) -> [TokenRegistration] {
        try checkBatchSize(items.count)
        let now = configuration.wallClockMilliseconds()
        var registrations: [TokenRegistration] = []
        registrations.reserveCapacity(items.count)
        for (index, item) in items.enumerated() {
            let fields: RegistrationFields
            switch item {
            case .update(let update):
                fields = RegistrationFields(
                    token: update.token, kind: .update, channels: update.channels, activityID: update.activityId,
                    deviceID: update.deviceId, attributesType: update.attributesType,
                    frequentUpdates: update.frequentUpdates ?? false)
            case .pushToStart(let start):
                fields = RegistrationFields(
                    token: start.token, kind: .pushToStart, channels: start.channels, activityID: start.activityId,
                    deviceID: start.deviceId, attributesType: start.attributesType,
                    frequentUpdates: start.frequentUpdates ?? false)
            }
            registrations.append(try fields.registration(index: index, bundleID: bundleID, environment: environment, now: now))
        }
        return registrations
    }

    package func deleteTokens(_ input: Operations.DeleteTokens.Input) async throws -> Operations.DeleteTokens.Output {
        guard case .json(let deletion) = input.body else { throw ServiceProblem.badRequest(.invalidRequest, "expected JSON") }
        try checkBatchSize(deletion.tokens.count)
        var tokens: [DeviceToken] = []
        tokens.reserveCapacity(deletion.tokens.count)
        for (index, hex) in deletion.tokens.enumerated() {
            tokens.append(try Validation.token(hex, field: "tokens[\(index)]", index: index))
        }
        let batch = tokens
        let removed = try await offPool { [engine] in try engine.unregister(batch) }
        return .ok(.init(body: .json(.init(removed: removed, notFound: tokens.count - removed))))
    }

    package func getToken(_ input: Operations.GetToken.Input) async throws -> Operations.GetToken.Output {
        let token = try Validation.token(input.path.token, field: "token")
        guard let registration = try await offPool({ [store] in try store.registration(of: token) }) else {
            throw ServiceProblem(.notFound, .notFound, "token \(token.hexString.prefix(16))… is not registered")
        }
        return .ok(
            .init(
                body: .json(
                    .init(
                        token: registration.token.hexString,
                        kind: registration.kind == .update ? .update : .pushToStart, channels: registration.channels,
                        activityId: registration.activityID, deviceId: registration.deviceID,
                        attributesType: registration.attributesType, frequentUpdates: registration.frequentUpdates,
                        bundleId: registration.bundleID,
                        environment: registration.environment == .production ? .production : .sandbox,
                        createdAt: registration.createdAt, lastSeenAt: registration.lastSeenAt))))
    }
}

/// One registration item as the API gives it (from the generated types or the fast decoder).
package struct RegistrationFields: Equatable, Sendable {
    var token: String
    var kind: TokenKind
    var channels: [String]
    var activityID: String?
    var deviceID: String?
    var attributesType: String?
    var frequentUpdates: Bool

    package init(
        token: String, kind: TokenKind, channels: [String], activityID: String?, deviceID: String?, attributesType: String?,
        frequentUpdates: Bool
    ) {
        self.token = token
        self.kind = kind
        self.channels = channels
        self.activityID = activityID
        self.deviceID = deviceID
        self.attributesType = attributesType
        self.frequentUpdates = frequentUpdates
    }

    /// Checks the schema's rules (the generated decoder checked types and required fields only).
    package func registration(
        index: Int, bundleID: String, environment: APNsEnvironment, now: Int64
    ) throws(ServiceProblem) -> TokenRegistration {
        let prefix = "tokens[\(index)]"
        let device = try Validation.token(token, field: "\(prefix).token", index: index)
        guard !channels.isEmpty && channels.count <= 64 else {
            throw .badRequest(
                .invalidRegistration, "\(prefix).channels must list 1 to 64 channels (got \(channels.count))", index: index,
                field: "\(prefix).channels")
        }
        for (position, channel) in channels.enumerated() {
            try Validation.channel(channel, field: "\(prefix).channels[\(position)]", index: index)
        }
        if Set(channels).count != channels.count {
            throw .badRequest(
                .invalidRegistration, "\(prefix).channels lists a channel twice", index: index, field: "\(prefix).channels")
        }
        try Validation.length(activityID, field: "\(prefix).activity_id", min: 1, max: 256, index: index)
        try Validation.length(deviceID, field: "\(prefix).device_id", min: 1, max: 256, index: index)
        try Validation.length(attributesType, field: "\(prefix).attributes_type", min: 1, max: 256, index: index)
        switch kind {
        case .update:
            guard activityID != nil else {
                throw .badRequest(.invalidRegistration, "\(prefix): an update token needs activity_id", index: index, field: "\(prefix).activity_id")
            }
        case .pushToStart:
            guard deviceID != nil, attributesType != nil else {
                throw .badRequest(
                    .invalidRegistration, "\(prefix): a push-to-start token needs device_id and attributes_type", index: index,
                    field: deviceID == nil ? "\(prefix).device_id" : "\(prefix).attributes_type")
            }
        }
        return TokenRegistration(
            token: device, kind: kind, activityID: activityID, deviceID: deviceID, attributesType: attributesType,
            bundleID: bundleID, environment: environment, frequentUpdates: frequentUpdates, channels: channels,
            createdAt: now, lastSeenAt: now)
    }
}

/// Every reason string APNs documents (apns-spec.md §7.4, §7.5), with the action a sender takes.
///
/// The raw value is the exact string APNs puts in `{"reason": ...}`.
public enum APNsReason: String, Sendable, CaseIterable {
    // 400
    case badCollapseId = "BadCollapseId"
    case badDeviceToken = "BadDeviceToken"
    case badExpirationDate = "BadExpirationDate"
    case badMessageId = "BadMessageId"
    case badPriority = "BadPriority"
    case badTopic = "BadTopic"
    case deviceTokenNotForTopic = "DeviceTokenNotForTopic"
    case duplicateHeaders = "DuplicateHeaders"
    case idleTimeout = "IdleTimeout"
    case invalidPushType = "InvalidPushType"
    case missingDeviceToken = "MissingDeviceToken"
    case missingTopic = "MissingTopic"
    case payloadEmpty = "PayloadEmpty"
    case topicDisallowed = "TopicDisallowed"
    // 400, broadcast and channel management
    case featureNotEnabled = "FeatureNotEnabled"
    case missingChannelId = "MissingChannelId"
    case badChannelId = "BadChannelId"
    case channelNotRegistered = "ChannelNotRegistered"
    case badRequestParams = "BadRequestParams"
    case badRequestPayload = "BadRequestPayload"
    case missingPushType = "MissingPushType"
    case cannotCreateChannelConfig = "CannotCreateChannelConfig"
    // 403
    case badCertificate = "BadCertificate"
    case badCertificateEnvironment = "BadCertificateEnvironment"
    case expiredProviderToken = "ExpiredProviderToken"
    case forbidden = "Forbidden"
    case invalidProviderToken = "InvalidProviderToken"
    case missingProviderToken = "MissingProviderToken"
    case unrelatedKeyIdInToken = "UnrelatedKeyIdInToken"
    /// A team-scoped key restricted to the other environment (apns-spec.md §6; both spellings are seen).
    case badEnvironmentKeyIdInToken = "BadEnvironmentKeyIdInToken"
    case badEnvironmentKeyInToken = "BadEnvironmentKeyInToken"
    case topicMismatch = "TopicMismatch"
    // 404, 405
    case badPath = "BadPath"
    case methodNotAllowed = "MethodNotAllowed"
    // 410
    case expiredToken = "ExpiredToken"
    case unregistered = "Unregistered"
    // 413
    case payloadTooLarge = "PayloadTooLarge"
    // 429
    case tooManyProviderTokenUpdates = "TooManyProviderTokenUpdates"
    case tooManyRequests = "TooManyRequests"
    // 500, 503
    case internalServerError = "InternalServerError"
    case serviceUnavailable = "ServiceUnavailable"
    case shutdown = "Shutdown"

    /// The HTTP status APNs pairs with this reason.
    public var status: Int {
        switch self {
        case .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
            .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
            .missingTopic, .payloadEmpty, .topicDisallowed, .featureNotEnabled, .missingChannelId,
            .badChannelId, .channelNotRegistered, .badRequestParams, .badRequestPayload, .missingPushType,
            .cannotCreateChannelConfig:
            return 400
        case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden,
            .invalidProviderToken, .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken,
            .badEnvironmentKeyInToken, .topicMismatch:
            return 403
        case .badPath: return 404
        case .methodNotAllowed: return 405
        case .expiredToken, .unregistered: return 410
        case .payloadTooLarge: return 413
        case .tooManyProviderTokenUpdates, .tooManyRequests: return 429
        case .internalServerError: return 500
        case .serviceUnavailable, .shutdown: return 503
        }
    }

    /// What a sender does when APNs answers with this reason (apns-spec.md §7.4).
    public var action: PushAction {
        switch self {
        case .badDeviceToken, .deviceTokenNotForTopic, .expiredToken, .unregistered:
            return .dropToken
        case .tooManyRequests, .internalServerError, .idleTimeout:
            return .retryLater
        case .serviceUnavailable, .shutdown:
            return .retryOnNewConnection
        case .expiredProviderToken:
            return .refreshProviderToken
        // Provider keys as APNs has them since 2025: a topic-specific key used for another topic
        // (UnrelatedKeyIdInToken) or an environment-restricted key used in the other environment fail again
        // on any connection until the configuration changes.
        case .payloadTooLarge, .payloadEmpty:
            return .discardMessage
        default:
            return .fixConfiguration
        }
    }
}

/// What to do with a push (and its token) after APNs answered.
public enum PushAction: String, Sendable {
    /// 200: APNs accepted the push.
    case delivered
    /// The token is dead or not for this topic: remove it, never retry.
    case dropToken = "drop-token"
    /// Transient: send again later (for Live Activities, the newest state).
    case retryLater = "retry-later"
    /// Transient and tied to the connection: send again on another connection.
    case retryOnNewConnection = "retry-on-new-connection"
    /// The provider token went stale: mint a fresh one, open a new connection, send again.
    case refreshProviderToken = "refresh-provider-token"
    /// Our request or configuration is wrong: alert an operator; sending it again as-is fails again.
    case fixConfiguration = "fix-configuration"
    /// This message can never be delivered (too large, empty): drop it, keep the token.
    case discardMessage = "discard-message"
}

/// The rules a registration must meet before anything is written. Checked for a whole batch up front, so a bad
/// entry rejects the batch without a half-applied transaction.
extension TokenRegistration {
    /// Longest channel name, in UTF-8 bytes: channel names are ids (e.g. a match id), not free text.
    public static let maximumChannelNameByteCount = 200

    /// Longest bundle id, activity id, device id or attributes type, in UTF-8 bytes: a sanity limit that keeps a
    /// buggy client from storing megabytes per token.
    public static let maximumFieldByteCount = 1024

    /// What is wrong with this registration, or nil if it can be stored.
    public var validationFailure: String? {
        if let failure = Self.appAndChannelsFailure(bundleID, channels) { return failure }
        switch kind {
        case .update:
            guard let activityID, !activityID.isEmpty else { return "update token without an activity id" }
        case .pushToStart:
            guard let deviceID, !deviceID.isEmpty else { return "push-to-start token without a device id" }
            guard let attributesType, !attributesType.isEmpty else {
                return "push-to-start token without an attributes type"
            }
        }
        if let activityID, let failure = Self.lengthFailure(activityID, "activity id") { return failure }
        if let deviceID, let failure = Self.lengthFailure(deviceID, "device id") { return failure }
        if let attributesType, let failure = Self.lengthFailure(attributesType, "attributes type") { return failure }
        if createdAt <= 0 { return "createdAt \(createdAt) is not a positive UNIX time in milliseconds" }
        if lastSeenAt <= 0 { return "lastSeenAt \(lastSeenAt) is not a positive UNIX time in milliseconds" }
        return nil
    }

    /// What is wrong with a bundle id and channel list (shared with `BroadcastSubscription`).
    static func appAndChannelsFailure(_ bundleID: String, _ channels: [String]) -> String? {
        if bundleID.isEmpty { return "bundle id is empty" }
        if let failure = Self.lengthFailure(bundleID, "bundle id") { return failure }
        if channels.isEmpty { return "no channels; a token must follow at least one channel" }
        for (position, channel) in channels.enumerated() {
            if channel.isEmpty { return "channel #\(position) is empty" }
            let bytes = channel.utf8.count
            if bytes > Self.maximumChannelNameByteCount {
                return
                    "channel #\(position) is \(bytes) bytes long; at most \(Self.maximumChannelNameByteCount) allowed"
            }
        }
        return nil
    }

    static func lengthFailure(_ value: String, _ name: String) -> String? {
        let bytes = value.utf8.count
        return bytes > maximumFieldByteCount
            ? "\(name) is \(bytes) bytes long; at most \(maximumFieldByteCount) allowed" : nil
    }

    /// Throws `.invalidRegistration` for the first bad entry of a batch.
    package static func validate(_ batch: [TokenRegistration]) throws(RegistryError) {
        for (index, registration) in batch.enumerated() {
            if let reason = registration.validationFailure { throw .invalidRegistration(index: index, reason: reason) }
        }
    }
}

extension BroadcastSubscription {
    /// What is wrong with this subscription, or nil if it can be stored (the rules of `TokenRegistration`).
    public var validationFailure: String? {
        if let failure = TokenRegistration.appAndChannelsFailure(bundleID, channels) { return failure }
        if activityID.isEmpty { return "broadcast subscription without an activity id" }
        if let failure = TokenRegistration.lengthFailure(activityID, "activity id") { return failure }
        if let deviceID, let failure = TokenRegistration.lengthFailure(deviceID, "device id") { return failure }
        if let attributesType, let failure = TokenRegistration.lengthFailure(attributesType, "attributes type") {
            return failure
        }
        if createdAt <= 0 { return "createdAt \(createdAt) is not a positive UNIX time in milliseconds" }
        if lastSeenAt <= 0 { return "lastSeenAt \(lastSeenAt) is not a positive UNIX time in milliseconds" }
        return nil
    }

    /// Throws `.invalidRegistration` for the first bad entry; indices start at `firstIndex` (after the tokens).
    package static func validate(_ batch: [BroadcastSubscription], firstIndex: Int) throws(RegistryError) {
        for (index, subscription) in batch.enumerated() {
            if let reason = subscription.validationFailure {
                throw .invalidRegistration(index: firstIndex + index, reason: reason)
            }
        }
    }
}

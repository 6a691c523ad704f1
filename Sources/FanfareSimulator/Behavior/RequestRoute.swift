/// Where a request's `:path` points.
public enum RequestRoute: Sendable, Equatable {
    /// `/3/device/<something>`: a token push (the token's syntax is checked later, in APNs' order).
    case device
    /// `/3/device/` with nothing after it: 400 `MissingDeviceToken`.
    case deviceWithoutToken
    /// `/4/broadcasts/apps/<something>`: a broadcast (channel) push.
    case broadcast
    /// Anything else: 404 `BadPath`.
    case unknown

    static let devicePrefixLength = 10  // "/3/device/"
    static let broadcastPrefixLength = 19  // "/4/broadcasts/apps/"

    public static func classify(path: UnsafeRawBufferPointer) -> RequestRoute {
        if path.hasPrefix("/3/device/") {
            return path.count == devicePrefixLength ? .deviceWithoutToken : .device
        }
        if path.hasPrefix("/4/broadcasts/apps/"), path.count > broadcastPrefixLength {
            return .broadcast
        }
        return .unknown
    }

    /// The token text of a `.device` path (everything after `/3/device/`).
    public static func deviceToken(inPath path: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        precondition(path.hasPrefix("/3/device/"), "not a device path")
        return path.suffix(from: devicePrefixLength)
    }

    /// The bundle ID of a `.broadcast` path (everything after `/4/broadcasts/apps/`).
    public static func broadcastBundle(inPath path: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        precondition(path.hasPrefix("/4/broadcasts/apps/"), "not a broadcast path")
        return path.suffix(from: broadcastPrefixLength)
    }
}

/// The `apns-push-type` values APNs documents (apns-spec.md §2.2).
enum PushTypeValue: Int, Sendable, CaseIterable {
    case alert, background, complication, controls, fileprovider, liveactivity, location, mdm, pushtotalk, voip, widgets

    public var name: StaticString {
        switch self {
        case .alert: "alert"
        case .background: "background"
        case .complication: "complication"
        case .controls: "controls"
        case .fileprovider: "fileprovider"
        case .liveactivity: "liveactivity"
        case .location: "location"
        case .mdm: "mdm"
        case .pushtotalk: "pushtotalk"
        case .voip: "voip"
        case .widgets: "widgets"
        }
    }

    /// The topic form this push type requires.
    public var requiredTopic: TopicKind {
        switch self {
        case .alert, .background, .mdm: .bundle
        case .complication: .complication
        case .controls: .controls
        case .fileprovider: .fileprovider
        case .liveactivity: .liveActivity
        case .location: .location
        case .pushtotalk: .pushToTalk
        case .voip: .voip
        case .widgets: .widgets
        }
    }

    public static func recognise(_ value: UnsafeRawBufferPointer) -> PushTypeValue? {
        // Few enough values that a linear scan of literals costs less than hashing. Walking raw values
        // (not `allCases` or an array literal) keeps this free of allocation.
        if value.equals(PushTypeValue.liveactivity.name) { return .liveactivity }
        var raw = 0
        while let candidate = PushTypeValue(rawValue: raw) {
            if value.equals(candidate.name) { return candidate }
            raw += 1
        }
        return nil
    }
}

/// Which of the app's topics an `apns-topic` names: the bundle ID alone or with a push-type suffix.
enum TopicKind: Int, Sendable, CaseIterable {
    case bundle, complication, controls, fileprovider, liveActivity, location, pushToTalk, voip, widgets

    /// What follows the bundle ID in the topic.
    public var suffix: StaticString {
        switch self {
        case .bundle: ""
        case .complication: ".complication"
        case .controls: ".push-type.controls"
        case .fileprovider: ".pushkit.fileprovider"
        case .liveActivity: ".push-type.liveactivity"
        case .location: ".location-query"
        case .pushToTalk: ".voip-ptt"
        case .voip: ".voip"
        case .widgets: ".push-type.widgets"
        }
    }

    /// The kind of `topic` if it is `bundle` or `bundle` + a known suffix; nil otherwise.
    static func classify(topic: UnsafeRawBufferPointer, bundle: UnsafeRawBufferPointer) -> TopicKind? {
        guard topic.count >= bundle.count, bundle.equals(topic, at: 0) else { return nil }
        let rest = topic.suffix(from: bundle.count)
        if rest.count == 0 { return .bundle }
        if rest.equals(TopicKind.liveActivity.suffix) { return .liveActivity }
        var raw = TopicKind.bundle.rawValue + 1
        while let kind = TopicKind(rawValue: raw) {
            if rest.equals(kind.suffix) { return kind }
            raw += 1
        }
        return nil
    }
}

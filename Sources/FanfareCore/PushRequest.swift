/// Header values of one push request (apns-spec §2), shared by the client and the simulator.

/// `apns-priority`.
public enum PushPriority: Int, Sendable, CaseIterable {
    /// Prioritize the device's power; never wakes it.
    case powerSaving = 1
    /// Power-aware delivery; does not count against the Live Activity budget.
    case normal = 5
    /// Immediate delivery; counts against the Live Activity budget.
    case immediate = 10

    /// What APNs assumes when the header is omitted.
    public static let `default` = PushPriority.immediate

    /// Parses the header value: exactly `1`, `5` or `10`.
    public init?(headerValue: some StringProtocol) {
        switch headerValue {
        case "1": self = .powerSaving
        case "5": self = .normal
        case "10": self = .immediate
        default: return nil
        }
    }

    /// Parses the header value from raw bytes (HTTP/2 header callbacks).
    @inlinable
    public init?(headerValue: UnsafeRawBufferPointer) {
        switch headerValue.count {
        case 1 where headerValue[0] == UInt8(ascii: "1"): self = .powerSaving
        case 1 where headerValue[0] == UInt8(ascii: "5"): self = .normal
        case 2 where headerValue[0] == UInt8(ascii: "1") && headerValue[1] == UInt8(ascii: "0"): self = .immediate
        default: return nil
        }
    }

    /// The header value to send.
    @inlinable
    public var headerValue: StaticString {
        switch self {
        case .powerSaving: return "1"
        case .normal: return "5"
        case .immediate: return "10"
        }
    }
}

/// `apns-push-type` (apns-spec §2.2). The raw value is the header value.
public enum PushType: String, Sendable, CaseIterable {
    case alert
    case background
    case complication
    case controls
    case fileprovider
    case liveactivity
    case location
    case mdm
    case pushtotalk
    case voip
    case widgets

    /// What `apns-topic` must append to the bundle ID for this push type: `""` for the bare bundle ID,
    /// nil for `mdm` (its topic is the UID from the MDM certificate, not a bundle ID).
    public var requiredTopicSuffix: String? {
        switch self {
        case .alert, .background: return ""
        case .complication: return ".complication"
        case .controls: return ".push-type.controls"
        case .fileprovider: return ".pushkit.fileprovider"
        case .liveactivity: return Topic.liveActivitySuffix
        case .location: return ".location-query"
        case .mdm: return nil
        case .pushtotalk: return ".voip-ptt"
        case .voip: return ".voip"
        case .widgets: return ".push-type.widgets"
        }
    }

    /// The largest body APNs accepts for this push type.
    public var payloadLimit: Int {
        self == .voip ? PayloadLimits.voip : PayloadLimits.liveActivity
    }

    /// Parses the header value from raw bytes (case-sensitive, as APNs documents the values).
    public init?(headerValue: UnsafeRawBufferPointer) {
        self.init(rawValue: String(decoding: headerValue, as: UTF8.self))
    }
}

/// `apns-topic` values.
public enum Topic {
    public static let liveActivitySuffix = ".push-type.liveactivity"

    /// `<bundleID>.push-type.liveactivity`, the topic every Live Activity push to a token needs.
    public static func liveActivity(bundleID: String) -> String {
        precondition(!bundleID.isEmpty, "Topic.liveActivity: empty bundle ID")
        return bundleID + liveActivitySuffix
    }

    /// The topic for `pushType`, or nil for `mdm` (whose topic does not derive from a bundle ID).
    public static func make(bundleID: String, pushType: PushType) -> String? {
        pushType.requiredTopicSuffix.map { bundleID + $0 }
    }

    /// The bundle ID in a Live Activity topic, or nil when `topic` lacks the suffix or the bundle ID.
    public static func bundleID(fromLiveActivityTopic topic: String) -> Substring? {
        guard topic.hasSuffix(liveActivitySuffix) else { return nil }
        let bundleID = topic.dropLast(liveActivitySuffix.utf8.count)
        return bundleID.isEmpty ? nil : bundleID
    }
}

/// `apns-collapse-id`.
public enum CollapseID {
    public static let maximumByteCount = 64

    /// Checks a collapse id before it is sent: 1...64 bytes of UTF-8 that an HTTP field value may carry
    /// (RFC 9110 §5.5: no control characters, no space or tab at either end). A value HTTP/2 forbids would
    /// make the server reset the stream, and the caller would learn nothing about why.
    public static func validate(_ id: String) throws(CollapseIDError) {
        let bytes = id.utf8.count
        guard bytes > 0 else { throw .empty }
        guard bytes <= maximumByteCount else { throw .tooLong(bytes: bytes) }
        for (offset, byte) in id.utf8.enumerated() {
            let isBlank = byte == 0x20 || byte == 0x09
            let isControl = (byte < 0x20 && byte != 0x09) || byte == 0x7F
            if isControl || (isBlank && (offset == 0 || offset == bytes - 1)) {
                throw .invalidByte(byte, offset: offset)
            }
        }
    }
}

public enum CollapseIDError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty
    case tooLong(bytes: Int)
    /// A control character, or a space or tab at either end, at byte `offset`.
    case invalidByte(UInt8, offset: Int)

    public var description: String {
        switch self {
        case .empty:
            return "collapse id is empty; omit apns-collapse-id instead"
        case .tooLong(let bytes):
            return "collapse id is \(bytes) bytes; APNs allows at most \(CollapseID.maximumByteCount) (BadCollapseId)"
        case .invalidByte(let byte, let offset):
            let what = byte == 0x20 || byte == 0x09 ? "a space or tab at its end" : "a control character"
            return "collapse id has \(what) (byte 0x\(String(byte, radix: 16)) at offset \(offset)); an HTTP header "
                + "value may not carry it"
        }
    }
}

/// The APNs environments and where to reach them (apns-spec §1.1).
public enum APNsEndpoint: String, Sendable, CaseIterable {
    case production
    case sandbox

    public static let port = 443
    /// Also accepted for pushes, on both hosts.
    public static let alternatePort = 2197

    /// Host for token pushes and broadcast publishing.
    public var host: String {
        switch self {
        case .production: return "api.push.apple.com"
        case .sandbox: return "api.sandbox.push.apple.com"
        }
    }

    /// Host for broadcast channel management.
    public var channelManagementHost: String {
        switch self {
        case .production: return "api-manage-broadcast.push.apple.com"
        case .sandbox: return "api-manage-broadcast.sandbox.push.apple.com"
        }
    }

    /// Channel management is not on 443.
    public var channelManagementPort: Int {
        switch self {
        case .production: return 2196
        case .sandbox: return 2195
        }
    }
}

/// `:path` values.
public enum APNsPath {
    public static let devicePrefix: StaticString = "/3/device/"
    /// The longest device path: the prefix plus a ``DeviceToken/maximumByteCount``-byte token in hex.
    public static let maximumDevicePathByteCount = 10 + 2 * DeviceToken.maximumByteCount

    /// Writes `/3/device/<lowercase hex token>` to `destination`; returns the byte count (at most
    /// ``maximumDevicePathByteCount``).
    @inlinable
    @discardableResult
    public static func writeDevicePath(for token: DeviceToken, to destination: UnsafeMutableRawPointer) -> Int {
        let prefix = devicePrefix
        let prefixCount = prefix.utf8CodeUnitCount
        destination.copyMemory(from: prefix.utf8Start, byteCount: prefixCount)
        let count = prefixCount + token.writeLowercaseHex(to: destination + prefixCount)
        assert(count <= maximumDevicePathByteCount)
        return count
    }

    /// `/4/broadcasts/apps/<bundleID>` (the plain bundle ID, no push-type suffix).
    public static func broadcast(bundleID: String) -> String {
        "/4/broadcasts/apps/" + bundleID
    }
}

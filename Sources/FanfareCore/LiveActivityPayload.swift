/// The Live Activity payload model and its allocation-free encoder (apns-spec §3).

public enum LiveActivityEvent: String, Sendable, CaseIterable {
    case start, update, end
}

/// The `alert` dictionary of a Live Activity push (apns-spec §3.2).
public struct LiveActivityAlert: Sendable, Equatable {
    /// Alert text: a plain string, or a localization key with arguments, encoded as
    /// `{"loc-key":"…","loc-args":[…]}` (`loc-args` omitted when there are none).
    public enum AlertText: Sendable, Equatable {
        case plain(String)
        case localized(key: String, args: [String])
    }

    public var title: AlertText?
    public var subtitle: AlertText?
    public var body: AlertText?
    /// A sound file in the app bundle (or `"default"`).
    public var sound: String?

    public init(title: AlertText? = nil, subtitle: AlertText? = nil, body: AlertText? = nil, sound: String? = nil) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.sound = sound
    }

    var isEmpty: Bool { title == nil && subtitle == nil && body == nil && sound == nil }
}

/// Everything inside `"aps"` for one Live Activity push.
public struct LiveActivityContent: Sendable, Equatable {
    public var event: LiveActivityEvent
    /// UNIX seconds; the device ignores updates older than the last one it applied.
    public var timestamp: Int64
    /// The app's `ContentState` as a JSON object. Required for `start`; send the final state on `end`.
    public var contentState: RawJSON?
    /// UNIX seconds after which the activity shows as stale.
    public var staleDate: Int64?
    /// UNIX seconds when an ended activity is removed; 0 (any past date) removes it at once.
    public var dismissalDate: Int64?
    /// Orders concurrent activities; must be finite.
    public var relevanceScore: Double?
    /// Required for `start`.
    public var alert: LiveActivityAlert?
    /// The app's `ActivityAttributes` type name. `start` only, required there.
    public var attributesType: String?
    /// The static attributes as a JSON object. `start` only, required there.
    public var attributes: RawJSON?
    /// Emits `"input-push-token":1` so the new activity gets an update token (`start` only, iOS 18+).
    public var inputPushToken: Bool
    /// Subscribes the new activity to a broadcast channel (`start` only, iOS 18+).
    public var inputPushChannel: String?

    public init(
        event: LiveActivityEvent,
        timestamp: Int64,
        contentState: RawJSON? = nil,
        staleDate: Int64? = nil,
        dismissalDate: Int64? = nil,
        relevanceScore: Double? = nil,
        alert: LiveActivityAlert? = nil,
        attributesType: String? = nil,
        attributes: RawJSON? = nil,
        inputPushToken: Bool = false,
        inputPushChannel: String? = nil
    ) {
        self.event = event
        self.timestamp = timestamp
        self.contentState = contentState
        self.staleDate = staleDate
        self.dismissalDate = dismissalDate
        self.relevanceScore = relevanceScore
        self.alert = alert
        self.attributesType = attributesType
        self.attributes = attributes
        self.inputPushToken = inputPushToken
        self.inputPushChannel = inputPushChannel
    }
}

/// APNs body size limits in bytes (apns-spec §3.4).
public enum PayloadLimits {
    /// Every non-VoIP push to a token, Live Activities included.
    public static let liveActivity = 4096
    /// Broadcast (channel) pushes.
    public static let broadcast = 5120
    public static let voip = 5120
}

public enum PayloadError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The encoded payload needs `bytes`, more than `limit` (the APNs limit or the buffer, if smaller).
    case tooLarge(bytes: Int, limit: Int)
    /// The content breaks a Live Activity rule; the message says which.
    case invalid(String)

    public var description: String {
        switch self {
        case .tooLarge(let bytes, let limit):
            return "payload is \(bytes) bytes, over the \(limit)-byte limit; "
                + "shrink content-state, attributes or alert text"
        case .invalid(let message):
            return "invalid Live Activity payload: \(message)"
        }
    }
}

public enum LiveActivityPayloadEncoder {
    /// Encodes `{"aps":{...}}` into `buffer`; returns the byte count.
    ///
    /// Checks the rules first and throws `.invalid` for: `start` without content-state, alert,
    /// attributes-type or attributes; attributes, attributes-type or input-push-* on other events; an
    /// empty alert, attributes-type or channel id; content-state/attributes that are not objects;
    /// negative dates; a non-finite relevance score. Throws `.tooLarge` with the real size when the
    /// payload needs more than `limit` bytes (or more than `buffer.count`, if that is smaller; the
    /// error's `limit` is then the buffer size). Never allocates.
    public static func encode(
        _ content: LiveActivityContent, into buffer: UnsafeMutableRawBufferPointer,
        limit: Int = PayloadLimits.liveActivity
    ) throws(PayloadError) -> Int {
        precondition(limit > 0, "LiveActivityPayloadEncoder: limit must be positive")
        if let problem = ruleViolation(content) { throw .invalid(problem) }
        let capacity = min(limit, buffer.count)
        // The writer keeps counting past its capacity, so one pass gives the exact size either way.
        var writer = JSONWriter(buffer: buffer, capacity: capacity)
        write(content, to: &writer)
        assert(writer.isComplete)
        guard !writer.overflowed else { throw .tooLarge(bytes: writer.count, limit: capacity) }
        assert(JSONValidator.validate(writer.writtenBytes) == nil, "encoder produced invalid JSON")
        return writer.count
    }

    /// The first rule `content` breaks, as a message that says what to fix; nil when it is valid.
    public static func ruleViolation(_ content: LiveActivityContent) -> String? {
        if content.timestamp < 0 { return "timestamp must be UNIX seconds (>= 0)" }
        if let staleDate = content.staleDate, staleDate < 0 { return "stale-date must be UNIX seconds (>= 0)" }
        if let dismissal = content.dismissalDate, dismissal < 0 {
            return "dismissal-date must be UNIX seconds (>= 0; 0 dismisses at once)"
        }
        if let score = content.relevanceScore, !score.isFinite {
            return "relevance-score must be a finite number"
        }
        if let state = content.contentState, !state.isObject { return "content-state must be a JSON object" }
        if let attributes = content.attributes, !attributes.isObject { return "attributes must be a JSON object" }
        if let alert = content.alert, alert.isEmpty { return "alert needs a title, subtitle, body or sound" }
        switch content.event {
        case .start:
            if content.contentState == nil { return "start requires content-state" }
            if content.alert == nil { return "start requires an alert (without one the activity does not start)" }
            guard let type = content.attributesType else { return "start requires attributes-type" }
            if type.isEmpty { return "attributes-type must not be empty" }
            if content.attributes == nil { return "start requires attributes" }
            if let channel = content.inputPushChannel, channel.isEmpty { return "input-push-channel must not be empty" }
        case .update, .end:
            let event = content.event.rawValue
            if content.attributesType != nil { return "attributes-type is only allowed on start, not \(event)" }
            if content.attributes != nil { return "attributes is only allowed on start, not \(event)" }
            if content.inputPushToken { return "input-push-token is only allowed on start, not \(event)" }
            if content.inputPushChannel != nil { return "input-push-channel is only allowed on start, not \(event)" }
        }
        return nil
    }

    static func write(_ content: LiveActivityContent, to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("aps")
        writer.beginObject()
        writer.key("timestamp")
        writer.int(content.timestamp)
        writer.key("event")
        switch content.event {
        case .start: writer.string("start" as StaticString)
        case .update: writer.string("update" as StaticString)
        case .end: writer.string("end" as StaticString)
        }
        if let state = content.contentState {
            writer.key("content-state")
            state.withUnsafeBytes { writer.raw($0) }
        }
        if let staleDate = content.staleDate {
            writer.key("stale-date")
            writer.int(staleDate)
        }
        if let dismissalDate = content.dismissalDate {
            writer.key("dismissal-date")
            writer.int(dismissalDate)
        }
        if let score = content.relevanceScore {
            writer.key("relevance-score")
            writer.double(score)
        }
        if let alert = content.alert {
            writer.key("alert")
            write(alert, to: &writer)
        }
        if let type = content.attributesType {
            writer.key("attributes-type")
            writer.string(type)
        }
        if let attributes = content.attributes {
            writer.key("attributes")
            attributes.withUnsafeBytes { writer.raw($0) }
        }
        if content.inputPushToken {
            writer.key("input-push-token")
            writer.int(1)
        }
        if let channel = content.inputPushChannel {
            writer.key("input-push-channel")
            writer.string(channel)
        }
        writer.endObject()
        writer.endObject()
    }

    static func write(_ alert: LiveActivityAlert, to writer: inout JSONWriter) {
        writer.beginObject()
        if let title = alert.title {
            writer.key("title")
            write(title, to: &writer)
        }
        if let subtitle = alert.subtitle {
            writer.key("subtitle")
            write(subtitle, to: &writer)
        }
        if let body = alert.body {
            writer.key("body")
            write(body, to: &writer)
        }
        if let sound = alert.sound {
            writer.key("sound")
            writer.string(sound)
        }
        writer.endObject()
    }

    static func write(_ text: LiveActivityAlert.AlertText, to writer: inout JSONWriter) {
        switch text {
        case .plain(let string):
            writer.string(string)
        case .localized(let key, let args):
            writer.beginObject()
            writer.key("loc-key")
            writer.string(key)
            if !args.isEmpty {
                writer.key("loc-args")
                writer.beginArray()
                for argument in args { writer.string(argument) }
                writer.endArray()
            }
            writer.endObject()
        }
    }
}

/// A reusable, 64-byte-aligned buffer of ``PayloadLimits/broadcast`` bytes for encoded payloads.
/// One per worker; not thread-safe.
public final class PayloadBuffer {
    public static let capacity = PayloadLimits.broadcast

    private let storage: UnsafeMutableRawBufferPointer
    /// Size of the last successful encoding (0 before the first, or after a failed one).
    public private(set) var count = 0

    public init() {
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.capacity, alignment: 64)
    }

    deinit {
        storage.deallocate()
    }

    /// The bytes of the last successful encoding; valid until the next `encode` or until this buffer
    /// is released.
    public var bytes: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: storage[0..<count])
    }

    /// Encodes `content` into this buffer (see ``LiveActivityPayloadEncoder/encode(_:into:limit:)``).
    @discardableResult
    public func encode(
        _ content: LiveActivityContent, limit: Int = PayloadLimits.liveActivity
    )
        throws(PayloadError) -> UnsafeRawBufferPointer
    {
        count = 0
        count = try LiveActivityPayloadEncoder.encode(content, into: storage, limit: limit)
        assert(count <= min(limit, Self.capacity))
        return bytes
    }
}

import ArgumentParser
import FanfareCore

/// The Live Activity payload and per-push headers, from flags.
struct PayloadOptions: ParsableArguments {
    @Option(help: "The activity event: start, update or end.")
    var event: String = "update"

    @Option(help: "UNIX seconds for aps.timestamp (default: now). Newer timestamps win on the device.")
    var timestamp: Int64?

    @Option(help: "The activity's content state as a JSON object, e.g. '{\"home\":1,\"away\":0}'.")
    var contentState: String?

    @Option(help: "Alert title (plain text).")
    var alertTitle: String?

    @Option(help: "Alert subtitle (plain text).")
    var alertSubtitle: String?

    @Option(help: "Alert body (plain text).")
    var alertBody: String?

    @Option(help: "Localization key for the alert title (instead of --alert-title).")
    var alertTitleLocKey: String?

    @Option(help: "Localization key for the alert body (instead of --alert-body).")
    var alertLocKey: String?

    @Option(help: "Localization arguments for --alert-loc-key (repeatable).")
    var alertLocArg: [String] = []

    @Option(help: "Alert sound file name in the app bundle.")
    var sound: String?

    @Option(help: "UNIX seconds after which the activity shows as stale.")
    var staleDate: Int64?

    @Option(help: "UNIX seconds when an ended activity is removed; 0 removes it at once.")
    var dismissalDate: Int64?

    @Option(help: "Relevance score (orders several activities of the app).")
    var relevanceScore: Double?

    @Option(help: "The ActivityAttributes type name (start events).")
    var attributesType: String?

    @Option(help: "The static attributes as a JSON object (start events).")
    var attributes: String?

    @Flag(help: "Ask the device for an update token for the started activity (iOS 18+, start events).")
    var inputPushToken = false

    @Option(help: "Broadcast channel ID the started activity subscribes to (iOS 18+, start events).")
    var inputPushChannel: String?

    @Option(help: "apns-priority: 1, 5 or 10.")
    var priority: Int = 10

    @Option(help: "apns-expiration in UNIX seconds (0 = deliver once, do not store).")
    var expiration: Int64?

    @Option(help: "apns-collapse-id (at most 64 bytes).")
    var collapseId: String?

    @Option(help: "apns-id to use (a UUID); generated when omitted.")
    var apnsId: String?

    func makeContent(now: Int64) throws -> LiveActivityContent {
        guard let event = LiveActivityEvent(rawValue: event) else {
            throw UsageError("--event '\(event)' must be start, update or end")
        }
        var content = LiveActivityContent(event: event, timestamp: timestamp ?? now)
        if let contentState {
            content.contentState = try json(contentState, flag: "--content-state")
        }
        if let attributes {
            content.attributes = try json(attributes, flag: "--attributes")
        }
        content.attributesType = attributesType
        content.staleDate = staleDate
        content.dismissalDate = dismissalDate
        content.relevanceScore = relevanceScore
        content.inputPushToken = inputPushToken
        content.inputPushChannel = inputPushChannel
        if alertTitle != nil && alertTitleLocKey != nil {
            throw UsageError("give --alert-title or --alert-title-loc-key, not both")
        }
        if alertBody != nil && alertLocKey != nil { throw UsageError("give --alert-body or --alert-loc-key, not both") }
        if !alertLocArg.isEmpty && alertLocKey == nil { throw UsageError("--alert-loc-arg needs --alert-loc-key") }
        if alertTitle != nil || alertSubtitle != nil || alertBody != nil || alertTitleLocKey != nil
            || alertLocKey != nil || sound != nil
        {
            var alert = LiveActivityAlert()
            if let alertTitle { alert.title = .plain(alertTitle) }
            if let alertTitleLocKey { alert.title = .localized(key: alertTitleLocKey, args: []) }
            if let alertSubtitle { alert.subtitle = .plain(alertSubtitle) }
            if let alertBody { alert.body = .plain(alertBody) }
            if let alertLocKey { alert.body = .localized(key: alertLocKey, args: alertLocArg) }
            alert.sound = sound
            content.alert = alert
        }
        return content
    }

    func makePriority() throws -> PushPriority {
        guard let priority = PushPriority(rawValue: priority) else {
            throw UsageError("--priority \(self.priority) must be 1, 5 or 10")
        }
        return priority
    }

    func validatedCollapseID() throws -> String? {
        guard let collapseId else { return nil }
        do {
            try CollapseID.validate(collapseId)
        } catch {
            throw UsageError("--collapse-id: \(error)")
        }
        return collapseId
    }

    private func json(_ text: String, flag: String) throws -> RawJSON {
        do {
            return try RawJSON(validating: text, requireObject: true)
        } catch {
            throw UsageError("\(flag) is not a JSON object: \(error)")
        }
    }
}

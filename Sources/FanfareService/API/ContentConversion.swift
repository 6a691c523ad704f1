import FanfareCore
import FanfareFanout
internal import Foundation
internal import OpenAPIRuntime

/// The API's Live Activity fields (shared by `ChannelUpdate` and `PushRequest`) → `LiveActivityContent`.
package struct ContentFields {
    var event: LiveActivityEvent
    var contentState: OpenAPIObjectContainer?
    var alert: Components.Schemas.Alert?
    var timestamp: Int64?
    var staleDate: Int64?
    var dismissalDate: Int64?
    var relevanceScore: Double?
    var attributesType: String?
    var attributes: OpenAPIObjectContainer?
    var inputPushToken: Bool?
    var inputPushChannel: String?

    /// Checks the schema's limits and builds the content (the Live Activity rules are checked when it is
    /// encoded, by the engine).
    func content(now: Int64) throws(ServiceProblem) -> LiveActivityContent {
        try Validation.unixSeconds(timestamp, field: "timestamp")
        try Validation.unixSeconds(staleDate, field: "stale_date")
        try Validation.unixSeconds(dismissalDate, field: "dismissal_date")
        try Validation.length(attributesType, field: "attributes_type", min: 1, max: 256)
        try Validation.length(inputPushChannel, field: "input_push_channel", min: 1, max: 256)
        var content = LiveActivityContent(event: event, timestamp: timestamp ?? now)
        content.contentState = try contentState.map { container throws(ServiceProblem) in
            try Self.json(container, field: "content_state")
        }
        content.attributes = try attributes.map { container throws(ServiceProblem) in
            try Self.json(container, field: "attributes")
        }
        content.staleDate = staleDate
        content.dismissalDate = dismissalDate
        if let relevanceScore, !relevanceScore.isFinite {
            throw .badRequest(.invalidRequest, "relevance_score must be a finite number", field: "relevance_score")
        }
        content.relevanceScore = relevanceScore
        content.attributesType = attributesType
        content.inputPushToken = inputPushToken ?? false
        content.inputPushChannel = inputPushChannel
        if let alert { content.alert = try Self.alert(alert) }
        return content
    }

    private static func json(_ container: OpenAPIObjectContainer, field: String) throws(ServiceProblem) -> RawJSON {
        let data: Data
        do { data = try jsonEncoder.encode(container) } catch {
            throw .badRequest(.invalidRequest, "\(field) cannot be encoded as JSON: \(error)", field: field)
        }
        do {
            return try RawJSON(validating: String(decoding: data, as: UTF8.self), requireObject: true)
        } catch {
            throw .badRequest(.invalidRequest, "\(field) must be a JSON object: \(error)", field: field)
        }
    }

    private static let jsonEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    private static func alert(_ alert: Components.Schemas.Alert) throws(ServiceProblem) -> LiveActivityAlert {
        guard alert.title != nil || alert.subtitle != nil || alert.body != nil || alert.sound != nil else {
            throw .badRequest(.invalidRequest, "alert needs a title, subtitle, body or sound", field: "alert")
        }
        try Validation.length(alert.sound, field: "alert.sound", min: 1, max: 256)
        return LiveActivityAlert(
            title: try alert.title.map { text throws(ServiceProblem) in try Self.text(text, field: "alert.title") },
            subtitle: try alert.subtitle.map { text throws(ServiceProblem) in
                try Self.text(text, field: "alert.subtitle")
            },
            body: try alert.body.map { text throws(ServiceProblem) in try Self.text(text, field: "alert.body") },
            sound: alert.sound)
    }

    private static func text(
        _ text: Components.Schemas.AlertText, field: String
    ) throws(ServiceProblem) -> LiveActivityAlert.AlertText {
        switch text {
        case .case1(let plain):
            try Validation.length(plain, field: field, max: 4096)
            return .plain(plain)
        case .LocalizedText(let localized):
            try Validation.length(localized.locKey, field: "\(field).loc_key", min: 1, max: 4096)
            let args = localized.locArgs ?? []
            if args.count > 64 {
                throw .badRequest(
                    .invalidRequest, "\(field).loc_args has \(args.count) items; at most 64", field: "\(field).loc_args"
                )
            }
            for (position, argument) in args.enumerated() {
                try Validation.length(argument, field: "\(field).loc_args[\(position)]", max: 4096)
            }
            return .localized(key: localized.locKey, args: args)
        }
    }
}

extension UpdatePriority {
    init(_ priority: Components.Schemas.Priority?) {
        switch priority ?? .auto {
        case .auto: self = .auto
        case .immediate: self = .immediate
        case .normal: self = .normal
        }
    }
}

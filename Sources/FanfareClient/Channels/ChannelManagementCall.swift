import FanfareCore

/// One call of APNs' channel management API (apns-spec.md §8.2).
public enum ChannelManagementOperation: Sendable, Equatable, CustomStringConvertible {
    /// `POST /1/apps/<bundle id>/channels` with `{"message-storage-policy":N,"push-type":"LiveActivity"}`: 201
    /// and the new id in `apns-channel-id`.
    case create(ChannelStoragePolicy)
    /// `GET /1/apps/<bundle id>/channels` with `apns-channel-id`: 200 and the channel's settings.
    case read(BroadcastChannelID)
    /// `GET /1/apps/<bundle id>/all-channels`: 200 and `{"channels":[…]}` (or an empty body).
    case list
    /// `DELETE /1/apps/<bundle id>/channels` with `apns-channel-id`: 204.
    case delete(BroadcastChannelID)

    public var description: String {
        switch self {
        case .create(let policy): return "create (storage policy \(policy.rawValue))"
        case .read(let channel): return "read \(channel)"
        case .list: return "list"
        case .delete(let channel): return "delete \(channel)"
        }
    }

    var method: String {
        switch self {
        case .create: return "POST"
        case .read, .list: return "GET"
        case .delete: return "DELETE"
        }
    }

    func path(bundleID: String) -> String {
        if case .list = self { return "/1/apps/\(bundleID)/all-channels" }
        return "/1/apps/\(bundleID)/channels"
    }

    /// The `apns-channel-id` the request carries.
    var channel: BroadcastChannelID? {
        switch self {
        case .read(let channel), .delete(let channel): return channel
        case .create, .list: return nil
        }
    }

    var body: [UInt8] {
        if case .create(let policy) = self { return BroadcastChannelMessages.createBody(storagePolicy: policy) }
        return []
    }
}

/// A successful call's answer.
public struct ChannelManagementReply: Sendable, Equatable {
    public var operation: ChannelManagementOperation
    /// 201 (create), 200 (read, list) or 204 (delete), as APNs sent it.
    public var status: Int
    /// The answer's `apns-request-id`, or the request's own when the answer carried none.
    public var requestID: PushIdentifier
    /// Create: the new channel's id.
    public var createdChannel: BroadcastChannelID?
    /// Read: the channel's settings.
    public var info: BroadcastChannelInfo?
    /// List: every channel of the app in this environment.
    public var channels: [BroadcastChannelID]
}

/// Why a channel management call failed: one type for APNs' rejections, answers that are not what APNs
/// documents, transport failures and timeouts. Every case keeps the call's request id.
public struct ChannelManagementError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// APNs answered with an error status. `reason` is nil for a reason this build does not know
        /// (`rawReason` then holds it, escaped), or when the body gave none.
        case rejected(status: Int, reason: APNsReason?, rawReason: String?)
        /// A 2xx answer without what it must carry (no or a malformed `apns-channel-id`, a body that does
        /// not parse, a body over the limit), or a malformed status.
        case badAnswer(String)
        /// No answer: the connection could not be made or ended first. `mayHaveBeenProcessed` says whether
        /// the request was sent (a create may then have made a channel: list to find out).
        case transport(String, mayHaveBeenProcessed: Bool)
        /// The call's time ran out (`ChannelManagementConfiguration.requestTimeout`).
        case timedOut
        /// The manager was shut down before the answer.
        case shutDown
    }

    public var operation: ChannelManagementOperation
    public var kind: Kind
    /// The `apns-request-id` of the call: the answer's when it carried one, else the one sent.
    public var requestID: PushIdentifier

    public init(operation: ChannelManagementOperation, kind: Kind, requestID: PushIdentifier) {
        self.operation = operation
        self.kind = kind
        self.requestID = requestID
    }

    /// The HTTP status APNs answered with, if it answered.
    public var status: Int? {
        if case .rejected(let status, _, _) = kind { return status }
        return nil
    }

    public var reason: APNsReason? {
        if case .rejected(_, let reason, _) = kind { return reason }
        return nil
    }

    /// What to do about it (apns-spec.md §7.4, §7.5): a known reason's action, else the status's; transport
    /// failures and timeouts are `retryLater`, answers that make no sense `fixConfiguration`.
    public var action: PushAction {
        switch kind {
        case .rejected(let status, let reason, _): return reason?.action ?? PushOutcome.action(forStatus: status)
        case .badAnswer: return .fixConfiguration
        case .transport, .timedOut, .shutDown: return .retryLater
        }
    }

    public var description: String {
        let what: String
        switch kind {
        case .rejected(let status, let reason, let raw):
            what = "APNs answered \(status) \(reason?.rawValue ?? raw ?? "(no reason given)")"
        case .badAnswer(let problem): what = "APNs' answer is not usable: \(problem)"
        case .transport(let cause, let processed):
            what =
                "no answer from APNs: \(cause)"
                + (processed ? " (the request was sent; APNs may have processed it)" : "")
        case .timedOut: what = "no answer from APNs in time"
        case .shutDown: what = "the channel manager was shut down before the answer"
        }
        return "channel \(operation): \(what); apns-request-id \(requestID); action: \(action.rawValue)"
    }
}

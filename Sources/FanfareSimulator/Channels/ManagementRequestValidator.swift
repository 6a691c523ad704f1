import FanfareCore

/// The simulated management host's answer to one request (apns-spec.md §8.2, §7.5).
public struct ManagementDecision: Sendable, Equatable {
    /// 201 created, 200 read or list, 204 deleted, or the rejection's status.
    public var status: Int
    /// The rejection; nil on success.
    public var reason: APNsReason?
    /// `apns-channel-id` of a 201.
    public var channelID: BroadcastChannelID?
    /// The JSON body of a 200 (read, list); an error body is written from `reason`.
    public var body: [UInt8]

    static func reject(_ reason: APNsReason) -> ManagementDecision {
        ManagementDecision(status: reason.status, reason: reason, channelID: nil, body: [])
    }

    /// As a push decision, for the stats and the connection's stream policy (a success counts as accepted).
    var simulatorDecision: SimulatorDecision {
        reason.map { .reject($0, timestamp: nil) } ?? .accept
    }
}

/// What a management path names.
enum ManagementRoute: Equatable {
    /// `/1/apps/<bundle>/channels`: create (POST), read (GET), delete (DELETE).
    case channels
    /// `/1/apps/<bundle>/all-channels`: list (GET).
    case allChannels

    /// The route and the bundle bytes of a management path, or nil for any other path.
    static func classify(path: UnsafeRawBufferPointer) -> (ManagementRoute, UnsafeRawBufferPointer)? {
        let prefix = 8  // "/1/apps/"
        guard path.hasPrefix("/1/apps/") else { return nil }
        var slash = path.count - 1
        while slash >= prefix, path[slash] != UInt8(ascii: "/") { slash -= 1 }
        guard slash > prefix else { return nil }
        let bundle = path.slice(from: prefix, count: slash - prefix)
        let tail = path.suffix(from: slash + 1)
        if tail.equals("channels") { return (.channels, bundle) }
        if tail.equals("all-channels") { return (.allChannels, bundle) }
        return nil
    }
}

/// Decides channel-management requests (create, read, list, delete) like APNs' management host, in this
/// order; the first failing rule answers:
///
///  1. `apns-request-id` present and not a canonical UUID → 400 `BadMessageId` (the push port's first rule,
///     for the same header family).
///  2. `:path` not `/1/apps/<bundle>/channels` or `/1/apps/<bundle>/all-channels` → 404 `BadPath` (so
///     `/3/device/…` and `/4/broadcasts/…` are refused whatever their method: this host does not serve them).
///  3. `:method` not GET, POST or DELETE → 405 `MethodNotAllowed`; a known method the path does not take
///     (POST or DELETE on `all-channels`) → 404 `BadPath` (§7.5: "wrong method/path combination").
///  4. a served bundle with a push-type suffix → 400 `TopicDisallowed`; no served app → 403 `TopicMismatch` [U:
///     Apple does not say which]. Before authentication, like the broadcast path's bundle (RequestValidator).
///  5. a recognised header repeated → 400 `DuplicateHeaders`.
///  6. provider token for the path's app (the push port's `ConnectionAuthState`, same rules) → 403 / 429.
///  7. read, delete: `apns-channel-id` absent → 400 `MissingChannelId`; not base64 or too long → 400
///     `BadChannelId`; no such channel for the app in this environment → 400 `ChannelNotRegistered`.
///  8. create: empty body → 400 `PayloadEmpty`; not JSON → 400 `BadRequestPayload`; not an object, an
///     unknown attribute, `message-storage-policy` missing or not 0/1 → 400 `BadRequestParams`; `push-type`
///     missing → 400 `MissingPushType`, not `LiveActivity` → 400 `InvalidPushType`; the app already has
///     `maxChannelsPerApp` channels in this environment → 400 `CannotCreateChannelConfig`.
///  9. otherwise 201 (create), 200 (read, list), 204 (delete).
///
/// Creates and deletes change the shared table at once; the worker makes them durable before any answer
/// leaves (`BroadcastChannels.persist`, one save per batch), and resets its connections if that fails.
///
/// Authentication comes after the request's shape (as on the push port, apns-spec.md §10) and before any
/// channel is looked up, so an unauthenticated caller learns nothing about channels. The body is read last
/// among the create rules because APNs documents its reasons only per attribute.
struct ManagementRequestValidator {
    let configuration: SimulatorConfiguration
    let channels: BroadcastChannels
    private let apps: SimulatedAppTable

    init(configuration: SimulatorConfiguration, channels: BroadcastChannels) {
        self.configuration = configuration
        self.channels = channels
        apps = SimulatedAppTable(configuration)
    }

    private enum Operation { case create, read, delete, list }

    func decide(_ head: borrowing RequestHead, auth: ConnectionAuthState, now: SimulatorInstant) -> ManagementDecision {
        // 1. apns-request-id
        if let reason = checkRequestID(head.lookup(.apnsRequestID)) { return .reject(reason) }
        // 2. path
        guard let path = head.value(.path), let (route, pathBundle) = ManagementRoute.classify(path: path) else {
            return .reject(.badPath)
        }
        // 3. method
        guard let method = head.value(.method) else { return .reject(.methodNotAllowed) }
        let operation: Operation
        if method.equals("GET") {
            operation = route == .channels ? .read : .list
        } else if method.equals("POST") {
            guard route == .channels else { return .reject(.badPath) }
            operation = .create
        } else if method.equals("DELETE") {
            guard route == .channels else { return .reject(.badPath) }
            operation = .delete
        } else {
            return .reject(.methodNotAllowed)
        }
        // 4. bundle
        guard let (app, kind) = apps.match(topic: pathBundle) else { return .reject(.topicMismatch) }
        guard kind == .bundle else { return .reject(.topicDisallowed) }
        let bundleID = apps.bundleIDs[app]
        // 5. duplicates
        if head.hasDuplicateHeaders { return .reject(.duplicateHeaders) }
        // 6. provider token
        if let reason = auth.check(authorization: head.lookup(.authorization), app: app, now: now) {
            return .reject(reason)
        }

        switch operation {
        case .list:
            return list(bundleID)
        case .read, .delete:
            // 7. channel id
            let id: BroadcastChannelID
            switch head.lookup(.apnsChannelID) {
            case .absent: return .reject(.missingChannelId)
            case .oversized: return .reject(.badChannelId)
            case .present(let value):
                guard let parsed = try? BroadcastChannelID(bytes: value) else { return .reject(.badChannelId) }
                id = parsed
            }
            return operation == .read ? read(id, bundleID) : delete(id, bundleID)
        case .create:
            return create(head, bundleID)
        }
    }

    private func checkRequestID(_ value: HeaderValue) -> APNsReason? {
        switch value {
        case .absent: return nil
        case .oversized: return .badMessageId
        case .present(let value):
            let valid = HeaderSyntax.isCanonicalUUID(value, requireLowercase: configuration.requireLowercaseMessageID)
            return valid ? nil : .badMessageId
        }
    }

    /// The app's channel ids, as `{"channels": [...]}` (counted first, then written into a body of that size).
    private func list(_ bundleID: String) -> ManagementDecision {
        var writer = JSONWriter.counting()
        let ids = channels.list(bundleID: bundleID)
        Self.writeList(ids, into: &writer)
        var body = [UInt8](repeating: 0, count: writer.count)
        body.withUnsafeMutableBytes { buffer in
            var exact = JSONWriter(buffer: buffer)
            Self.writeList(ids, into: &exact)
        }
        return ManagementDecision(status: 200, reason: nil, channelID: nil, body: body)
    }

    private func read(_ id: BroadcastChannelID, _ bundleID: String) -> ManagementDecision {
        guard let channel = channels.channel(id, bundleID: bundleID) else {
            return .reject(.channelNotRegistered)
        }
        var body = [UInt8](repeating: 0, count: 64)
        let count = body.withUnsafeMutableBytes { buffer in
            var writer = JSONWriter(buffer: buffer)
            writer.beginObject()
            writer.key("message-storage-policy")
            writer.int(channel.storagePolicy)
            writer.key("push-type")
            writer.string("LiveActivity")
            writer.endObject()
            assert(!writer.overflowed)
            return writer.count
        }
        return ManagementDecision(status: 200, reason: nil, channelID: nil, body: Array(body[0..<count]))
    }

    private func delete(_ id: BroadcastChannelID, _ bundleID: String) -> ManagementDecision {
        guard channels.delete(id, bundleID: bundleID) else { return .reject(.channelNotRegistered) }
        return ManagementDecision(status: 204, reason: nil, channelID: nil, body: [])
    }

    /// 8. the body, then the app's room for one more channel.
    private func create(_ head: borrowing RequestHead, _ bundleID: String) -> ManagementDecision {
        guard head.bodyByteCount > 0 else { return .reject(.payloadEmpty) }
        guard head.isBodyFullyStored else { return .reject(.badRequestParams) }
        let request: ChannelCreateRequest
        switch ChannelCreateRequest.parse(head.body) {
        case .request(let parsed): request = parsed
        case .rejected(let reason): return .reject(reason)
        }
        do {
            let channel = try channels.create(bundleID: bundleID, storagePolicy: request.storagePolicy)
            return ManagementDecision(status: 201, reason: nil, channelID: channel.id, body: [])
        } catch {
            return .reject(.cannotCreateChannelConfig)
        }
    }

    private static func writeList(_ ids: [BroadcastChannelID], into writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("channels")
        writer.beginArray()
        for id in ids { id.withUnsafeBytes { writer.string(utf8: $0) } }
        writer.endArray()
        writer.endObject()
    }
}

/// The body of a create request: `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}`.
struct ChannelCreateRequest: Equatable {
    var storagePolicy: Int

    /// The request, or the §7.5 reason for what is wrong with it (see `ManagementRequestValidator`, rule 8).
    enum Parsed: Equatable {
        case request(ChannelCreateRequest)
        case rejected(APNsReason)
    }

    static func parse(_ body: UnsafeRawBufferPointer) -> Parsed {
        var policy: Int?
        var policyValid = true
        var pushType: Range<Int>?
        var unknownAttribute = false
        var repeated = false
        let isObject = SimulatorJSON.forEachTopLevelMember(body) { key, value in
            if key.equals("message-storage-policy") {
                if policy != nil || !policyValid { repeated = true }
                let text = body.slice(from: value.lowerBound, count: value.count)
                if text.equals("0") {
                    policy = 0
                } else if text.equals("1") {
                    policy = 1
                } else {
                    policyValid = false
                }
            } else if key.equals("push-type") {
                if pushType != nil { repeated = true }
                pushType = value
            } else {
                unknownAttribute = true
            }
        }
        guard let isObject else { return .rejected(.badRequestPayload) }
        guard isObject, !unknownAttribute, !repeated, policyValid, let policy else {
            return .rejected(.badRequestParams)
        }
        guard let pushType else { return .rejected(.missingPushType) }
        guard body.slice(from: pushType.lowerBound, count: pushType.count).equals("\"LiveActivity\"") else {
            return .rejected(.invalidPushType)
        }
        return .request(ChannelCreateRequest(storagePolicy: policy))
    }
}

import FanfareFanout
import FanfareStorage
import Hummingbird
internal import OpenAPIRuntime

/// The one map from errors to problems: every error a request can end in, ours (the engine's, the registry's),
/// the generated code's (decoding, content types, parameters) and the framework's. Nothing becomes an empty or
/// HTML answer. `ProblemMiddleware` renders what escapes a handler; handlers map the engine's errors where they
/// catch them (their retry hint is the service's `--retry-after`). A failure of the service itself keeps its
/// error's text in `cause`, for the log: the answer says what failed in general words (review L5).
package enum ErrorMapping {
    package static func problem(for error: any Error) -> ServiceProblem {
        switch error {
        case let problem as ServiceProblem:
            return problem
        case let error as ServerError:
            return fromServerError(error)
        case let error as DecodingError:
            return fromDecoding(error)
        case let error as HTTPError:
            return fromHTTPError(error)
        case let error as RegistryError:
            return fromRegistry(error)
        default:
            return .failure("the request failed inside the service", cause: String(describing: error))
        }
    }

    private static func fromServerError(_ error: ServerError) -> ServiceProblem {
        switch error.underlyingError {
        case let problem as ServiceProblem: return problem
        case let decoding as DecodingError:
            var problem = fromDecoding(decoding)
            // Only GET routes have parameters that can fail to decode (a POST's or PUT's path and headers are
            // strings, checked by the handlers and the middlewares): a GET's error is about a parameter, a
            // POST's or PUT's about its body (e.g. `null` or an array where an object belongs).
            let hasBody = error.request.method == .post || error.request.method == .put
            if !hasBody, problem.code == .invalidRequest, problem.field == nil {
                problem.code = .invalidParameter
                problem.detail =
                    "a path or query parameter does not match the document (GET /openapi.yaml): \(problem.detail)"
            } else if hasBody, problem.field == nil, problem.code == .invalidRequest {
                problem.detail = "the body must be a JSON object as the API's schema describes: \(problem.detail)"
            }
            return problem
        case let registry as RegistryError: return fromRegistry(registry)
        case let http as HTTPError: return fromHTTPError(http)
        default: break
        }
        let cause = "\(error.causeDescription): \(String(describing: error.underlyingError).prefix(300))"
        switch error.httpStatus.code {
        case 415:
            return ServiceProblem(
                .unsupportedMediaType, .unsupportedMediaType,
                "the body must be application/json (\(String(describing: error.underlyingError).prefix(200)))")
        case 406: return ServiceProblem(.notAcceptable, .notAcceptable, cause)
        case 400..<500: return .badRequest(.invalidParameter, cause)
        default: return .failure("the request failed inside the service", cause: cause)
        }
    }

    /// JSON that does not parse, or does not match the schema (with the field's path and the batch index).
    package static func fromDecoding(_ error: DecodingError) -> ServiceProblem {
        let (path, description): ([any CodingKey], String) =
            switch error {
            case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
                (context.codingPath, context.debugDescription)
            case .keyNotFound(let key, let context):
                (context.codingPath + [key], "\(key.stringValue) is required")
            @unknown default:
                ([], "\(error)")
            }
        if path.isEmpty, case .dataCorrupted(let context) = error,
            context.underlyingError != nil || description.contains("JSON")
        {
            return .badRequest(.malformedJson, "the body is not valid JSON: \(description.prefix(200))")
        }
        let field = fieldPath(path)
        var index: Int?
        if path.count >= 2, path[0].stringValue == "tokens" { index = path[1].intValue }
        let detail = field.isEmpty ? description : "\(field): \(description)"
        return .badRequest(
            .invalidRequest, String(detail.prefix(400)), index: index, field: field.isEmpty ? nil : field)
    }

    /// `tokens[3].channels`.
    package static func fieldPath(_ path: [any CodingKey]) -> String {
        var text = ""
        for key in path {
            if let index = key.intValue {
                text += "[\(index)]"
            } else {
                if !text.isEmpty { text += "." }
                text += key.stringValue
            }
        }
        return text
    }

    private static func fromHTTPError(_ error: HTTPError) -> ServiceProblem {
        let detail = error.body ?? error.status.reasonPhrase
        switch error.status.code {
        case 413: return ServiceProblem(.contentTooLarge, .bodyTooLarge, detail)
        case 404: return ServiceProblem(.notFound, .notFound, detail)
        case 405: return ServiceProblem(.methodNotAllowed, .methodNotAllowed, detail)
        case 415: return ServiceProblem(.unsupportedMediaType, .unsupportedMediaType, detail)
        case 400..<500: return .badRequest(.invalidRequest, detail)
        default: return .failure("the request failed inside the service", cause: detail)
        }
    }

    /// `Retry-After` when the database is out of reach: a restart or fail-over takes seconds.
    package static let databaseRetryAfterSeconds = 5

    package static func fromRegistry(_ error: RegistryError) -> ServiceProblem {
        switch error {
        case .invalidRegistration(let index, let reason):
            return .badRequest(.invalidRegistration, "tokens[\(index)]: \(reason)", index: index)
        case .storage(let message):
            return .failure("the registry could not be read or written; nothing was changed", cause: message)
        case .unavailable(let message):
            // The database is away (restarting, failing over, cut off): a state the caller can wait out.
            return .failure(
                .serviceUnavailable, .databaseUnavailable,
                "the database cannot be reached now; nothing was changed: try again after Retry-After",
                cause: message, retryAfter: databaseRetryAfterSeconds)
        case .unknownWave, .invalidWave:
            // The engine's own bookkeeping of durable waves, never what a request sent.
            return .failure("the registry refused a wave", cause: error.description)
        }
    }

    /// The engine's errors: a refusal it may lift (503 with `retryAfter`), a request it cannot take (4xx), or a
    /// fault of the service (500); the channel management API's answers (502, 504).
    package static func fromFanout(_ error: FanoutError, retryAfter: Int) -> ServiceProblem {
        switch error {
        case .registry(let registry): return fromRegistry(registry)
        case .wrongApp(let index, _, _):
            return .badRequest(.invalidRegistration, "tokens[\(index)] is for another app", index: index)
        case .shutDown:
            return .unavailable(.shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        case .tooManyChannels(let limit):
            return .unavailable(
                .tooManyChannels,
                "the engine tracks \(limit) channels in use; channels nothing follows are forgotten at the next "
                    + "maintenance pass",
                retryAfter: 60)
        case .client(let message), .invalidConfiguration(_, let message):
            return .failure("the engine failed", cause: message)
        case .environmentMismatch, .topicMismatch:
            return .failure("the engine refused its own configuration", cause: "\(error)")
        case .invalidBroadcastLink(let message):
            return .badRequest(.invalidRequest, message)
        case .noChannelManagement:
            return ServiceProblem(
                .conflict, .channelManagementNotConfigured,
                "the service cannot create or delete APNs broadcast channels: start it with --channel-management "
                    + "HOST:PORT (APNs' management host and port are the default with real APNs), or link a channel "
                    + "you created with {\"channel_id\": ...}")
        case .broadcast(let management):
            let detail = "APNs' channel management API: \(management)"
            switch management.kind {
            case .timedOut: return ServiceProblem(.gatewayTimeout, .apnsNoAnswer, detail)
            case .rejected, .badAnswer: return ServiceProblem(.badGateway, .apnsChannelRefused, detail)
            case .transport, .shutDown: return ServiceProblem(.badGateway, .apnsChannelUnreachable, detail)
            }
        }
    }

    /// Why the engine refused an update or a push: the request's fault (400, 409), or back pressure and shutdown
    /// (503 with `retryAfter`).
    package static func fromPublish(_ error: PublishError, retryAfter: Int) -> ServiceProblem {
        switch error {
        case .emptyChannel, .channelNameTooLong:
            return .badRequest(.invalidChannel, "\(error)", field: "channel")
        case .invalidPayload(.tooLarge(let bytes, let limit)):
            var problem = ServiceProblem.badRequest(
                .payloadTooLarge,
                "the APNs payload would be \(bytes) bytes, over APNs' \(limit)-byte limit; shrink content_state, "
                    + "attributes or the alert")
            problem.size = bytes
            problem.limit = limit
            return problem
        case .invalidPayload(.invalid(let message)):
            return .badRequest(.invalidPayload, message)
        case .olderThanCurrent:
            return ServiceProblem(.conflict, .olderThanCurrent, "\(error); send a newer timestamp")
        case .alreadyExpired(let freshUntil, let now):
            return .badRequest(
                .alreadyExpired, "fresh_until \(freshUntil) is in the past (now \(now))", field: "fresh_until")
        case .freshUntilTooFar(let freshUntil, let now, let limit):
            return .badRequest(
                .freshUntilTooFar,
                "fresh_until \(freshUntil) is more than \(limit / 86_400) days after now (\(now)), longer than APNs "
                    + "keeps a push: it must be UNIX seconds (not milliseconds)", field: "fresh_until")
        case .tooManyUnfinishedWaves, .backPressure:
            return .unavailable(.backPressure, "\(error)", retryAfter: retryAfter)
        case .invalidCollapseID:
            return .badRequest(.invalidRequest, "\(error)", field: "collapse_id")
        case .tooManyChannels:
            return .unavailable(.tooManyChannels, "\(error)", retryAfter: 60)
        case .shutDown:
            return .unavailable(.shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        case .storage:
            // The wave could not be made durable (a full or failing disk): nothing was sent; retry later.
            return .failure(
                .serviceUnavailable, .notReady, "the wave could not be recorded, so it was not published; try again",
                cause: "\(error)", retryAfter: retryAfter)
        case .shardElsewhere:
            return .unavailable(.shardElsewhere, "\(error)", retryAfter: 1)
        case .sharedStore:
            // The service publishes with publishShared when its engine leases shards: this is a wiring bug.
            return .failure("the engine refused the publish", cause: "\(error)")
        }
    }
}

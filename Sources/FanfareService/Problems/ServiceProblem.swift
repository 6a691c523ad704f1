package import Foundation
import FanfareCore
import HTTPTypes
import Hummingbird
import NIOCore

/// An error answer: an RFC 9457 problem document (`Components.Schemas.Problem`) with a stable code. Thrown by
/// handlers and middlewares; `ProblemMiddleware` renders it (and every other error, mapped by `ErrorMapping`).
package struct ServiceProblem: Error, Sendable {
    package typealias Code = Components.Schemas.ProblemCode

    package var status: HTTPResponse.Status
    package var code: Code
    package var detail: String
    package var index: Int?
    package var field: String?
    package var size: Int?
    package var limit: Int?
    package var retryAfter: Int?
    package var allowed: [String]?
    /// Extra response header fields (Allow, WWW-Authenticate).
    package var headers: HTTPFields = [:]
    /// What failed inside (a database's message, an error's reflection): logged with `requestID` by
    /// `ProblemMiddleware`, never sent, since it names tables, queries and files (review L5).
    package var cause: String?
    /// Set on the answer of a failure whose cause was logged: the id of that log line.
    package var requestID: String?

    package init(
        _ status: HTTPResponse.Status, _ code: Code, _ detail: String, index: Int? = nil, field: String? = nil,
        size: Int? = nil, limit: Int? = nil
    ) {
        self.status = status
        self.code = code
        self.detail = detail
        self.index = index
        self.field = field
        self.size = size
        self.limit = limit
    }

    /// 400 with a code.
    package static func badRequest(
        _ code: Code, _ detail: String, index: Int? = nil, field: String? = nil
    ) -> ServiceProblem {
        ServiceProblem(.badRequest, code, detail, index: index, field: field)
    }

    /// A failure of the service (5xx): `detail` says what failed in general words, `cause` is for the log only.
    package static func failure(
        _ status: HTTPResponse.Status, _ code: Code, _ detail: String, cause: String, retryAfter: Int? = nil
    ) -> ServiceProblem {
        var problem = ServiceProblem(status, code, detail)
        problem.cause = cause
        problem.retryAfter = retryAfter
        return problem
    }

    /// 500 `internal`, its cause for the log only.
    package static func failure(_ detail: String, cause: String) -> ServiceProblem {
        failure(.internalServerError, ._internal, detail, cause: cause)
    }

    /// 503 with `Retry-After`.
    package static func unavailable(_ code: Code, _ detail: String, retryAfter: Int) -> ServiceProblem {
        var problem = ServiceProblem(.serviceUnavailable, code, detail)
        problem.retryAfter = retryAfter
        return problem
    }

    package static let mediaType = "application/problem+json"

    /// The document, as the OpenAPI schema describes it.
    package func document(instance: String?) -> Components.Schemas.Problem {
        Components.Schemas.Problem(
            _type: "urn:fanfare:problem:\(code.rawValue)", title: Self.title(code), status: status.code, detail: detail,
            instance: instance, code: code, index: index, field: field, size: size, limit: limit,
            retryAfter: retryAfter, allowed: allowed, requestId: requestID)
    }

    /// The response header fields: content type, Retry-After, and the extra ones.
    package var responseHeaders: HTTPFields {
        var fields = headers
        fields[.contentType] = Self.mediaType
        if let retryAfter { fields[.retryAfter] = "\(retryAfter)" }
        return fields
    }

    /// The answer: status, header fields and the document, about `instance` (the request's path).
    package func response(instance: String) -> Response {
        Response(
            status: status, headers: responseHeaders,
            body: .init(byteBuffer: ByteBuffer(bytes: body(instance: Self.printable(instance)))))
    }

    /// Request text in messages: bounded, control characters escaped.
    package static func printable(_ text: String) -> String {
        PrintableText.escaping(text, limit: 200)
    }

    /// The JSON body.
    package func body(instance: String?) -> [UInt8] {
        // Encoding our own value type cannot fail; an empty object would still be valid JSON.
        (try? Self.encoder.encode(document(instance: instance))).map { [UInt8]($0) } ?? Array("{}".utf8)
    }

    package static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    static func title(_ code: Code) -> String {
        switch code {
        case .malformedJson: "The body is not valid JSON"
        case .invalidRequest: "The request does not match the API's schema"
        case .invalidToken: "Not a valid token"
        case .invalidRegistration: "A registration breaks a rule"
        case .batchTooLarge: "Too many items in one request"
        case .invalidChannel: "Not a valid channel name"
        case .invalidPayload: "The update breaks a Live Activity rule"
        case .payloadTooLarge: "The APNs payload is too large"
        case .invalidParameter: "A parameter is not valid"
        case .alreadyExpired: "fresh_until is in the past"
        case .freshUntilTooFar: "fresh_until is too far ahead"
        case .olderThanCurrent: "A newer update of this channel was published"
        case .bodyTooLarge: "The request body is too large"
        case .unsupportedMediaType: "The body must be application/json"
        case .misdirectedRequest: "The Host is not a loopback name or address"
        case .notAcceptable: "No acceptable response content type"
        case .unauthorized: "An API key is needed"
        case .forbidden: "The API key lacks the scope for this route"
        case .notFound: "Not found"
        case .methodNotAllowed: "Method not allowed"
        case .idempotencyKeyInProgress: "A request with this Idempotency-Key is still being answered"
        case .idempotencyKeyReused: "This Idempotency-Key was used for a different request"
        case .tooManyChannels: "Too many channels in use"
        case .backPressure: "The engine is busy"
        case .shuttingDown: "The service is shutting down"
        case .notReady: "The service is not ready"
        case .databaseUnavailable: "The database cannot be reached now"
        case .shardElsewhere: "Another node serves this token"
        case .apnsNoAnswer: "APNs did not answer"
        case .invalidChannelId: "Not an APNs broadcast channel id"
        case .channelManagementNotConfigured: "No APNs channel management configured"
        case .apnsChannelRefused: "APNs refused the channel management call"
        case .apnsChannelUnreachable: "APNs' channel management API could not be reached"
        case .environmentNotServed: "The app does not send in this environment"
        case .appsFileInvalid: "The apps file cannot be used"
        case .noAppsFile: "The service was started without an apps file"
        case ._internal: "Internal error"
        }
    }
}

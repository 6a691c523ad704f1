import FanfareCore
import FanfareRegistry
internal import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Every request passes here first: the route, its API key and scope, what it accepts, shutdown, the body's
/// size and media type, and its Idempotency-Key are settled before any handler runs; every error (ours, the
/// generated code's and the framework's) leaves as problem+json; every answer is counted.
package struct FrontDoor: RouterMiddleware {
    package typealias Context = ServiceRequestContext

    let keyring: APIKeyring?
    let maxBodyBytes: Int
    let retryAfter: Int
    let lifecycle: ServiceLifecycleState
    let idempotency: IdempotencyGate
    let blocking: BlockingWork
    let metrics: ServiceMetrics
    let logger: Logger

    package func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let started = ContinuousClock.now
        let path = request.uri.path
        let match = APIRoutes.match(method: request.method, path: Substring(path))
        var response: Response
        do {
            response = try await admit(request, match: match, context: context, next: next)
        } catch {
            let problem = ErrorMapping.problem(for: error)
            if problem.status.code >= 500 && problem.code == ._internal {
                logger.error("request failed", metadata: ["route": "\(Self.label(match))", "error": "\(problem.detail)"])
            }
            response = Self.response(problem, instance: path)
        }
        // The generated code percent-encodes header values (OpenAPI's "simple" style): a path is sent as is.
        if let location = response.headers[.location], location.contains("%"), let path = location.removingPercentEncoding {
            response.headers[.location] = path
        }
        if lifecycle.isDraining { response.headers[.connection] = "close" }
        metrics.requestServed(
            route: Self.label(match), method: request.method.rawValue, status: response.status.code,
            duration: ContinuousClock.now - started)
        return response
    }

    static func label(_ match: APIRoutes.Match) -> String {
        if case .route(let route) = match { return route.template }
        return "unmatched"
    }

    private func admit(
        _ request: Request, match: APIRoutes.Match, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let route: APIRoute
        switch match {
        case .notFound:
            throw ServiceProblem(.notFound, .notFound, "no route \(request.method.rawValue) \(Self.printable(request.uri.path)); see GET /openapi.yaml")
        case .methodNotAllowed(let allowed):
            let names = allowed.map(\.rawValue)
            var problem = ServiceProblem(
                .methodNotAllowed, .methodNotAllowed,
                "\(Self.printable(request.uri.path)) answers \(names.joined(separator: ", ")), not \(request.method.rawValue)")
            problem.allowed = names
            problem.headers[.allow] = names.joined(separator: ", ")
            throw problem
        case .route(let matched):
            route = matched
        }
        let principal = try authenticate(request, route: route)
        try checkAccept(request, route: route)
        guard route.isWrite else {
            var response = try await next(request, context)
            if route.template == "/v1/waves/{wave_id}/events" {
                response.headers[.cacheControl] = "no-store"
            }
            if route.template == "/metrics" {
                response.headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            }
            return response
        }
        if lifecycle.isDraining {
            throw ServiceProblem.unavailable(.shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        }
        try checkContentType(request)
        var request = request
        let body = try await collectBody(&request)
        guard let key = request.headers[.idempotencyKey] else {
            return try await next(request, context)
        }
        guard IdempotencyGate.isValidKey(key) else {
            throw ServiceProblem.badRequest(
                .invalidParameter, "Idempotency-Key must be 1 to 255 visible ASCII characters", field: "Idempotency-Key")
        }
        return try await idempotent(request, key: key, body: body, principal: principal, context: context, next: next)
    }

    // MARK: - Authentication

    private func authenticate(_ request: Request, route: APIRoute) throws(ServiceProblem) -> Principal {
        guard let keyring else { return .anonymous }
        guard let scope = route.scope else { return .anonymous }
        guard let header = request.headers[.authorization] else {
            throw Self.unauthorized("this route needs an API key: send Authorization: Bearer <key>")
        }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw Self.unauthorized("the Authorization header must be Bearer <key>")
        }
        guard let principal = keyring.principal(presenting: parts[1].trimmingCharacters(in: .whitespaces).utf8) else {
            throw Self.unauthorized("the API key is not known")
        }
        guard principal.allows(scope) else {
            throw ServiceProblem(
                .forbidden, .forbidden, "this key lacks the '\(scope.rawValue)' scope that \(route.method.rawValue) \(route.template) needs")
        }
        return principal
    }

    private static func unauthorized(_ detail: String) -> ServiceProblem {
        var problem = ServiceProblem(.unauthorized, .unauthorized, detail)
        problem.headers[.wwwAuthenticate] = #"Bearer realm="fanfare""#
        return problem
    }

    // MARK: - Content negotiation

    /// What each route answers with, for the Accept check (done before the handler runs, so a request that
    /// would be refused at the end never writes anything).
    static func responseType(_ route: APIRoute) -> (type: String, subtype: String) {
        switch route.template {
        case "/v1/waves/{wave_id}/events": ("text", "event-stream")
        case "/metrics": ("text", "plain")
        case "/openapi.yaml": ("application", "yaml")
        case "/": ("text", "html")
        default: ("application", "json")
        }
    }

    private func checkAccept(_ request: Request, route: APIRoute) throws(ServiceProblem) {
        guard let accept = request.headers[.accept] else { return }
        let (type, subtype) = Self.responseType(route)
        for item in accept.split(separator: ",") {
            let parameters = item.split(separator: ";")
            guard let range = parameters.first?.trimmingCharacters(in: .whitespaces).lowercased() else { continue }
            var quality = 1.0
            for parameter in parameters.dropFirst() {
                let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                if pair.count == 2, pair[0].lowercased() == "q", let value = Double(pair[1]) { quality = value }
            }
            guard quality > 0 else { continue }
            if range == "*/*" || range == "\(type)/*" || range == "\(type)/\(subtype)" { return }
            // Problem documents are JSON: a client that takes problem+json takes our errors, not the answer.
        }
        throw ServiceProblem(.notAcceptable, .notAcceptable, "this route answers \(type)/\(subtype); the Accept header excludes it")
    }

    private func checkContentType(_ request: Request) throws(ServiceProblem) {
        guard let contentType = request.headers[.contentType] else { return }
        let base = contentType.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        guard base == "application/json" else {
            throw ServiceProblem(
                .unsupportedMediaType, .unsupportedMediaType,
                "the body must be application/json, not \(Self.printable(String(contentType.prefix(100))))")
        }
    }

    // MARK: - Body

    /// Collects the body (at most `maxBodyBytes`) and puts it back on the request for the handler.
    private func collectBody(_ request: inout Request) async throws -> ByteBuffer {
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > maxBodyBytes {
            throw tooLarge(size: length)
        }
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: maxBodyBytes)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw tooLarge(size: nil)
        } catch is NIOTooManyBytesError {
            throw tooLarge(size: nil)
        }
        request.body = .init(buffer: buffer)
        return buffer
    }

    private func tooLarge(size: Int?) -> ServiceProblem {
        var problem = ServiceProblem(
            .contentTooLarge, .bodyTooLarge,
            "the body is \(size.map { "\($0) bytes" } ?? "larger than the limit"); at most \(maxBodyBytes) bytes (--max-body)")
        problem.size = size
        problem.limit = maxBodyBytes
        return problem
    }

    // MARK: - Idempotency

    private func idempotent(
        _ request: Request, key: String, body: ByteBuffer, principal: Principal, context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let fingerprint = IdempotencyGate.fingerprint(
            method: request.method.rawValue, path: request.uri.description, body: body.readableBytesView)
        let gate = idempotency
        let decision: IdempotencyGate.Decision
        do {
            decision = try await blocking.run { try gate.begin(scope: principal.id, key: key, fingerprint: fingerprint) }
        } catch let error as RegistryError {
            throw ErrorMapping.fromRegistry(error)
        }
        switch decision {
        case .inProgress:
            throw ServiceProblem(
                .conflict, .idempotencyKeyInProgress,
                "a request with this Idempotency-Key is still being answered; retry once it is done")
        case .reused:
            throw ServiceProblem(
                .unprocessableContent, .idempotencyKeyReused,
                "this Idempotency-Key was used within 24 hours for a different request; use a new key for a new request")
        case .replay(let stored):
            var headers = HTTPFields()
            for header in stored.headers {
                if let name = HTTPField.Name(header.name) { headers.append(HTTPField(name: name, value: header.value)) }
            }
            headers[.idempotencyReplayed] = "true"
            return Response(
                status: .init(code: stored.status), headers: headers,
                body: .init(byteBuffer: ByteBuffer(bytes: stored.body)))
        case .proceed(let claim):
            var response: Response
            do {
                response = try await next(request, context)
            } catch {
                response = Self.response(ErrorMapping.problem(for: error), instance: request.uri.path)
            }
            // Small JSON answers: collected so they can be stored and sent again.
            let collector = BodyCollector()
            do {
                try await response.body.write(collector)
            } catch {
                gate.abandon(claim)
                throw error
            }
            let bytes = collector.bytes
            response.body = .init(byteBuffer: ByteBuffer(bytes: bytes))
            let kept: [StoredResponse.Header] = response.headers.compactMap { field in
                guard [.contentType, .location, .retryAfter, .allow, .wwwAuthenticate].contains(field.name) else { return nil }
                return StoredResponse.Header(name: field.name.canonicalName, value: field.value)
            }
            let status = response.status.code
            do {
                try await blocking.run { try gate.finish(claim, status: status, headers: kept, body: bytes) }
            } catch {
                // The operation happened; only its replay could not be stored. Answer it, and say so in the log.
                gate.abandon(claim)
                logger.error("could not store the answer of an Idempotency-Key", metadata: ["error": "\(error)"])
            }
            return response
        }
    }

    // MARK: - Problems

    static func response(_ problem: ServiceProblem, instance: String) -> Response {
        Response(
            status: problem.status, headers: problem.responseHeaders,
            body: .init(byteBuffer: ByteBuffer(bytes: problem.body(instance: printable(instance)))))
    }

    /// Request text in messages: bounded, control characters escaped.
    static func printable(_ text: String) -> String {
        PrintableText.escaping(text, limit: 200)
    }
}

/// Collects a response body written through `ResponseBodyWriter`.
final class BodyCollector: ResponseBodyWriter, @unchecked Sendable {
    var bytes: [UInt8] = []
    func write(_ buffer: ByteBuffer) async throws { bytes.append(contentsOf: buffer.readableBytesView) }
    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}

extension HTTPField.Name {
    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!
    static let idempotencyReplayed = HTTPField.Name("Idempotency-Replayed")!
}

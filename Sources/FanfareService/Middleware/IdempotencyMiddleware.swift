import FanfareStorage
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// On write routes: `Idempotency-Key` (`IdempotencyGate`). A retry of the same request gets the stored answer
/// (`Idempotency-Replayed: true`), a reuse of the key for another request 422, a retry racing the first 409.
/// A request without the header goes on as it is. After `BodyLimitMiddleware`: the fingerprint covers the body.
struct IdempotencyMiddleware: RouterMiddleware {
    let gate: IdempotencyGate
    let blocking: BlockingWork
    let logger: Logger

    /// The header fields a replay sends again; the rest are the framework's (Date, Content-Length).
    static let replayedFields: [HTTPField.Name] = [
        .contentType, .location, .retryAfter, .allow, .wwwAuthenticate,
    ]

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        guard let key = request.headers[.idempotencyKey] else { return try await next(request, context) }
        guard IdempotencyGate.isValidKey(key) else {
            throw ServiceProblem.badRequest(
                .invalidParameter, "Idempotency-Key must be 1 to 255 visible ASCII characters",
                field: "Idempotency-Key")
        }
        // Already one buffer (`BodyLimitMiddleware`): this reads it again, it does not wait for the network.
        var request = request
        let body = try await request.collectBody(upTo: .max)
        let fingerprint = IdempotencyGate.fingerprint(
            method: request.method.rawValue, path: request.uri.description, body: body.readableBytesView)
        let gate = self.gate
        // Keys are per API key and per app: the same key on two apps' routes names two requests.
        let path = request.uri.path
        let scope =
            path.hasPrefix("/v1/apps/") && path.split(separator: "/").count > 3
            ? context.principal.id + "@" + FastPathTransport.appSegment(of: path) : context.principal.id
        let decision: IdempotencyGate.Decision
        do {
            decision = try await blocking.run { try gate.begin(scope: scope, key: key, fingerprint: fingerprint) }
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
                "this Idempotency-Key was used within 24 hours for a different request; use a new key for a new "
                    + "request")
        case .replay(let stored):
            return Self.replay(stored)
        case .proceed(let claim):
            return try await proceed(request, claim: claim, context: context, next: next)
        }
    }

    private static func replay(_ stored: StoredResponse) -> Response {
        var headers = HTTPFields()
        for header in stored.headers {
            if let name = HTTPField.Name(header.name) { headers.append(HTTPField(name: name, value: header.value)) }
        }
        headers[.idempotencyReplayed] = "true"
        let body = ResponseBody(byteBuffer: ByteBuffer(bytes: stored.body))
        return Response(status: .init(code: stored.status), headers: headers, body: body)
    }

    /// Runs the request and stores its answer, 4xx problems included (a retry would meet the same problem); a 5xx
    /// is not kept (`IdempotencyGate.finish`), so a retry runs again.
    private func proceed(
        _ request: Request, claim: IdempotencyGate.Claim, context: ServiceRequestContext, next: NextResponder
    ) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            let problem = ErrorMapping.problem(for: error)
            if problem.status.code >= 500 {
                // Not kept (a retry runs again): `ProblemMiddleware` answers it, and logs a failure's cause.
                let gate = self.gate
                try? await blocking.run { gate.abandon(claim) }
                throw problem
            }
            response = problem.response(instance: request.uri.path)
        }
        // Small JSON answers: collected so they can be stored and sent again.
        let collector = BodyCollector()
        do {
            try await response.body.write(collector)
        } catch {
            let gate = self.gate
            try? await blocking.run { gate.abandon(claim) }
            throw error
        }
        let bytes = collector.bytes
        response.body = .init(byteBuffer: ByteBuffer(bytes: bytes))
        let kept: [StoredResponse.Header] = response.headers.compactMap { field in
            guard Self.replayedFields.contains(field.name) else { return nil }
            return StoredResponse.Header(name: field.name.canonicalName, value: field.value)
        }
        let status = response.status.code
        let gate = self.gate
        do {
            try await blocking.run { try gate.finish(claim, status: status, headers: kept, body: bytes) }
        } catch {
            // The operation happened; only its replay could not be stored. Answer it, and say so in the log.
            try? await blocking.run { gate.abandon(claim) }
            logger.error("could not store the answer of an Idempotency-Key", metadata: ["error": "\(error)"])
        }
        return response
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

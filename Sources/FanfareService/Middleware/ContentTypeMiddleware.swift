internal import Foundation
import Hummingbird

/// On write routes: 415 unless the body is `application/json` (parameters such as charset aside), also when
/// Content-Type is missing: a web page can send a body without one in a "simple" request, which the browser
/// does not ask the service about first (review M2). A route without a body (DELETE) needs no Content-Type
/// while it is sent none.
struct ContentTypeMiddleware: RouterMiddleware {
    let takesBody: Bool

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        guard takesBody || Self.carriesBody(request.headers) else { return try await next(request, context) }
        guard let contentType = request.headers[.contentType] else {
            throw ServiceProblem(
                .unsupportedMediaType, .unsupportedMediaType,
                "the body must be application/json: send Content-Type: application/json")
        }
        let base = contentType.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        guard base == "application/json" else {
            let given = ServiceProblem.printable(String(contentType.prefix(100)))
            throw ServiceProblem(
                .unsupportedMediaType, .unsupportedMediaType, "the body must be application/json, not \(given)")
        }
        return try await next(request, context)
    }

    /// Whether the request has a body: a Content-Length other than 0, or a transfer coding (chunked).
    static func carriesBody(_ headers: HTTPFields) -> Bool {
        if let length = headers[.contentLength] { return length.trimmingCharacters(in: .whitespaces) != "0" }
        return headers[.transferEncoding] != nil
    }
}

internal import Foundation
import Hummingbird

/// On write routes: 415 unless the body is `application/json` (parameters such as charset aside). A request
/// without Content-Type goes on: the generated code decodes its body as JSON or refuses it.
struct ContentTypeMiddleware: RouterMiddleware {
    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        if let contentType = request.headers[.contentType] {
            let base = contentType.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
            guard base == "application/json" else {
                let given = ServiceProblem.printable(String(contentType.prefix(100)))
                throw ServiceProblem(
                    .unsupportedMediaType, .unsupportedMediaType, "the body must be application/json, not \(given)")
            }
        }
        return try await next(request, context)
    }
}

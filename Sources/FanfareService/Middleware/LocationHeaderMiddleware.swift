internal import Foundation
import Hummingbird

/// Sends `Location` as the path it is. The generated code percent-encodes header values (OpenAPI's "simple"
/// style), so `/v1/waves/7` would leave as written but a path with reserved characters would not. Outside
/// `IdempotencyMiddleware`, so replayed answers (stored as the generated code wrote them) are sent the same way.
struct LocationHeaderMiddleware: RouterMiddleware {
    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        var response = try await next(request, context)
        if let location = response.headers[.location], location.contains("%"),
            let path = location.removingPercentEncoding
        {
            response.headers[.location] = path
        }
        return response
    }
}

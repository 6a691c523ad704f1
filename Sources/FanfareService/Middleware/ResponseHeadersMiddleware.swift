import Hummingbird

/// Header fields a route declares for its answers (`APIRoute.headers`), set over what the generated code wrote.
/// Innermost on the route: problem documents do not get them.
struct ResponseHeadersMiddleware: RouterMiddleware {
    let headers: HTTPFields

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        var response = try await next(request, context)
        for field in headers { response.headers[field.name] = field.value }
        return response
    }
}

import Hummingbird

/// While the service shuts down, every answer (problems included) says `Connection: close`, so clients open
/// their next request elsewhere instead of on a connection about to close.
struct ConnectionCloseMiddleware: RouterMiddleware {
    let lifecycle: ServiceLifecycleState

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        var response = try await next(request, context)
        if lifecycle.isDraining { response.headers[.connection] = "close" }
        return response
    }
}

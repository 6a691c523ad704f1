import Hummingbird

/// On write routes: 503 shutting_down with Retry-After once the service shuts down (reads go on while waves
/// finish). Before the body is read, so a refused write costs nothing.
struct DrainingMiddleware: RouterMiddleware {
    let lifecycle: ServiceLifecycleState
    let retryAfter: Int

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        if lifecycle.isDraining {
            throw ServiceProblem.unavailable(
                .shuttingDown, "the service is shutting down; try again", retryAfter: retryAfter)
        }
        return try await next(request, context)
    }
}

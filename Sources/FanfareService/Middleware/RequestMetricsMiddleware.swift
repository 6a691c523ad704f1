import Hummingbird

/// Counts and times every answer (`fanfare_http_requests_total`, `fanfare_http_request_duration_seconds`) by
/// route template, method and status. Outermost: it sees the final status, problems included.
struct RequestMetricsMiddleware: RouterMiddleware {
    let metrics: ServiceMetrics

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        let started = ContinuousClock.now
        // `ProblemMiddleware` (inside) turns every error into an answer, so this always has a status to count.
        let response = try await next(request, context)
        metrics.requestServed(
            route: context.routeLabel, method: request.method.rawValue, status: response.status.code,
            duration: ContinuousClock.now - started)
        return response
    }
}

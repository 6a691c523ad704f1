import Hummingbird

/// Answers a request no route takes: 404, or 405 with `Allow` when the path exists with other methods (the
/// router itself knows neither the difference nor problem documents).
///
/// The router names the matched route (`endpointPath`) before any of its middleware runs; a request without
/// one is on its way to the router's not-found responder, and is answered here instead.
struct UnmatchedRouteMiddleware: RouterMiddleware {
    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        guard context.endpointPath == nil else { return try await next(request, context) }
        let path = ServiceProblem.printable(request.uri.path)
        switch APIRoutes.match(method: request.method, path: Substring(request.uri.path)) {
        case .methodNotAllowed(let allowed):
            let names = allowed.map(\.rawValue)
            var problem = ServiceProblem(
                .methodNotAllowed, .methodNotAllowed,
                "\(path) answers \(names.joined(separator: ", ")), not \(request.method.rawValue)")
            problem.allowed = names
            problem.headers[.allow] = names.joined(separator: ", ")
            throw problem
        case .notFound, .route:
            // `.route`: the table knows a path the router does not, which the tests rule out (both split the path
            // into non-empty segments, literals before captures); it is still not a route here.
            throw ServiceProblem(
                .notFound, .notFound, "no route \(request.method.rawValue) \(path); see GET /openapi.yaml")
        }
    }
}

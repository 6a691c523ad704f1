import Hummingbird
import Logging

/// Every error a request ends in (ours, the generated code's and the framework's) leaves as problem+json, as
/// `ErrorMapping` maps it. Internal errors are logged with their route.
struct ProblemMiddleware: RouterMiddleware {
    let logger: Logger

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            let problem = ErrorMapping.problem(for: error)
            if problem.status.code >= 500 && problem.code == ._internal {
                logger.error(
                    "request failed", metadata: ["route": "\(context.routeLabel)", "error": "\(problem.detail)"])
            }
            return problem.response(instance: request.uri.path)
        }
    }
}

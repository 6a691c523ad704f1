import Hummingbird
import Logging

/// Every error a request ends in (ours, the generated code's and the framework's) leaves as problem+json, as
/// `ErrorMapping` maps it. A failure of the service is logged with its cause and the request's id; the answer
/// carries the id and not the cause (a database's message names tables, queries and files: review L5).
struct ProblemMiddleware: RouterMiddleware {
    let logger: Logger

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            let problem = Self.logged(ErrorMapping.problem(for: error), context: context, logger: logger)
            return problem.response(instance: request.uri.path)
        }
    }

    /// `problem` with the request's id when it is a failure of the service, whose cause is logged under that id.
    static func logged(_ problem: ServiceProblem, context: ServiceRequestContext, logger: Logger) -> ServiceProblem {
        guard problem.status.code >= 500, problem.cause != nil || problem.code == ._internal else { return problem }
        var problem = problem
        problem.requestID = context.id
        logger.error(
            "request failed",
            metadata: [
                "route": "\(context.routeLabel)", "status": "\(problem.status.code)",
                "code": "\(problem.code.rawValue)",
                "request_id": "\(context.id)", "error": "\(problem.cause ?? problem.detail)",
            ])
        return problem
    }
}

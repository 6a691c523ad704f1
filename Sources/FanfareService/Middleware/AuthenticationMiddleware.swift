internal import Foundation
import Hummingbird

/// `Authorization: Bearer <key>` on a route that needs a scope: 401 without a known key, 403 when the key lacks
/// the scope; the caller becomes `context.principal`. Only on such routes, and only when the service has API keys.
struct AuthenticationMiddleware: RouterMiddleware {
    let keyring: APIKeyring
    let route: APIRoute
    let scope: Scope

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        var context = context
        let principal = try authenticate(request)
        context.principal = principal
        return try await Principal.$current.withValue(principal) { try await next(request, context) }
    }

    private func authenticate(_ request: Request) throws(ServiceProblem) -> Principal {
        guard let header = request.headers[.authorization] else {
            throw Self.unauthorized("this route needs an API key: send Authorization: Bearer <key>")
        }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw Self.unauthorized("the Authorization header must be Bearer <key>")
        }
        guard let principal = keyring.principal(presenting: parts[1].trimmingCharacters(in: .whitespaces).utf8) else {
            throw Self.unauthorized("the API key is not known")
        }
        guard principal.allows(scope) else {
            throw ServiceProblem(
                .forbidden, .forbidden,
                "this key lacks the '\(scope.rawValue)' scope that \(route.method.rawValue) \(route.template) needs")
        }
        return principal
    }

    private static func unauthorized(_ detail: String) -> ServiceProblem {
        var problem = ServiceProblem(.unauthorized, .unauthorized, detail)
        problem.headers[.wwwAuthenticate] = #"Bearer realm="fanfare""#
        return problem
    }
}

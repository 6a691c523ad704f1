import HTTPTypes

/// One operation of the API: its method, path template (as in the OpenAPI document), and the scope it needs.
/// The generated server registers the handlers; this table lets the front door answer before routing
/// (authentication, 404 and 405, metrics labels). The tests check it against the routes the generated code
/// registers, so the two cannot drift.
package struct APIRoute: Sendable, Equatable {
    package var method: HTTPRequest.Method
    /// `/v1/waves/{wave_id}`: literal segments and `{name}` captures.
    package var template: String
    /// nil: open (health, readiness, metrics, the document).
    package var scope: Scope?
    /// Writes are refused while the service shuts down; they take Idempotency-Key.
    package var isWrite: Bool { method == .post || method == .put || method == .delete }

    fileprivate var segments: [Substring] { template.split(separator: "/") }
}

package enum APIRoutes {
    package static let all: [APIRoute] = [
        APIRoute(method: .post, template: "/v1/tokens", scope: .register),
        APIRoute(method: .post, template: "/v1/tokens/delete", scope: .register),
        APIRoute(method: .get, template: "/v1/tokens/{token}", scope: .read),
        APIRoute(method: .post, template: "/v1/channels/{channel}/updates", scope: .publish),
        APIRoute(method: .get, template: "/v1/channels", scope: .read),
        APIRoute(method: .get, template: "/v1/channels/{channel}", scope: .read),
        APIRoute(method: .put, template: "/v1/channels/{channel}/broadcast", scope: .publish),
        APIRoute(method: .get, template: "/v1/channels/{channel}/broadcast", scope: .read),
        APIRoute(method: .delete, template: "/v1/channels/{channel}/broadcast", scope: .publish),
        APIRoute(method: .get, template: "/v1/waves", scope: .read),
        APIRoute(method: .get, template: "/v1/waves/{wave_id}", scope: .read),
        APIRoute(method: .get, template: "/v1/waves/{wave_id}/events", scope: .read),
        APIRoute(method: .post, template: "/v1/push", scope: .publish),
        APIRoute(method: .get, template: "/", scope: nil),
        APIRoute(method: .get, template: "/healthz", scope: nil),
        APIRoute(method: .get, template: "/readyz", scope: nil),
        APIRoute(method: .get, template: "/metrics", scope: nil),
        APIRoute(method: .get, template: "/openapi.yaml", scope: nil),
    ]

    /// What a request path matched.
    package enum Match: Equatable {
        case route(APIRoute)
        /// The path exists, but not with this method.
        case methodNotAllowed(allowed: [HTTPRequest.Method])
        case notFound
    }

    /// Matches the path (without query) against the table. A literal segment wins over a capture (so
    /// `/v1/tokens/delete` is not a token), as in the router.
    package static func match(method: HTTPRequest.Method, path: Substring, routes: [APIRoute] = all) -> Match {
        let segments = path.split(separator: "/")
        var best: [(route: APIRoute, literals: Int)] = []
        for route in routes {
            let template = route.segments
            guard template.count == segments.count else { continue }
            var literals = 0
            var matches = true
            for (want, have) in zip(template, segments) {
                if want.first == "{" { continue }
                if want != have {
                    matches = false
                    break
                }
                literals += 1
            }
            if matches { best.append((route, literals)) }
        }
        guard let most = best.map(\.literals).max() else { return .notFound }
        let candidates = best.filter { $0.literals == most }.map(\.route)
        if let route = candidates.first(where: { $0.method == method }) { return .route(route) }
        // HEAD is answered like GET by nobody here: it is not in the document.
        return .methodNotAllowed(allowed: candidates.map(\.method))
    }
}

import HTTPTypes

/// One operation of the API as the service serves it: its method and path template (as in the OpenAPI document),
/// and what its own middlewares need to know: the scope it needs, the media type it answers, and the header
/// fields its answers carry beyond what the generated code writes. The generated server registers the handlers;
/// `FastPathTransport` gives each route the middlewares its entry asks for (`ServiceMiddleware.group(for:on:)`).
/// The tests check the table against the routes the generated code registers, so the two cannot drift.
package struct APIRoute: Sendable, Equatable {
    package var method: HTTPRequest.Method
    /// `/v1/waves/{wave_id}`: literal segments and `{name}` captures.
    package var template: String
    /// nil: open (health, readiness, metrics, the document, the operator page).
    package var scope: Scope?
    /// What the route answers with, for the Accept check (done before the handler runs, so a request that would
    /// be refused at the end never writes anything).
    package var answers: ResponseMediaType
    /// Set on the route's answers (not on its problem documents).
    package var headers: HTTPFields

    package init(
        _ method: HTTPRequest.Method, _ template: String, scope: Scope?, answers: ResponseMediaType = .json,
        headers: HTTPFields = [:]
    ) {
        self.method = method
        self.template = template
        self.scope = scope
        self.answers = answers
        self.headers = headers
    }

    /// Writes are refused while the service shuts down; they take Idempotency-Key, and a body only as JSON.
    package var isWrite: Bool { method == .post || method == .put || method == .patch || method == .delete }

    /// Whether the document gives the operation a request body: every POST and PUT here (a DELETE takes none;
    /// `OpenAPIDocumentTests` holds the two to each other).
    package var takesBody: Bool { method == .post || method == .put || method == .patch }

    fileprivate var segments: [Substring] { template.split(separator: "/") }

    /// This route of the default app as the route of any app (`/v1/tokens` → `/v1/apps/{app}/tokens`).
    fileprivate var inApp: APIRoute {
        var route = self
        route.template = "/v1/apps/{app}/" + template.dropFirst("/v1/".count)
        return route
    }
}

/// A media type without parameters (`text/event-stream`).
package struct ResponseMediaType: Sendable, Equatable, CustomStringConvertible {
    package var type: String
    package var subtype: String

    package static let json = ResponseMediaType(type: "application", subtype: "json")
    package static let yaml = ResponseMediaType(type: "application", subtype: "yaml")
    package static let html = ResponseMediaType(type: "text", subtype: "html")
    package static let plainText = ResponseMediaType(type: "text", subtype: "plain")
    package static let eventStream = ResponseMediaType(type: "text", subtype: "event-stream")

    package var description: String { "\(type)/\(subtype)" }
}

package enum APIRoutes {
    package static let all: [APIRoute] =
        appRoutes + appRoutes.map(\.inApp) + [
            APIRoute(.get, "/v1/apps", scope: .read),
            APIRoute(.post, "/v1/apps/reload", scope: .admin),
            APIRoute(.get, "/", scope: nil, answers: .html),
            APIRoute(.get, "/healthz", scope: nil),
            APIRoute(.get, "/readyz", scope: nil),
            // Prometheus' text exposition format names its version in the content type.
            APIRoute(
                .get, "/metrics", scope: nil, answers: .plainText,
                headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"]),
            APIRoute(.get, "/openapi.yaml", scope: nil, answers: .yaml),
        ]

    /// The routes of one app: at `/v1/...` for the default app, and at `/v1/apps/{app}/...` for any.
    private static let appRoutes: [APIRoute] = [
        APIRoute(.post, "/v1/tokens", scope: .register),
        APIRoute(.post, "/v1/tokens/delete", scope: .register),
        APIRoute(.get, "/v1/tokens/{token}", scope: .read),
        APIRoute(.post, "/v1/channels/{channel}/updates", scope: .publish),
        APIRoute(.get, "/v1/channels", scope: .read),
        APIRoute(.get, "/v1/channels/{channel}", scope: .read),
        APIRoute(.put, "/v1/channels/{channel}/broadcast", scope: .publish),
        APIRoute(.get, "/v1/channels/{channel}/broadcast", scope: .read),
        APIRoute(.delete, "/v1/channels/{channel}/broadcast", scope: .publish),
        APIRoute(.get, "/v1/waves", scope: .read),
        APIRoute(.get, "/v1/waves/{wave_id}", scope: .read),
        // An event stream is never cached: every read is the wave as it is now.
        APIRoute(
            .get, "/v1/waves/{wave_id}/events", scope: .read, answers: .eventStream,
            headers: [.cacheControl: "no-store"]),
        APIRoute(.post, "/v1/push", scope: .publish),
    ]

    /// The route the generated code registers at `template` for `method`.
    package static func route(method: HTTPRequest.Method, template: String) -> APIRoute? {
        all.first { $0.method == method && $0.template == template }
    }

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

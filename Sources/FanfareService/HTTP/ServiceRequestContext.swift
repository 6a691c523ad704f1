import Hummingbird

/// The request context of the service's router: what the middlewares settle for the ones after them.
package struct ServiceRequestContext: RequestContext {
    package var coreContext: CoreRequestContextStorage
    /// Who sent the request: set by `AuthenticationMiddleware` on routes that need a scope (when the service has
    /// API keys); `.anonymous` otherwise. Idempotency keys are scoped by it.
    package var principal: Principal = .anonymous

    package init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
    }

    /// `BodyLimitMiddleware` limits bodies itself (`--max-body`), with a problem document.
    package var maxUploadSize: Int { .max }

    /// The matched route's template (`/v1/waves/{wave_id}`) as the router named it, or "unmatched": the label of
    /// request metrics and error logs.
    var routeLabel: String { endpointPath ?? "unmatched" }
}

/// What a middleware calls to pass a request on: the next middleware, or at the end the route's handler.
typealias NextResponder = (Request, ServiceRequestContext) async throws -> Response

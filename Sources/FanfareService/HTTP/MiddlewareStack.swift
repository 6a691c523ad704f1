import Hummingbird
import Logging

/// Which middlewares a request passes, in order (one concern each, as Hummingbird composes them):
///
///     every request       RequestMetrics → LocationHeader → ConnectionClose → Problem
///                         → LoopbackHost (no API keys) → UnmatchedRoute
///     then its route's    Authentication (needs a scope, API keys on) → Accept
///                         writes: Draining → ContentType → BodyLimit → Idempotency
///                         ResponseHeaders (routes declaring header fields) → the generated handler
///
/// A route's own middlewares come from its entry in `APIRoutes`; `FastPathTransport` registers each route in
/// the group `group(for:on:)` builds, so a route carries its rules instead of a check somewhere knowing it.
struct MiddlewareStack: Sendable {
    let keyring: APIKeyring?
    let maxBodyBytes: Int
    let retryAfter: Int
    let lifecycle: ServiceLifecycleState
    let idempotency: IdempotencyGate
    let blocking: BlockingWork
    let metrics: ServiceMetrics
    let logger: Logger

    /// The middlewares of every request, matched or not. Before any route is registered: the router wraps a
    /// route in the middlewares it has when the route is added.
    func addShared(to router: Router<ServiceRequestContext>) {
        router.add(middleware: RequestMetricsMiddleware(metrics: metrics))
        router.add(middleware: LocationHeaderMiddleware())
        router.add(middleware: ConnectionCloseMiddleware(lifecycle: lifecycle))
        router.add(middleware: ProblemMiddleware(logger: logger))
        if keyring == nil { router.add(middleware: LoopbackHostMiddleware()) }
        router.add(middleware: UnmatchedRouteMiddleware())
    }

    /// The group to register `route` in: its own middlewares, in the order its checks run.
    func group(for route: APIRoute, on router: Router<ServiceRequestContext>) -> RouterGroup<ServiceRequestContext> {
        let group = router.group()
        if let keyring, let scope = route.scope {
            group.add(middleware: AuthenticationMiddleware(keyring: keyring, route: route, scope: scope))
        }
        group.add(middleware: AcceptMiddleware(answers: route.answers))
        if route.isWrite {
            group.add(middleware: DrainingMiddleware(lifecycle: lifecycle, retryAfter: retryAfter))
            group.add(middleware: ContentTypeMiddleware(takesBody: route.takesBody))
            group.add(middleware: BodyLimitMiddleware(maxBodyBytes: maxBodyBytes))
            group.add(middleware: IdempotencyMiddleware(gate: idempotency, blocking: blocking, logger: logger))
        }
        if !route.headers.isEmpty {
            group.add(middleware: ResponseHeadersMiddleware(headers: route.headers))
        }
        return group
    }
}

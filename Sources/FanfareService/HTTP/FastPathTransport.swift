import HTTPTypes
import Hummingbird
import OpenAPIHummingbird
package import OpenAPIRuntime
import Synchronization

/// Where the generated server registers its operations: the Hummingbird router (through
/// swift-openapi-hummingbird), and a record of every (method, path) it registered, which the tests compare
/// with `APIRoutes` and the OpenAPI document.
package struct FastPathTransport: ServerTransport {
    let router: Router<ServiceRequestContext>
    let api: FanfareAPI
    let recorded: RegisteredRoutes

    init(router: Router<ServiceRequestContext>, api: FanfareAPI, recorded: RegisteredRoutes = RegisteredRoutes()) {
        self.router = router
        self.api = api
        self.recorded = recorded
    }

    package func register(
        _ handler: @Sendable @escaping (HTTPRequest, HTTPBody?, ServerRequestMetadata) async throws -> (HTTPResponse, HTTPBody?),
        method: HTTPRequest.Method, path: String
    ) throws {
        recorded.add(method: method, path: path)
        router.register(handler, method: method, path: path)
    }
}

/// The routes the generated code registered.
package final class RegisteredRoutes: Sendable {
    private let routes = Mutex<[(HTTPRequest.Method, String)]>([])
    package init() {}
    func add(method: HTTPRequest.Method, path: String) { routes.withLock { $0.append((method, path)) } }
    package var all: [(method: HTTPRequest.Method, path: String)] { routes.withLock { $0.map { ($0.0, $0.1) } } }
}

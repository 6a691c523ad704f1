import HTTPTypes
import Hummingbird
import OpenAPIHummingbird
package import OpenAPIRuntime
import Synchronization

/// Where the generated server registers its operations: the Hummingbird router (through
/// swift-openapi-hummingbird), each route in a group with the middlewares its `APIRoutes` entry asks for, and a
/// record of every (method, path) it registered, which the tests compare with `APIRoutes` and the OpenAPI document.
///
/// One operation has a fast path in front of its generated handler: `POST /v1/tokens` bodies are read by
/// `TokenBatchDecoder`; a body it does not take goes to the generated handler unchanged.
package struct FastPathTransport: ServerTransport {
    let router: Router<ServiceRequestContext>
    let middlewares: MiddlewareStack
    let api: FanfareAPI
    let recorded: RegisteredRoutes

    init(
        router: Router<ServiceRequestContext>, middlewares: MiddlewareStack, api: FanfareAPI,
        recorded: RegisteredRoutes = RegisteredRoutes()
    ) {
        self.router = router
        self.middlewares = middlewares
        self.api = api
        self.recorded = recorded
    }

    package typealias Handler =
        @Sendable (HTTPRequest, HTTPBody?, ServerRequestMetadata) async throws -> (HTTPResponse, HTTPBody?)

    package func register(_ handler: @escaping Handler, method: HTTPRequest.Method, path: String) throws {
        recorded.add(method: method, path: path)
        guard let route = APIRoutes.route(method: method, template: path) else {
            throw UndeclaredRoute(method: method, path: path)
        }
        let group = middlewares.group(for: route, on: router)
        guard method == .post, path == "/v1/tokens" || path == "/v1/apps/{app}/tokens" else {
            group.register(handler, method: method, path: path)
            return
        }
        let api = self.api
        let named = path != "/v1/tokens"
        group.register(
            { request, body, metadata in
                var bytes: [UInt8] = []
                if let body { bytes = try await [UInt8](collecting: body, upTo: Int.max) }
                let fields = bytes.withUnsafeBytes { TokenBatchDecoder.decode($0) }
                guard let fields else { return try await handler(request, HTTPBody(bytes), metadata) }
                // `/v1/apps/{app}/tokens`: the app is the third segment (app ids need no percent-decoding; one
                // that does is no app).
                let app = try api.app(named ? Self.appSegment(of: request.path) : nil)
                let (registered, replaced) = try await api.register(fields, in: app)
                var response = HTTPResponse(status: .ok)
                response.headerFields[.contentType] = "application/json; charset=utf-8"
                // As the generated encoder writes it (sorted keys, pretty-printed).
                return (response, HTTPBody("{\n  \"registered\" : \(registered),\n  \"replaced\" : \(replaced)\n}"))
            }, method: method, path: path)
    }
}

extension FastPathTransport {
    /// `scores` of `/v1/apps/scores/tokens?...`.
    static func appSegment(of path: String?) -> String {
        let segments = (path ?? "").split(separator: "?", maxSplits: 1).first?.split(separator: "/") ?? []
        return segments.count > 2 ? String(segments[2]) : ""
    }
}

/// The generated code registered a route `APIRoutes` does not declare: its scope and rules are unknown, so the
/// service does not start (the tests keep the two in step).
struct UndeclaredRoute: Error, CustomStringConvertible {
    let method: HTTPRequest.Method
    let path: String
    var description: String { "\(method.rawValue) \(path) is registered by the generated code but not in APIRoutes" }
}

/// The routes the generated code registered.
package final class RegisteredRoutes: Sendable {
    private let routes = Mutex<[(HTTPRequest.Method, String)]>([])
    package init() {}
    func add(method: HTTPRequest.Method, path: String) { routes.withLock { $0.append((method, path)) } }
    package var all: [(method: HTTPRequest.Method, path: String)] { routes.withLock { $0.map { ($0.0, $0.1) } } }
}

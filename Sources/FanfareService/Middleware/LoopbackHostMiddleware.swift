import Hummingbird

/// Without API keys (loopback only): 421 unless the request's `Host` is a loopback name or address. A web page
/// whose DNS name is rebound to 127.0.0.1 sends its own name as Host, so it cannot drive a keyless service
/// from the browser (review M2). Every request, open routes and unknown paths included.
struct LoopbackHostMiddleware: RouterMiddleware {
    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        guard let host = request.head.authority, Self.isLoopback(authority: host) else {
            let given = request.head.authority.map { "Host \(ServiceProblem.printable(String($0.prefix(100))))" }
            throw ServiceProblem(
                .misdirectedRequest, .misdirectedRequest,
                "\(given ?? "a request without Host") is not this service: without API keys it answers only "
                    + "requests to localhost, 127.x.x.x or [::1] (start it with --api-keys to serve other names)")
        }
        return try await next(request, context)
    }

    /// `localhost`, `127.0.0.1`, `[::1]`, each with or without `:port`.
    static func isLoopback(authority: String) -> Bool {
        var host = Substring(authority)
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return false }
            let rest = host[host.index(after: close)...]
            guard rest.isEmpty || isPort(rest) else { return false }
            host = host[...close]
        } else if let colon = host.lastIndex(of: ":") {
            guard isPort(host[colon...]) else { return false }
            host = host[..<colon]
        }
        return ServiceConfiguration.isLoopback(String(host))
    }

    /// `:` and 1 to 5 digits.
    private static func isPort(_ text: Substring) -> Bool {
        let digits = text.dropFirst()
        return text.first == ":" && (1...5).contains(digits.count) && digits.allSatisfy { $0 >= "0" && $0 <= "9" }
    }
}

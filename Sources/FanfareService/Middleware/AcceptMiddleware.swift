internal import Foundation
import Hummingbird

/// 406 when the Accept header excludes what the route answers with; checked before the handler runs, so a
/// request that would be refused at the end never starts its work.
struct AcceptMiddleware: RouterMiddleware {
    let answers: ResponseMediaType

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        if let accept = request.headers[.accept], !Self.accepts(accept, answers) {
            throw ServiceProblem(
                .notAcceptable, .notAcceptable, "this route answers \(answers); the Accept header excludes it")
        }
        return try await next(request, context)
    }

    /// Whether a media range of `accept` with a quality above 0 covers `type`.
    static func accepts(_ accept: String, _ type: ResponseMediaType) -> Bool {
        for item in accept.split(separator: ",") {
            let parameters = item.split(separator: ";")
            guard let range = parameters.first?.trimmingCharacters(in: .whitespaces).lowercased() else { continue }
            var quality = 1.0
            for parameter in parameters.dropFirst() {
                let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                if pair.count == 2, pair[0].lowercased() == "q", let value = Double(pair[1]) { quality = value }
            }
            guard quality > 0 else { continue }
            if range == "*/*" || range == "\(type.type)/*" || range == "\(type)" { return true }
            // Problem documents are JSON: a client that takes problem+json takes our errors, not the answer.
        }
        return false
    }
}

import Hummingbird
import NIOCore

/// On write routes: collects the body, at most `maxBodyBytes` (`--max-body`), into one buffer the handler and
/// `IdempotencyMiddleware` read; 413 for more (by Content-Length before reading anything, else once the
/// limit is passed).
struct BodyLimitMiddleware: RouterMiddleware {
    let maxBodyBytes: Int

    func handle(_ request: Request, context: ServiceRequestContext, next: NextResponder) async throws -> Response {
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > maxBodyBytes {
            throw tooLarge(size: length)
        }
        var request = request
        do {
            _ = try await request.collectBody(upTo: maxBodyBytes)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw tooLarge(size: nil)
        } catch is NIOTooManyBytesError {
            throw tooLarge(size: nil)
        }
        return try await next(request, context)
    }

    private func tooLarge(size: Int?) -> ServiceProblem {
        let body = size.map { "\($0) bytes" } ?? "larger than the limit"
        var problem = ServiceProblem(
            .contentTooLarge, .bodyTooLarge, "the body is \(body); at most \(maxBodyBytes) bytes (--max-body)")
        problem.size = size
        problem.limit = maxBodyBytes
        return problem
    }
}

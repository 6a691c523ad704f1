import FanfareCore
import FanfareStorage
internal import Foundation

/// A `TokenBatch` (the body `POST /v1/tokens` takes) read outside the HTTP path, for `fanfare import`: the same
/// decoders and the same checks, so a file the importer accepts is one the API accepts, item for item.
package enum TokenBatchReader {
    /// Every item of `body`, checked; the first problem is the error, as the API would answer it (without the
    /// API's per-request item limit: a file may hold any number). An item's `environment` (`defaultEnvironment`
    /// when it names none) must be one of `environments`, where app `app` sends.
    package static func read(
        _ body: [UInt8], app: String, bundleID: String, environments: [APNsEnvironment],
        defaultEnvironment: APNsEnvironment = .production, now: Int64
    )
        throws(ServiceProblem) -> RegistrationItems
    {
        let fields: [RegistrationFields]
        if let fast = body.withUnsafeBytes({ TokenBatchDecoder.decode($0) }) {
            fields = fast
        } else {
            // The generated types give the canonical answer to anything the fast decoder does not take.
            do {
                fields = try JSONDecoder().decode(Components.Schemas.TokenBatch.self, from: Data(body)).tokens
                    .map(RegistrationFields.init)
            } catch {
                throw .badRequest(.invalidRequest, "not a token batch ({\"tokens\": [...]}): \(Self.describe(error))")
            }
        }
        guard !fields.isEmpty else {
            throw .badRequest(.invalidRequest, "tokens must list at least one token", field: "tokens")
        }
        return try RegistrationItems(
            checking: fields, app: app, bundleID: bundleID, environments: environments,
            defaultEnvironment: defaultEnvironment, now: now)
    }

    /// A decoding error in a line: where, and what.
    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.dataCorrupted(let context), DecodingError.typeMismatch(_, let context),
            DecodingError.valueNotFound(_, let context), DecodingError.keyNotFound(_, let context):
            let path = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return (path.isEmpty ? "" : "at \(path): ") + context.debugDescription
        default:
            return "\(error)"
        }
    }
}

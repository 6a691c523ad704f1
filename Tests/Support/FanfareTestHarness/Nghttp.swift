// Drives the simulator with nghttp2's own client, the `nghttp` CLI (Debian nghttp2-client, installed by
// scripts/ensure-system-packages): a client nobody here wrote, for the management API and broadcasts.
import FanfareTestSupport
import Foundation
import Testing

/// One HTTP/2 answer as nghttp saw it (from its HAR output).
package struct NghttpResponse: Sendable {
    package var status: Int
    /// Lower-case names; the last value of a repeated name.
    package var headers: [String: String]

    package func header(_ name: String) -> String? { headers[name] }
}

/// What one `nghttp` run returned: the answers in order, and the bodies it printed (all of them, one after
/// the other: the body of a single request).
package struct NghttpRun: Sendable {
    package var responses: [NghttpResponse]
    package var body: String

    /// The only answer (a run with one request).
    package var response: NghttpResponse {
        get throws {
            try #require(responses.count == 1 ? responses[0] : nil, "expected one answer, got \(responses.count)")
        }
    }

    /// `reason` of the error body, when the run had one request.
    package var reason: String? {
        guard let data = body.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else {
            return nil
        }
        return object["reason"] as? String
    }

    package var json: [String: Any]? {
        guard let data = body.data(using: .utf8) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }
}

/// Runs `nghttp` for `https://127.0.0.1:<port><path>`, `count` times over one connection, on a thread of its
/// own (the process is waited for; the tests' cooperative threads stay free).
package func nghttp(
    port: UInt16, path: String, method: String? = nil, headers: [(String, String)] = [], body: String? = nil,
    count: Int = 1
) async throws -> NghttpRun {
    let run = try await perform(when: { true }, timeout: .seconds(5)) {
        try runNghttp(port: port, path: path, method: method, headers: headers, body: body, count: count)
    }
    return try #require(run)
}

private func runNghttp(
    port: UInt16, path: String, method: String?, headers: [(String, String)], body: String?, count: Int
) throws -> NghttpRun {
    let directory = NSTemporaryDirectory() + "fanfare-nghttp-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let har = directory + "/har.json"
    // -M 1: one stream until the server's SETTINGS (APNs starts every connection at one stream).
    var arguments = ["-M", "1", "--har=\(har)"]
    if count > 1 { arguments += ["-m", String(count)] }
    if let method { arguments += ["-H", ":method: \(method)"] }
    for (name, value) in headers { arguments += ["-H", "\(name): \(value)"] }
    if let body {
        let file = directory + "/body"
        try body.write(toFile: file, atomically: true, encoding: .utf8)
        arguments += ["-d", file]
    }
    arguments.append("https://127.0.0.1:\(port)\(path)")
    let printed = Data(try ChildProcess.run("/usr/bin/nghttp", arguments).stdout.utf8)
    let data = try Data(contentsOf: URL(fileURLWithPath: har))
    let log = try #require((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["log"] as? [String: Any])
    let entries = log["entries"] as? [[String: Any]] ?? []
    let responses = entries.compactMap { entry -> NghttpResponse? in
        guard let response = entry["response"] as? [String: Any], let status = response["status"] as? Int else {
            return nil
        }
        var fields: [String: String] = [:]
        for header in response["headers"] as? [[String: Any]] ?? [] {
            if let name = header["name"] as? String, let value = header["value"] as? String {
                fields[name.lowercased()] = value
            }
        }
        return NghttpResponse(status: status, headers: fields)
    }
    return NghttpRun(responses: responses, body: String(decoding: printed, as: UTF8.self))
}

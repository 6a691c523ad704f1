// The OpenAPI document is the source of truth: the service serves the committed file byte for byte, the
// committed generated code was made from it, and the routes it lists are exactly those the router has and the
// front door knows (so no route is undocumented and no documented route is missing).
import FanfareService
import FanfareTLS
import FanfareTestSupport
import Foundation
import Testing

@Suite("OpenAPI document", .ownThread)
struct OpenAPIDocumentTests {
    static let specPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/FanfareService/openapi.yaml").path

    /// (METHOD, path) of every operation in the document (its `paths:` block, two-space YAML indentation).
    static func documentedOperations(_ yaml: String) -> Set<String> {
        var operations = Set<String>()
        var inPaths = false
        var path: String?
        for line in yaml.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" {
                inPaths = true
                continue
            }
            guard inPaths else { continue }
            if !line.hasPrefix(" ") && !line.isEmpty { break }
            if line.hasPrefix("  /") && line.hasSuffix(":") && !line.hasPrefix("   ") {
                path = String(line.dropFirst(2).dropLast())
            } else if let path, line.hasPrefix("    ") && !line.hasPrefix("     ") && line.hasSuffix(":") {
                let method = line.trimmingCharacters(in: .whitespaces).dropLast()
                if ["get", "post", "put", "patch", "delete", "head", "options"].contains(String(method)) {
                    operations.insert("\(method.uppercased()) \(path)")
                }
            }
        }
        return operations
    }

    /// (METHOD, path) of the operations with a `requestBody`.
    static func operationsWithBody(_ yaml: String) -> Set<String> {
        var operations = Set<String>()
        var path: String?
        var method: String?
        for line in yaml.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("  /") && line.hasSuffix(":") && !line.hasPrefix("   ") {
                path = String(line.dropFirst(2).dropLast())
            } else if line.hasPrefix("    ") && !line.hasPrefix("     ") && line.hasSuffix(":") {
                method = line.trimmingCharacters(in: .whitespaces).dropLast().uppercased()
            } else if line == "      requestBody:", let path, let method {
                operations.insert("\(method) \(path)")
            }
        }
        return operations
    }

    @Test("served document == committed file == what the generated code came from; routes == router == front door")
    func documentMatchesServer() async throws {
        let file = try String(contentsOfFile: Self.specPath, encoding: .utf8)
        let digest = Digest.sha256(Array(file.utf8)).map { String(format: "%02x", $0) }.joined()
        #expect(
            OpenAPIDocument.sha256 == digest,
            "Sources/FanfareService/openapi.yaml changed without scripts/generate-openapi: regenerate and commit Generated/"
        )

        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let served = try await fixture.client.get("/openapi.yaml")
        #expect(served.status == 200)
        #expect(served.header("content-type")?.hasPrefix("application/yaml") == true, "\(served)")
        #expect(served.text == file)

        let documented = Self.documentedOperations(file)
        // 13 operations of one app, the same 13 under /v1/apps/{app}/, the apps list and its reload, and 5 open ones.
        #expect(documented.count == 33, "\(documented)")
        let registered = Set(fixture.server.registeredRoutes.all.map { "\($0.method.rawValue) \($0.path)" })
        let frontDoor = Set(APIRoutes.all.map { "\($0.method.rawValue) \($0.template)" })
        #expect(registered == documented, "router: \(registered.symmetricDifference(documented))")
        #expect(frontDoor == documented, "front door: \(frontDoor.symmetricDifference(documented))")
        // The routes whose Content-Type is checked even without a body are those the document gives one.
        let withBody = Self.operationsWithBody(file)
        let takesBody = Set(APIRoutes.all.filter(\.takesBody).map { "\($0.method.rawValue) \($0.template)" })
        // 5 writes of one app, the same 5 under /v1/apps/{app}/, and the reload of the apps.
        #expect(withBody.count == 11 && takesBody == withBody, "\(takesBody.symmetricDifference(withBody))")

        // Every documented GET answers (not the router's 404) with the content type the document names.
        for operation in documented where operation.hasPrefix("GET ") {
            let path = operation.dropFirst(4)
                .replacingOccurrences(of: "{token}", with: tokenHex(1))
                .replacingOccurrences(of: "{channel}", with: "m")
                .replacingOccurrences(of: "{wave_id}", with: "1")
                .replacingOccurrences(of: "{app}", with: "default")
            guard !path.hasSuffix("/events") else { continue }
            let response = try await fixture.client.get(path)
            let code = response.json?["code"] as? String
            let absent = path.contains("/tokens/") || path.contains("/waves/") || path.hasSuffix("/broadcast")
            #expect(
                response.status == 200 || absent && code == "not_found" || path == "/readyz",
                "\(operation): \(response)")
        }
        try await fixture.stop()
    }
}

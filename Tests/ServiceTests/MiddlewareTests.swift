// The middlewares a request passes (HTTP/MiddlewareStack.swift): the router and the route table agree on every
// route and on the spellings of a path both take, so a route's own checks run exactly where the router serves it
// and every other request is 404 or 405 with Allow; and the header fields a route declares are on its answers,
// not on its problem documents.
import FanfareService
import FanfareTestSupport
import Foundation
import Testing

@Suite("Middlewares", .ownThread)
struct MiddlewareTests {
    static func path(_ template: String) -> String {
        template.replacingOccurrences(of: "{token}", with: tokenHex(1))
            .replacingOccurrences(of: "{channel}", with: "m")
            .replacingOccurrences(of: "{wave_id}", with: "1")
    }

    @Test("every route runs its own checks, however its path is spelled; other methods are 405 with Allow")
    func routesAndMethods() async throws {
        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let client = fixture.client
        for route in APIRoutes.all {
            let path = Self.path(route.template)
            // The Accept check is a middleware of the matched route only: its 406 shows the router took the path.
            let spellings = [path, "/" + path, path.replacingOccurrences(of: "/", with: "//"), path + "/"]
            for spelling in spellings {
                let refused = try await client.send(route.method.rawValue, spelling, headers: [("Accept", "image/png")])
                let document = problem(refused, status: 406, code: "not_acceptable")
                #expect(
                    (document["detail"] as? String)?.contains(route.answers.description) == true,
                    "\(route.method.rawValue) \(spelling): \(refused)")
            }
            let allowed = APIRoutes.all.filter { $0.template == route.template }.map(\.method.rawValue)
            for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] where !allowed.contains(method) {
                let answer = try await client.send(method, path)
                #expect(answer.status == 405, "\(method) \(path): \(answer)")
                #expect(answer.header("allow") == allowed.joined(separator: ", "), "\(method) \(path): \(answer)")
            }
        }
        // A literal segment wins over a capture: /v1/tokens/delete is not a token.
        let delete = try await client.get("/v1/tokens/delete")
        _ = problem(delete, status: 405, code: "method_not_allowed")
        #expect(delete.header("allow") == "POST")
        for path in ["/v1/nothing", "/V1/channels", "/v1/waves/1/events/more", "/healthz/now"] {
            _ = problem(try await client.get(path), status: 404, code: "not_found")
        }
        try await fixture.stop()
    }

    @Test("a route's own header fields are on its answers, not on its problems nor on other routes")
    func routeHeaders() async throws {
        let fixture = try await ServiceFixture()
        defer { fixture.removeDirectory() }
        let client = fixture.client
        let metrics = try await client.get("/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.header("content-type") == "text/plain; version=0.0.4; charset=utf-8", "\(metrics)")

        #expect(await eventually { try await client.get("/readyz").status == 200 })
        #expect(try await client.post("/v1/tokens", json: registrationBody(0..<3, channel: "m")).status == 200)
        let published = try await client.post("/v1/channels/m/updates", json: updateBody(timestamp: unixNow, home: 1))
        #expect(published.status == 202, "\(published)")
        let location = try #require(published.header("location"))
        let stream = try await client.stream(location + "/events") { _ in true }
        #expect(stream.status == 200, "\(stream)")
        #expect(stream.header("cache-control") == "no-store", "\(stream)")

        let unknownWave = try await client.get("/v1/waves/999/events")
        _ = problem(unknownWave, status: 404, code: "not_found")
        #expect(unknownWave.header("cache-control") == nil, "\(unknownWave)")
        let wave = try await client.get(location)
        #expect(wave.status == 200)
        #expect(wave.header("cache-control") == nil, "\(wave)")
        try await fixture.stop()
    }
}

// `fanfare import` and `fanfare serve` as child processes on a PostgreSQL that takes only TLS with a password
// (`PostgresServer(tls: true)`): the URL with sslmode=verify-full and sslrootcert, the password from PGPASSWORD
// (never on the command line); a bad sslmode refused at start naming it, without the URL's password.
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite("fanfare import and serve on PostgreSQL over TLS (child processes)", .serialized, .ownThread)
struct PostgresTLSProcessTests {
    @Test("verify-full with sslrootcert and PGPASSWORD: import writes, serve starts; a bad sslmode is refused")
    func importAndServeOverVerifiedTLS() async throws {
        let postgres = try await PostgresServiceProcessTests.onOwnThread { try PostgresServer(tls: true) }
        defer { postgres.stop() }
        let tls = try #require(postgres.tls)
        let directory = NSTemporaryDirectory() + "fanfare-pg-tls-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let url = postgres.url(
            database: PostgresServer.database, host: "localhost", password: nil,
            query: "sslmode=verify-full&sslrootcert=\(tls.caCertificate)")
        let environment = ["PGPASSWORD": PostgresServerTLS.password, "PGPASSFILE": directory + "/none"]

        try registrationBody(0..<500, channel: "match").write(
            toFile: directory + "/a.json", atomically: true, encoding: .utf8)
        let imported = try await ServeProcess.run(
            ["--database", url, "--bundle-id", ServiceKeys.bundleID, "a.json"], directory: directory,
            environment: environment, command: "import")
        #expect(imported.status == 0, "\(imported.errors)")
        #expect(try postgres.psql("SELECT count(*) FROM tokens") == "500")

        let serve = try await ServeProcess(
            ["--simulator", "--listen", "127.0.0.1:0", "--database", url], directory: directory,
            environment: environment)
        let client = serve.client
        #expect(
            await eventually(timeout: .seconds(120)) { try await client.get("/readyz").status == 200 },
            "\(serve.errors.suffix(2000))")
        #expect(try await client.get("/readyz").json?["tokens"] as? Int == 500)
        serve.signal(SIGTERM)
        #expect(await serve.waitForExit() == 0, "\(serve.errors.suffix(2000))")

        let secret = "not-the-password-\(UUID().uuidString.prefix(6))"
        let badMode = try await ServeProcess.run(
            [
                "--simulator", "--listen", "127.0.0.1:0", "--database",
                postgres.url(database: PostgresServer.database, password: secret, query: "sslmode=verify"),
            ],
            directory: directory)
        #expect(badMode.status == 64 && badMode.errors.contains("unknown sslmode 'verify'"), "\(badMode)")
        let badImport = try await ServeProcess.run(
            [
                "--database", postgres.url(database: PostgresServer.database, password: secret, query: "ssl=1"),
                "--bundle-id", ServiceKeys.bundleID, "a.json",
            ],
            directory: directory, command: "import")
        #expect(badImport.status == 64 && badImport.errors.contains("unknown parameter 'ssl'"), "\(badImport)")
        for result in [badMode, badImport] {
            #expect(!result.errors.contains(secret) && !result.output.contains(secret), "\(result)")
        }
    }
}

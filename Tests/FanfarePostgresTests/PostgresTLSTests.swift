import FanfareCore
@testable import FanfarePostgres
import FanfareStorage
import FanfareTestSupport
import Foundation
import NIOCore
import PostgresNIO
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A real PostgreSQL that takes TCP clients only over TLS with a password (`PostgresServer(tls: true)`): what each
/// sslmode does against it, where the password comes from, and what the errors say.
extension PostgresSuites {
    @Suite("PostgreSQL over TLS, with passwords")
    struct PostgresTLSTests {
        /// No password anywhere: not in the process's environment either (the tests pass their own).
        static let bare = PostgresEnvironment(variables: [:], homeDirectory: nil)

        /// Whether the store's own session is encrypted, as the server reports it.
        static func sessionUsesTLS(_ store: PostgresTokenStore) throws -> Bool {
            try store.inTransaction("reading pg_stat_ssl") { connection, logger in
                let rows = try await connection.query(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", logger: logger)
                for try await ssl in rows.decode(Bool.self) { return ssl }
                return false
            }
        }

        /// The message of the error opening a store on `url` fails with (`nil` if it opened).
        static func openingFails(_ url: String, environment: PostgresEnvironment = bare) -> String? {
            do {
                let store = try PostgresTokenStore(url: url, environment: environment)
                try? store.close()
                return nil
            } catch {
                return "\(error)"
            }
        }

        @Test func sslModesAgainstAServerThatTakesOnlyTLS() throws {
            let server = try PostgresServer(tls: true)
            defer { server.stop() }
            let tls = try #require(server.tls)
            let password = PostgresServerTLS.password
            let database = PostgresServer.database
            for query in [
                "sslmode=require", "", "sslmode=prefer", "sslmode=verify-ca&sslrootcert=\(tls.caCertificate)",
                "sslmode=verify-full&sslrootcert=\(tls.caCertificate)",
            ] {
                for host in ["127.0.0.1", "localhost"] {
                    let url = server.url(database: database, host: host, password: password, query: query)
                    let store = try PostgresTokenStore(url: url, environment: Self.bare)
                    defer { try? store.close() }
                    #expect(try Self.sessionUsesTLS(store), "\(query) to \(host)")
                    try store.register([updateRegistration(1)])
                    #expect(try store.count() == 1)
                }
            }

            // Another CA signed nothing of this server's: refused, saying so (and not naming the password).
            let untrusted = server.url(
                database: database, password: password,
                query: "sslmode=verify-full&sslrootcert=\(tls.otherCACertificate)")
            let refused = try #require(Self.openingFails(untrusted))
            #expect(refused.contains("the TLS handshake failed (sslmode=verify-full"), "\(refused)")
            #expect(refused.contains("must be signed by a CA of sslrootcert"), "\(refused)")
            #expect(!refused.contains(password), "\(refused)")
            let untrustedCA = server.url(
                database: database, password: password,
                query: "sslmode=verify-ca&sslrootcert=\(tls.otherCACertificate)")
            #expect(Self.openingFails(untrustedCA)?.contains("the TLS handshake failed (sslmode=verify-ca") == true)

            // verify-full checks the name: the certificate names 127.0.0.1, ::1 and localhost, not 127.0.0.2 (where
            // the server listens too); verify-ca does not.
            let wrongName = server.url(
                database: database, host: "127.0.0.2", password: password,
                query: "sslmode=verify-full&sslrootcert=\(tls.caCertificate)")
            let misnamed = try #require(Self.openingFails(wrongName))
            #expect(misnamed.contains("the TLS handshake failed (sslmode=verify-full"), "\(misnamed)")
            #expect(misnamed.contains("name 127.0.0.2"), "\(misnamed)")
            let anyName = server.url(
                database: database, host: "127.0.0.2", password: password,
                query: "sslmode=verify-ca&sslrootcert=\(tls.caCertificate)")
            let unnamed = try PostgresTokenStore(url: anyName, environment: Self.bare)
            #expect(try Self.sessionUsesTLS(unnamed))
            try unnamed.close()

            // Without TLS the server's rules refuse the connection, and the message says what to do.
            let plain = server.url(database: database, password: password, query: "sslmode=disable")
            let rejected = try #require(Self.openingFails(plain))
            #expect(rejected.contains("no encryption") && rejected.contains("use sslmode=require"), "\(rejected)")
            #expect(!rejected.contains(password) && rejected.contains("***"), "\(rejected)")
        }

        @Test func thePasswordComesFromPGPASSWORDOrThePasswordFile() throws {
            let server = try PostgresServer(tls: true)
            defer { server.stop() }
            let password = PostgresServerTLS.password
            let url = server.url(database: PostgresServer.database, password: nil, query: "sslmode=require")

            let fromVariable = PostgresEnvironment(variables: ["PGPASSWORD": password], homeDirectory: nil)
            let store = try PostgresTokenStore(url: url, environment: fromVariable)
            #expect(try Self.sessionUsesTLS(store))
            try store.close()

            let home = NSTemporaryDirectory() + "fanfare-home-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: home) }
            let passfile = home + "/.pgpass"
            let line = "127.0.0.1:\(server.port):\(PostgresServer.database):\(PostgresServer.user):\(password)"
            try "# the test server\n\(line)\n".write(toFile: passfile, atomically: false, encoding: .utf8)
            chmod(passfile, 0o600)
            let fromFile = PostgresEnvironment(variables: [:], homeDirectory: home)
            let filed = try PostgresTokenStore(url: url, environment: fromFile)
            #expect(try filed.count() == 0)
            try filed.close()

            // A password file its group may read is ignored, and the error says why.
            chmod(passfile, 0o640)
            let ignored = try #require(Self.openingFails(url, environment: fromFile))
            #expect(ignored.contains("asks for a password and none was found"), "\(ignored)")
            #expect(ignored.contains("\(passfile) was not read: its group or others may access it"), "\(ignored)")

            // No password at all.
            let none = try #require(Self.openingFails(url))
            #expect(none.contains("PGPASSWORD is not set, no password file"), "\(none)")
            let elsewhere = PostgresEnvironment(variables: [:], homeDirectory: home + "/elsewhere")
            let noFile = try #require(Self.openingFails(url, environment: elsewhere))
            #expect(noFile.contains("no password file \(home)/elsewhere/.pgpass"), "\(noFile)")
            try "127.0.0.1:1:*:*:other-port\n".write(toFile: passfile, atomically: false, encoding: .utf8)
            chmod(passfile, 0o600)
            let unmatched = try #require(Self.openingFails(url, environment: fromFile))
            let wanted = "127.0.0.1:\(server.port):\(PostgresServer.database):\(PostgresServer.user)"
            #expect(unmatched.contains("no line of the password file \(passfile) matches \(wanted)"), "\(unmatched)")

            // A wrong one: the server's refusal, where the password came from, never the password itself.
            let wrongPassword = "wrong-\(password)-x"
            let wrong = try #require(
                Self.openingFails(
                    url, environment: PostgresEnvironment(variables: ["PGPASSWORD": wrongPassword], homeDirectory: nil))
            )
            #expect(wrong.contains("password authentication failed") && wrong.contains("came from PGPASSWORD"))
            #expect(!wrong.contains(wrongPassword), "\(wrong)")
            let inURL = server.url(database: PostgresServer.database, password: wrongPassword, query: "sslmode=require")
            let wrongInURL = try #require(Self.openingFails(inURL))
            #expect(wrongInURL.contains("password authentication failed") && wrongInURL.contains("came from the URL"))
            #expect(!wrongInURL.contains(wrongPassword) && wrongInURL.contains("***"), "\(wrongInURL)")
        }

        @Test func requireAgainstAServerWithoutTLSFailsSayingSo() throws {
            let server = try PostgresServer.shared()
            let database = try server.createDatabase()
            defer { try? server.dropDatabase(database) }
            let url = server.url(database: database)
            let refused = try #require(Self.openingFails(url + "?sslmode=require"))
            #expect(refused.contains("does not offer TLS") && refused.contains("sslmode=require"), "\(refused)")
            // prefer (the default) falls back to plaintext there, as libpq does.
            let store = try PostgresTokenStore(url: url, environment: Self.bare)
            defer { try? store.close() }
            #expect(try !Self.sessionUsesTLS(store))
        }

        /// The options are read back with getsockopt (NIO's getOption on a socket option asks the kernel).
        @Test func connectionsProbeAnIdleHostAndGiveUpOnUnacknowledgedData() throws {
            let server = try PostgresServer.shared()
            let eventLoop = PostgresConnection.defaultEventLoopGroup.any()
            let channel = try PostgresSocket.connect(host: server.host, port: server.port, on: eventLoop).wait()
            defer { try? channel.close().wait() }
            var seen: [Int] = []
            for (option, _) in PostgresSocket.options { seen.append(try channel.getOption(option).wait()) }
            #expect(seen == PostgresSocket.options.map(\.value))
            // Not the kernel's defaults (keepalive off, 7200 s, 75 s, 9 probes, no user timeout).
            #expect(seen == [1, 10, 5, 3, 30_000])
        }

        /// `ss` (iproute2), where installed, shows the kernel's keepalive timer on a socket that has it.
        static let socketStatistics = ["/usr/bin/ss", "/bin/ss", "/usr/sbin/ss", "/sbin/ss"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }

        /// The store's connections are made that way: on a server of its own (no other client), every client
        /// socket to it runs a keepalive timer (postgres-nio's own connections have none).
        @Test(.enabled(if: socketStatistics != nil, "needs ss (iproute2) to see the sockets' timers"))
        func theStoresConnectionsKeepAlive() throws {
            let server = try PostgresServer()
            defer { server.stop() }
            let store = try PostgresTokenStore(url: server.url, environment: Self.bare)
            defer { try? store.close() }
            #expect(try store.count() == 0)
            let listed = try ChildProcess.run(
                try #require(Self.socketStatistics),
                ["-tnoH", "state", "established", "( dport = :\(server.port) )"], mergeOutputs: true)
            let sockets = listed.stdout.split(separator: "\n").filter {
                !$0.trimmingCharacters(in: .whitespaces).isEmpty
            }
            #expect(!sockets.isEmpty, "\(listed.stdout)")
            #expect(sockets.allSatisfy { $0.contains("timer:(keepalive,") }, "\(listed.stdout)")
        }
    }
}

@testable import FanfarePostgres
import FanfareStorage
import FanfareTestSupport
import Foundation
import Testing

/// Reading a `postgres://` URL (sslmode, sslrootcert, refusing what it does not know), redacting it for messages,
/// and libpq's password sources (the URL, PGPASSWORD, the password file), without a server.
extension PostgresSuites {
    @Suite("PostgreSQL URLs, redaction and password sources")
    struct PostgresURLTests {
        static func problem(_ url: String) -> String {
            PostgresTokenStore.urlProblem(url) ?? "no problem"
        }

        @Test func sslModesAreReadAsLibpqNamesThem() throws {
            #expect(try PostgresURL(parsing: "postgres://u@h/db").sslMode == .prefer)
            let ipv6 = try PostgresURL(parsing: "postgres://u@[::1]:5433/db")
            #expect(ipv6.host == "::1" && ipv6.port == 5433 && PostgresSocket.isIPAddress(ipv6.host))
            #expect(!PostgresSocket.isIPAddress("localhost"))
            for mode in ["disable", "prefer", "require"] {
                #expect(try PostgresURL(parsing: "postgres://u@h/db?sslmode=\(mode)").sslMode.rawValue == mode)
            }
            let root = NSTemporaryDirectory() + "fanfare-url-" + UUID().uuidString + ".pem"
            defer { try? FileManager.default.removeItem(atPath: root) }
            // Any PEM certificate will do to read the URL: one openssl makes.
            let made = try ChildProcess.run(
                "/usr/bin/env",
                [
                    "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", "/dev/null", "-out", root, "-days", "1", "-subj", "/CN=test",
                ], mergeOutputs: true)
            #expect(made.status == 0, "\(made.stdout)")
            let full = try PostgresURL(parsing: "postgresql://u@h:6000/db?sslmode=verify-full&sslrootcert=\(root)")
            #expect(full.sslMode == .verifyFull && full.sslRootCertificate == root && full.port == 6000)
            #expect(PostgresTokenStore.urlProblem("postgres://u@h/db?sslmode=verify-ca&sslrootcert=\(root)") == nil)
            #expect(PostgresTokenStore.urlProblem("postgres://u@h/db?sslmode=require") == nil)
        }

        @Test func whatIsNotKnownIsRefusedByName() {
            #expect(Self.problem("postgres://u@h/db?sslmode=allow").contains("unknown sslmode 'allow'"))
            #expect(Self.problem("postgres://u@h/db?sslmode=verify_full").contains("unknown sslmode 'verify_full'"))
            #expect(Self.problem("postgres://u@h/db?connect_timeout=5").contains("unknown parameter 'connect_timeout'"))
            #expect(
                Self.problem("postgres://u@h/db?sslmode=require&sslmode=disable").contains("sslmode is given twice"))
            #expect(Self.problem("postgres://u@h/db?sslmode=verify-full").contains("needs sslrootcert"))
            #expect(Self.problem("postgres://u@h/db?sslmode=verify-ca").contains("needs sslrootcert"))
            #expect(
                Self.problem("postgres://u@h/db?sslmode=require&sslrootcert=system").contains(
                    "needs sslmode=verify-full"))
            let missing = "/nonexistent/root.crt"
            #expect(
                Self.problem("postgres://u@h/db?sslmode=verify-full&sslrootcert=\(missing)")
                    .contains("sslrootcert \(missing) cannot be read"))
            let notPEM = NSTemporaryDirectory() + "fanfare-url-" + UUID().uuidString
            #expect(FileManager.default.createFile(atPath: notPEM, contents: Data("not a certificate\n".utf8)))
            defer { try? FileManager.default.removeItem(atPath: notPEM) }
            #expect(
                Self.problem("postgres://u@h/db?sslmode=verify-full&sslrootcert=\(notPEM)")
                    .contains("sslrootcert \(notPEM)"))
            let withPassword = Self.problem("postgres://u@h/db?password=hunter2")
            #expect(withPassword.contains("PGPASSWORD") && !withPassword.contains("hunter2"), "\(withPassword)")
            let unknownWithSecret = Self.problem("postgres://u:hunter2@h/db?sslmode=nope")
            #expect(unknownWithSecret.contains("sslmode 'nope'") && !unknownWithSecret.contains("hunter2"))
        }

        @Test func redactionHidesThePasswordOfAnyURL() {
            let redacted = PostgresTokenStore.redacted
            #expect(
                redacted("postgres://u:hunter2@h:5432/db?sslmode=require")
                    == "postgres://u:***@h:5432/db?sslmode=require")
            #expect(redacted("postgres://u@h/db") == "postgres://u@h/db")
            // URLs URLComponents cannot read (an unescaped @ or / in the password, a space, a bad port).
            for url in [
                "postgres://u:hun@ter2@h/db", "postgres://u:hun/ter2@h/db", "postgres://u:hun ter2@h/db",
                "postgres://u:hunter2@h:99999999999/db", "postgresql://u:hunter2@[bad/db", "postgres://u:hunter2@",
                // URLs a parser reads with no password: `:123` as a port, the rest as a path or a fragment.
                "postgres://u:123/hunter2@h/db", "postgres://u:12#hunter2@h/db", "postgres://u:1?hunter2@h/db",
            ] {
                let shown = redacted(url)
                #expect(!shown.contains("hunter2") && !shown.contains("ter2"), "\(url) -> \(shown)")
                #expect(shown.contains("***"), "\(url) -> \(shown)")
            }
            #expect(redacted("postgres://u:hun ter2@h/db") == "postgres://u:***@h/db")
            #expect(
                redacted("postgres://u@h/db?password=hunter2&sslmode=require")
                    == "postgres://u@h/db?password=***&sslmode=require")
            #expect(redacted("postgres://u@h/db?PassWord=hunter2") == "postgres://u@h/db?PassWord=***")
            #expect(redacted("postgres://u@h/my_password=db") == "postgres://u@h/my_password=db")
            #expect(redacted("not a url at all") == "not a url at all")
        }

        @Test func passfileLinesMatchAsInLibpq() {
            let key = PostgresPassfile.Key(host: "db.example", port: "5432", database: "fanfare", user: "app")
            func password(_ text: String) -> String? {
                PostgresPassfile.password(for: key, in: text.split(separator: "\n"))
            }
            #expect(password("db.example:5432:fanfare:app:first\n*:*:*:*:second") == "first")
            #expect(password("other:5432:fanfare:app:no\n*:*:*:*:any") == "any")
            #expect(password("db.example:5433:fanfare:app:no\ndb.example:*:fanfare:app:port-any") == "port-any")
            #expect(password("# db.example:5432:fanfare:app:comment\ndb.example:5432:*:app:x") == "x")
            #expect(password("db.example:5432:fanfare:other:no") == nil)
            #expect(password("db.example:5432:fanfare:app") == nil)
            // Escapes: `\:` is a colon of the value, `\\` a backslash; an unescaped `:` ends the password.
            #expect(password("db.example:5432:fanfare:app:a\\:b\\\\c:ignored") == "a:b\\c")
            let escapedKey = PostgresPassfile.Key(host: "h", port: "1", database: "d:b", user: "*")
            #expect(PostgresPassfile.password(for: escapedKey, in: ["h:1:d\\:b:\\*:escaped"]) == "escaped")
            #expect(PostgresPassfile.password(for: escapedKey, in: ["h:1:d:b:*:no"]) == nil)
        }

        @Test func thePasswordComesFromTheURLThenPGPASSWORDThenThePassfile() throws {
            let home = NSTemporaryDirectory() + "fanfare-home-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: home) }
            let passfile = home + "/.pgpass"
            try "h:5432:db:u:from-file\n".write(toFile: passfile, atomically: false, encoding: .utf8)
            chmod(passfile, 0o600)
            let withPassword = try PostgresURL(parsing: "postgres://u:from-url@h/db")
            let withoutPassword = try PostgresURL(parsing: "postgres://u@h/db")
            let environment = PostgresEnvironment(variables: ["PGPASSWORD": "from-env"], homeDirectory: home)
            let noVariables = PostgresEnvironment(variables: [:], homeDirectory: home)
            #expect(PostgresPassword.lookUp(for: withPassword, in: environment).password == "from-url")
            #expect(PostgresPassword.lookUp(for: withoutPassword, in: environment).password == "from-env")
            let fromFile = PostgresPassword.lookUp(for: withoutPassword, in: noVariables)
            #expect(fromFile.password == "from-file" && fromFile.source == "the password file \(passfile)")
            // PGPASSFILE names another file.
            let other = home + "/other"
            try "*:*:*:*:from-other\n".write(toFile: other, atomically: false, encoding: .utf8)
            chmod(other, 0o600)
            let named = PostgresEnvironment(variables: ["PGPASSFILE": other], homeDirectory: home)
            #expect(PostgresPassword.lookUp(for: withoutPassword, in: named).password == "from-other")
            // A file its group may read is not read, and the lookup says why.
            chmod(passfile, 0o640)
            let ignored = PostgresPassword.lookUp(for: withoutPassword, in: noVariables)
            #expect(ignored.password == nil)
            #expect(ignored.passfileProblem?.contains("group or others may access it (mode 640)") == true)
            // No file: nothing found, nothing to say.
            let empty = PostgresEnvironment(variables: [:], homeDirectory: home + "/none")
            #expect(PostgresPassword.lookUp(for: withoutPassword, in: empty).password == nil)
            #expect(PostgresPassword.lookUp(for: withoutPassword, in: empty).passfileProblem == nil)
        }
    }
}

// A test server that takes only TLS connections with a password (`PostgresServer(tls: true)`): a CA and a server
// certificate for 127.0.0.1, ::1 and localhost made with the openssl command into the server's directory, ssl on,
// and pg_hba.conf letting TCP clients in over TLS with a password (scram-sha-256) and refusing them without TLS.
// It also listens on 127.0.0.2, which its certificate does not name.
// psql reaches the server through its Unix socket (trusted), so the helpers keep working.
import Foundation

#if canImport(Glibc)
import Glibc
#endif

public struct PostgresServerTLS: Sendable {
    /// The password of `PostgresServer.user` (over TCP the server asks for it).
    public static let password = "s3cret-Fanfare-pw"

    /// The CA that signed the server's certificate (PEM).
    public let caCertificate: String
    /// A CA that signed nothing of this server's (PEM), for certificates that must not be trusted.
    public let otherCACertificate: String
    /// Holds the keys and certificates.
    public let directory: String

    /// The server's options for pg_ctl: ssl on with the certificate and key made here; listening on 127.0.0.2
    /// too, an address the certificate does not name (after `-h 127.0.0.1`, which this replaces).
    var serverOptions: String {
        " -c ssl=on -c ssl_cert_file=\(directory)/server.crt -c ssl_key_file=\(directory)/server.key"
            + " -c listen_addresses=127.0.0.1,127.0.0.2"
    }

    /// Makes the certificates in `serverDirectory/tls` and writes the cluster's pg_hba.conf; as root, hands the
    /// files to the `postgres` user (the server refuses a key file another user owns or others may read).
    static func prepare(serverDirectory: String, dataDirectory: String) throws -> PostgresServerTLS {
        let directory = serverDirectory + "/tls"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        func openssl(_ arguments: [String]) throws {
            let result = try ChildProcess.run(
                "/usr/bin/env", ["openssl"] + arguments, directory: directory, mergeOutputs: true)
            guard result.status == 0 else {
                throw ChildProcessError(description: "openssl \(arguments.joined(separator: " ")): \(result.stdout)")
            }
        }
        let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
        try openssl(
            ["req", "-x509"] + curve + ["-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=Fanfare test CA"])
        try openssl(
            ["req"] + Array(curve.dropLast(2)) + [
                "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost",
            ])
        try "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
            .write(toFile: directory + "/server.ext", atomically: false, encoding: .utf8)
        try openssl([
            "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
            "server.crt", "-days", "2", "-extfile", "server.ext",
        ])
        try openssl(["req", "-x509"] + curve + ["-keyout", "other.key", "-out", "other.crt", "-subj", "/CN=Other CA"])
        chmod(directory + "/server.key", 0o600)
        if getuid() == 0, let account = getpwnam("postgres") {
            for name in ["", "/server.key", "/server.crt"] {
                chown(directory + name, account.pointee.pw_uid, account.pointee.pw_gid)
            }
        }
        // Written in place: the file keeps the owner and mode initdb gave it.
        let rules = """
            local all all trust
            hostssl all all 127.0.0.0/8 scram-sha-256
            hostssl all all ::1/128 scram-sha-256
            hostnossl all all all reject

            """
        try rules.write(toFile: dataDirectory + "/pg_hba.conf", atomically: false, encoding: .utf8)
        return PostgresServerTLS(
            caCertificate: directory + "/ca.crt", otherCACertificate: directory + "/other.crt", directory: directory)
    }
}

extension PostgresServer {
    /// `postgres://fanfare[:password]@HOST:PORT/<database>[?query]` (TCP: the server asks for the password).
    public func url(database: String, host: String = "127.0.0.1", password: String?, query: String) -> String {
        let userInformation = PostgresServer.user + (password.map { ":" + $0 } ?? "")
        return "postgres://\(userInformation)@\(host):\(port)/\(database)" + (query.isEmpty ? "" : "?" + query)
    }
}

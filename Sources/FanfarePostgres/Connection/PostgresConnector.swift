import FanfareStorage
import Foundation
import Logging
import NIOCore
import NIOSSL
import PostgresNIO

/// Opens connections to the database a `postgres://` URL names: over a TCP connection of `PostgresSocket` (its
/// keepalive and user timeout), with the URL's `sslmode`, the password libpq would use (`PostgresPassword`, looked
/// up again at each connection, as libpq does), and the session named `applicationName`.
struct PostgresConnector: Sendable {
    let url: PostgresURL
    let tls: PostgresConnection.Configuration.TLS
    let applicationName: String
    let environment: PostgresEnvironment

    /// Reads `url` and, for TLS, makes its context (reading `sslrootcert`); `.storage` says what is wrong.
    init(url text: String, applicationName: String, environment: PostgresEnvironment) throws(RegistryError) {
        url = try PostgresURL(parsing: text)
        tls = try Self.tls(for: url, shown: PostgresURL.redacted(text))
        self.applicationName = applicationName
        self.environment = environment
    }

    /// A new connection on `eventLoop`; its errors (`PostgresConnectFailure`) say what to change.
    func connect(on eventLoop: any EventLoop, id: Int, logger: Logger) async throws -> PostgresConnection {
        let password = PostgresPassword.lookUp(for: url, in: environment)
        if let problem = password.passfileProblem { logger.warning("postgres: \(problem)") }
        let channel: any Channel
        do {
            channel = try await PostgresSocket.connect(host: url.host, port: url.port, on: eventLoop).get()
        } catch {
            throw PostgresConnectFailure(description: "\(error)")
        }
        var configuration = PostgresConnection.Configuration(
            establishedChannel: channel, tls: tls, username: url.user, password: password.password,
            database: url.database)
        configuration.options.connectTimeout = PostgresSocket.connectTimeout
        // The host's name for SNI and the certificate check; an IP address is matched against the peer's instead.
        configuration.options.tlsServerName = PostgresSocket.isIPAddress(url.host) ? nil : url.host
        // Set at the start of the session, so the name is there before its first statement.
        configuration.options.additionalStartupParameters = [("application_name", applicationName)]
        // A session ended during its startup (a live node fencing this node's run, a server going down) can leave
        // postgres-nio waiting for a reply that never comes: the channel's close fails the connect, a second later,
        // so that postgres-nio's own reason (a TLS handshake refused, a password) comes first when it has one. A
        // promise keeps its first result, so a close after a successful start changes nothing.
        let started = channel.eventLoop.makePromise(of: PostgresConnection.self)
        channel.closeFuture.whenComplete { _ in
            channel.eventLoop.scheduleTask(in: .seconds(1)) { started.fail(ClosedDuringStartup()) }
        }
        Task {
            do {
                started.succeed(
                    try await PostgresConnection.connect(
                        on: channel.eventLoop, configuration: configuration, id: id, logger: logger))
            } catch {
                started.fail(error)
            }
        }
        do {
            return try await started.futureResult.get()
        } catch {
            // postgres-nio closes the channel when its startup fails; one it never started is closed here.
            channel.close(promise: nil)
            throw PostgresConnectFailure(explaining: error, url: url, password: password)
        }
    }

    /// postgres-nio's TLS mode for the URL's `sslmode` and `sslrootcert`.
    static func tls(
        for url: PostgresURL, shown: String
    ) throws(RegistryError) -> PostgresConnection.Configuration.TLS {
        if url.sslMode == .disable { return .disable }
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        if let root = url.sslRootCertificate {
            configuration.trustRoots = root == "system" ? .default : .certificates(try certificates(root, shown: shown))
        }
        switch url.sslMode {
        case .verifyFull: configuration.certificateVerification = .fullVerification
        // As libpq: with a root certificate given, require (and prefer) check the chain as verify-ca does.
        case .verifyCA: configuration.certificateVerification = .noHostnameVerification
        case .prefer, .require, .disable:
            configuration.certificateVerification = url.sslRootCertificate == nil ? .none : .noHostnameVerification
        }
        let context: NIOSSLContext
        do { context = try NIOSSLContext(configuration: configuration) } catch {
            throw .storage("'\(shown)': cannot set up TLS: \(error)")
        }
        return url.sslMode == .prefer ? .prefer(context) : .require(context)
    }

    /// The PEM certificates of `sslrootcert`.
    static func certificates(_ path: String, shown: String) throws(RegistryError) -> [NIOSSLCertificate] {
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw .storage("'\(shown)': sslrootcert \(path) cannot be read (missing, or not readable by this user)")
        }
        let certificates: [NIOSSLCertificate]
        do { certificates = try NIOSSLCertificate.fromPEMFile(path) } catch {
            throw .storage("'\(shown)': sslrootcert \(path) is not a PEM certificate file: \(error)")
        }
        guard !certificates.isEmpty else { throw .storage("'\(shown)': sslrootcert \(path) holds no certificate") }
        return certificates
    }
}

/// A connection that could not be opened, said so that the operator knows what to change.
struct PostgresConnectFailure: Error, CustomStringConvertible {
    let description: String
}

extension PostgresConnectFailure {
    init(explaining error: any Error, url: PostgresURL, password: PostgresPassword) {
        let psql = error as? PSQLError
        if psql?.code == .sslUnsupported {
            description =
                "the server does not offer TLS (its ssl setting is off), and sslmode=\(url.sslMode.rawValue) needs it"
        } else if psql?.code == .authMechanismRequiresPassword {
            let passfile = password.passfileOutcome ?? "no password file"
            description =
                "the server asks for a password and none was found: none in the URL, PGPASSWORD is not set, "
                + passfile
        } else if let tlsError = Self.tlsError(error) {
            let root = url.sslRootCertificate.map { ", sslrootcert=\($0)" } ?? ""
            let check =
                url.sslMode == .verifyFull
                ? "; the server's certificate must be signed by a CA of sslrootcert and name \(url.host)" : ""
            description = "the TLS handshake failed (sslmode=\(url.sslMode.rawValue)\(root)\(check)): \(tlsError)"
        } else if let message = psql?.serverInfo?[.message] {
            var hints: [String] = []
            if psql?.serverInfo?[.sqlState] == "28P01", let source = password.source {
                hints.append("the password came from \(source)")
            }
            if url.sslMode == .disable && message.contains("no encryption") {
                hints.append("the server takes only TLS connections here: use sslmode=require or stronger")
            }
            description = "PostgreSQL: \(message)" + (hints.isEmpty ? "" : " (\(hints.joined(separator: "; ")))")
        } else {
            description = PostgresTokenStore.describe(error)
        }
    }

    /// The TLS library's error in `error` (or the one postgres-nio wrapped), if it is one.
    static func tlsError(_ error: any Error) -> (any Error)? {
        for candidate in [error, (error as? PSQLError)?.underlying].compactMap({ $0 }) {
            if candidate is NIOSSLError || candidate is BoringSSLError || candidate is NIOSSLExtraError {
                return candidate
            }
        }
        return nil
    }
}

/// The server closed the connection before the session started.
struct ClosedDuringStartup: Error, CustomStringConvertible {
    var description: String { "the server closed the connection during the session's startup" }
}

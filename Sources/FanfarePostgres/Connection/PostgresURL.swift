import FanfareStorage
import Foundation

/// A `postgres://user[:password]@host[:port][/database][?sslmode=…&sslrootcert=…]` URL, read as libpq reads one
/// (the subset Fanfare supports: TCP hosts, `sslmode` and `sslrootcert`). Every message it makes names the URL
/// `redacted`, never with its password.
struct PostgresURL: Sendable, Equatable {
    var host: String
    var port: Int
    var user: String
    /// The URL's password (percent-decoded); nil when it has none or an empty one (libpq then looks elsewhere:
    /// `PostgresPasswordLookup`).
    var password: String?
    /// nil: the server's default (the database named after the user).
    var database: String?
    var sslMode: PostgresSSLMode
    /// `sslrootcert`: a PEM file of the certificates that may sign the server's, or `system` for the system's trust
    /// store; nil when not given.
    var sslRootCertificate: String?

    /// The query parameters this reader knows; any other is refused by name.
    static let knownParameters = ["sslmode", "sslrootcert"]

    /// libpq's default: TLS when the server offers it, plaintext when it does not.
    static let defaultSSLMode = PostgresSSLMode.prefer

    /// Reads `url`; a `.storage` error says what is wrong (the URL redacted).
    init(parsing url: String) throws(RegistryError) {
        let shown = Self.redacted(url)
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            scheme == "postgres" || scheme == "postgresql"
        else { throw .storage("'\(shown)' is not a postgres:// URL") }
        guard let host = components.host, !host.isEmpty else { throw .storage("'\(shown)' names no host") }
        guard let user = components.user, !user.isEmpty else { throw .storage("'\(shown)' names no user") }
        let port = components.port ?? 5432
        guard (1...65_535).contains(port) else { throw .storage("'\(shown)': port \(port) is out of range") }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        // An IPv6 address comes bracketed ([::1]); connecting, TLS and the password file want it bare.
        self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        self.port = port
        self.user = user
        self.password = components.password.flatMap { $0.isEmpty ? nil : $0 }
        self.database = path.isEmpty ? nil : path
        let parameters = try Self.parameters(components.queryItems ?? [], shown: shown)
        if let mode = parameters["sslmode"] {
            guard let known = PostgresSSLMode(rawValue: mode) else {
                let modes = PostgresSSLMode.allCases.map(\.rawValue).joined(separator: ", ")
                throw .storage("'\(shown)': unknown sslmode '\(mode)' (known: \(modes))")
            }
            sslMode = known
        } else {
            sslMode = Self.defaultSSLMode
        }
        sslRootCertificate = parameters["sslrootcert"]
        if sslRootCertificate == "" { throw .storage("'\(shown)': sslrootcert is empty (give a PEM file or system)") }
        if sslRootCertificate == "system" && sslMode != .verifyFull {
            // As libpq: any public CA can sign a certificate for some name, so the name must be checked.
            throw .storage("'\(shown)': sslrootcert=system needs sslmode=verify-full")
        }
        if sslMode.verifiesChain && sslRootCertificate == nil {
            throw .storage(
                "'\(shown)': sslmode=\(sslMode.rawValue) needs sslrootcert=FILE (the PEM certificate of the CA that "
                    + "signed the server's certificate) or sslrootcert=system (the system's trusted CAs)")
        }
    }

    /// The query's parameters by name, each known and given once.
    private static func parameters(
        _ items: [URLQueryItem], shown: String
    ) throws(RegistryError) -> [String: String] {
        var parameters: [String: String] = [:]
        for item in items {
            guard knownParameters.contains(item.name) else {
                let known = knownParameters.joined(separator: ", ")
                if item.name.lowercased() == "password" {
                    throw .storage(
                        "'\(shown)': a password parameter is not read; give the password in the URL's user part "
                            + "(postgres://user:password@host), in PGPASSWORD or in the password file (~/.pgpass)")
                }
                throw .storage("'\(shown)': unknown parameter '\(item.name)' (known: \(known))")
            }
            guard parameters[item.name] == nil else { throw .storage("'\(shown)': \(item.name) is given twice") }
            parameters[item.name] = item.value ?? ""
        }
        return parameters
    }

    /// `url` for messages and logs: its password replaced by `***`, and so is a `password=` parameter's value.
    /// Found by hand, never by a URL parser: everything between `://` and the last `@` is user information. A
    /// parser can read a password with a `/` or `#` as a port and a path (`postgres://u:123/x@h/db`) and find
    /// no password to hide (review M6).
    static func redacted(_ url: String) -> String {
        redactedPasswordParameters(redactedUserInformation(url))
    }

    /// The user information's password (after its first `:`) replaced by `***`, found without parsing the URL.
    static func redactedUserInformation(_ url: String) -> String {
        guard let schemeEnd = url.range(of: "://") else { return url }
        let rest = url[schemeEnd.upperBound...]
        guard let at = rest.lastIndex(of: "@") else { return url }
        let userInformation = rest[..<at]
        guard let colon = userInformation.firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + ":***" + String(url[at...])
    }

    /// Each `password=` query value replaced by `***` (case-insensitive name; up to the next `&` or `#`).
    static func redactedPasswordParameters(_ url: String) -> String {
        var redacted = ""
        var rest = Substring(url)
        while let found = rest.range(of: "password=", options: .caseInsensitive) {
            let before =
                found.lowerBound == rest.startIndex ? redacted.last : rest[rest.index(before: found.lowerBound)]
            redacted += rest[..<found.upperBound]
            rest = rest[found.upperBound...]
            guard before == "?" || before == "&" else { continue }
            let valueEnd = rest.firstIndex { $0 == "&" || $0 == "#" } ?? rest.endIndex
            redacted += "***"
            rest = rest[valueEnd...]
        }
        return redacted + rest
    }
}

/// libpq's `sslmode` values Fanfare supports: how much TLS a connection needs and what it checks.
enum PostgresSSLMode: String, Sendable, CaseIterable {
    /// Plaintext only.
    case disable
    /// TLS when the server offers it, else plaintext; the certificate is not checked (unless sslrootcert is given).
    case prefer
    /// TLS or no connection; the certificate is not checked (unless sslrootcert is given, as libpq does).
    case require
    /// TLS; the server's certificate must chain to sslrootcert (its name is not checked).
    case verifyCA = "verify-ca"
    /// TLS; the server's certificate must chain to sslrootcert and name the URL's host (a DNS name, or an IP
    /// address in its subject alternative names).
    case verifyFull = "verify-full"

    /// Whether the mode itself requires a checked certificate chain.
    var verifiesChain: Bool { self == .verifyCA || self == .verifyFull }
}

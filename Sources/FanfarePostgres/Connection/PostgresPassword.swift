import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What a password lookup reads besides the URL: environment variables (`PGPASSWORD`, `PGPASSFILE`) and the home
/// directory (`~/.pgpass`). Passed in, so tests give their own instead of changing the process's.
public struct PostgresEnvironment: Sendable {
    public var variables: [String: String]
    /// Where `~/.pgpass` is; nil: no default password file.
    public var homeDirectory: String?

    public init(variables: [String: String], homeDirectory: String?) {
        self.variables = variables
        self.homeDirectory = homeDirectory
    }

    /// This process's environment; the home directory from `HOME`, else the user's account.
    public static var current: PostgresEnvironment {
        let variables = ProcessInfo.processInfo.environment
        var home = variables["HOME"].flatMap { $0.isEmpty ? nil : $0 }
        if home == nil, let account = getpwuid(getuid()), let directory = account.pointee.pw_dir {
            home = String(cString: directory)
        }
        return PostgresEnvironment(variables: variables, homeDirectory: home)
    }
}

/// A connection's password and where it was found, as libpq finds it: the URL's, else `PGPASSWORD`, else the
/// first matching line of the password file (`PGPASSFILE`, default `~/.pgpass`).
struct PostgresPassword: Sendable, Equatable {
    /// nil: none found (a server that asks for one refuses the connection).
    var password: String?
    /// Where `password` came from, for messages ("the URL", "PGPASSWORD", "the password file …"); nil with none.
    var source: String?
    /// Why the password file was not used, when it exists but could not be (logged as a warning).
    var passfileProblem: String?
    /// What the password file gave when no password was found (said when the server asks for one).
    var passfileOutcome: String?

    static func lookUp(for url: PostgresURL, in environment: PostgresEnvironment) -> PostgresPassword {
        if let password = url.password { return PostgresPassword(password: password, source: "the URL") }
        if let password = environment.variables["PGPASSWORD"], !password.isEmpty {
            return PostgresPassword(password: password, source: "PGPASSWORD")
        }
        guard let path = passfilePath(in: environment) else {
            return PostgresPassword(passfileOutcome: "no password file (neither PGPASSFILE nor a home directory)")
        }
        let key = PostgresPassfile.Key(
            host: url.host, port: String(url.port), database: url.database ?? url.user, user: url.user)
        switch PostgresPassfile.read(path) {
        case .missing: return PostgresPassword(passfileOutcome: "no password file \(path)")
        case .unusable(let problem): return PostgresPassword(passfileProblem: problem, passfileOutcome: problem)
        case .lines(let lines):
            guard let password = PostgresPassfile.password(for: key, in: lines) else {
                let wanted = "\(key.host):\(key.port):\(key.database):\(key.user)"
                return PostgresPassword(passfileOutcome: "no line of the password file \(path) matches \(wanted)")
            }
            return PostgresPassword(password: password, source: "the password file \(path)")
        }
    }

    /// `PGPASSFILE` if set, else `~/.pgpass`.
    static func passfilePath(in environment: PostgresEnvironment) -> String? {
        if let path = environment.variables["PGPASSFILE"], !path.isEmpty { return path }
        guard let home = environment.homeDirectory else { return nil }
        return (home.hasSuffix("/") ? home : home + "/") + ".pgpass"
    }
}

/// libpq's password file: lines `host:port:database:user:password`, `*` matching any value of a field, `\:` and
/// `\\` escaping, `#` starting a comment line; the first line that matches wins. As libpq, a file that is not a
/// plain file, or that its group or others may read or write, is not read at all.
enum PostgresPassfile {
    /// The fields a line is matched on.
    struct Key: Equatable {
        var host: String
        var port: String
        var database: String
        var user: String
    }

    enum Contents: Equatable {
        /// No such file: no password from it, nothing to say.
        case missing
        /// There but not used; why.
        case unusable(String)
        case lines([Substring])
    }

    static func read(_ path: String) -> Contents {
        var status = stat()
        guard stat(path, &status) == 0 else {
            if errno == ENOENT || errno == ENOTDIR { return .missing }
            return .unusable("the password file \(path) cannot be read: \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            return .unusable("the password file \(path) was not read: it is not a plain file")
        }
        let groupOrOthers = status.st_mode & (S_IRWXG | S_IRWXO)
        guard groupOrOthers == 0 else {
            return .unusable(
                "the password file \(path) was not read: its group or others may access it (mode "
                    + String(status.st_mode & 0o777, radix: 8) + "); make it 0600 (chmod 0600), as libpq requires")
        }
        guard let data = FileManager.default.contents(atPath: path), let text = String(bytes: data, encoding: .utf8)
        else { return .unusable("the password file \(path) cannot be read (or is not UTF-8)") }
        return .lines(text.split(omittingEmptySubsequences: true) { $0 == "\n" || $0 == "\r\n" || $0 == "\r" })
    }

    /// The password of the first line matching `key`; nil if none does.
    static func password(for key: PostgresPassfile.Key, in lines: [Substring]) -> String? {
        for line in lines where !line.hasPrefix("#") {
            let fields = fields(of: line)
            // Four fields to match and the password; a password's own unescaped `:` ends it (as in libpq).
            guard fields.count >= 5 else { continue }
            let wanted = [key.host, key.port, key.database, key.user]
            let matches = zip(fields.prefix(4), wanted).allSatisfy { field, value in
                field.isWildcard || field.text == value
            }
            if matches { return fields[4].text.isEmpty ? nil : fields[4].text }
        }
        return nil
    }

    struct Field {
        /// The field with its escapes removed.
        var text: String
        /// The field was exactly an unescaped `*`.
        var isWildcard: Bool
    }

    /// A line split at its unescaped `:`; `\x` stands for `x`.
    static func fields(of line: Substring) -> [Field] {
        var fields: [Field] = []
        var text = ""
        var escaped = false
        var raw = ""
        for character in line {
            if escaped {
                text.append(character)
                raw.append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
                raw.append(character)
            } else if character == ":" {
                fields.append(Field(text: text, isWildcard: raw == "*"))
                (text, raw) = ("", "")
            } else {
                text.append(character)
                raw.append(character)
            }
        }
        fields.append(Field(text: text, isWildcard: raw == "*"))
        return fields
    }
}

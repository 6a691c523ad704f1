import FanfareApps
import FanfareTLS
internal import Foundation

/// What an API key may do. `admin` implies every other scope.
package enum Scope: String, Sendable, CaseIterable, Comparable {
    case register, publish, read, admin

    package static func < (a: Scope, b: Scope) -> Bool { a.rawValue < b.rawValue }
}

/// The caller a request was authenticated as.
package struct Principal: Sendable, Equatable {
    /// A short fingerprint of the key (the first 8 bytes of its SHA-256, hex): safe to log and to scope
    /// idempotency keys by; never the key itself.
    package var id: String
    package var scopes: Set<Scope>
    /// The apps this key reaches (`apps=` in the keys file); nil: every app.
    package var apps: Set<String>? = nil

    package func allows(_ scope: Scope) -> Bool { scopes.contains(.admin) || scopes.contains(scope) }

    /// Whether requests of this key may act on (or even learn of) app `id`.
    package func reaches(app id: String) -> Bool { apps?.contains(id) ?? true }

    /// The caller of a service that runs without API keys (loopback only).
    package static let anonymous = Principal(id: "anonymous", scopes: [.admin])

    /// The caller of the request being answered (set by `AuthenticationMiddleware`; anonymous without API keys).
    @TaskLocal package static var current = Principal.anonymous
}

/// Why an API key file cannot be used. Never contains a key.
public struct APIKeyFileError: Error, Sendable, CustomStringConvertible {
    public var path: String
    public var line: Int?
    public var problem: String

    public var description: String {
        if let line { return "--api-keys \(path), line \(line): \(problem)" }
        return "--api-keys \(path): \(problem)"
    }
}

/// The API keys a service accepts (`--api-keys FILE`): one key per line followed by its scopes, e.g.
///
///     # key                                 scopes
///     4f6c9a1e0b7d42c3a8e5f1d2b3c4a5e6      register,publish,read
///     0a1b2c3d4e5f60718293a4b5c6d7e8f9      admin
///
/// Keys are 16 to 256 visible ASCII characters. Only their SHA-256 digests are kept in memory; a presented key
/// is hashed and compared with every digest in constant time, so timing says nothing about which bytes
/// matched.
public struct APIKeyring: Sendable {
    private struct Entry: Sendable {
        var digest: [UInt8]
        var principal: Principal
    }

    private let entries: [Entry]

    public var count: Int { entries.count }

    public static let minimumKeyLength = 16
    public static let maximumKeyLength = 256

    /// Parses the key file's text (`path` only names it in errors).
    public init(parsing text: String, path: String) throws(APIKeyFileError) {
        var entries: [Entry] = []
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var line = rawLine
            if line.hasSuffix("\r") { line.removeLast() }
            let trimmed = line.drop { $0 == " " || $0 == "\t" }
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let fields = trimmed.split(whereSeparator: { $0 == " " || $0 == "\t" })
            let lineNumber = number + 1
            guard fields.count == 2 || fields.count == 3 else {
                throw APIKeyFileError(
                    path: path, line: lineNumber,
                    problem: "expected a key and its scopes (comma-separated: register, publish, read, admin), "
                        + "optionally followed by apps=ID,ID; found \(fields.count) fields")
            }
            let apps = try fields.count == 3 ? Self.apps(fields[2], path: path, line: lineNumber) : nil
            let key = fields[0]
            let keyBytes = Array(key.utf8)
            guard keyBytes.count >= Self.minimumKeyLength && keyBytes.count <= Self.maximumKeyLength else {
                throw APIKeyFileError(
                    path: path, line: lineNumber,
                    problem:
                        "a key must be \(Self.minimumKeyLength) to \(Self.maximumKeyLength) characters long (this one has \(keyBytes.count))"
                )
            }
            guard keyBytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw APIKeyFileError(path: path, line: lineNumber, problem: "a key must be visible ASCII characters")
            }
            var scopes = Set<Scope>()
            for name in fields[1].split(separator: ",", omittingEmptySubsequences: false) {
                guard let scope = Scope(rawValue: String(name)) else {
                    throw APIKeyFileError(
                        path: path, line: lineNumber,
                        problem: "unknown scope '\(name.prefix(32))' (scopes are register, publish, read, admin)")
                }
                scopes.insert(scope)
            }
            let digest = Digest.sha256(keyBytes)
            if entries.contains(where: { Digest.constantTimeEqual($0.digest, digest) }) {
                throw APIKeyFileError(path: path, line: lineNumber, problem: "this key is listed twice")
            }
            let id = digest.prefix(8).map { String($0, radix: 16).leftPadded(to: 2) }.joined()
            entries.append(Entry(digest: digest, principal: Principal(id: id, scopes: scopes, apps: apps)))
        }
        guard !entries.isEmpty else {
            throw APIKeyFileError(path: path, line: nil, problem: "the file lists no keys")
        }
        self.entries = entries
    }

    /// `apps=scores,league`: the app ids a key reaches.
    private static func apps(_ field: Substring, path: String, line: Int) throws(APIKeyFileError) -> Set<String> {
        guard field.hasPrefix("apps=") else {
            throw APIKeyFileError(
                path: path, line: line, problem: "the third field must be apps=ID,ID (the apps this key reaches)")
        }
        var apps = Set<String>()
        for name in field.dropFirst(5).split(separator: ",", omittingEmptySubsequences: false) {
            guard AppDefinition.isValidID(String(name)) else {
                throw APIKeyFileError(
                    path: path, line: line, problem: "'\(name.prefix(64))' is not an app id (a-z, 0-9, '-', '_')")
            }
            apps.insert(String(name))
        }
        return apps
    }

    /// Reads and parses a key file.
    public init(contentsOfFile path: String) throws(APIKeyFileError) {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw APIKeyFileError(
                path: path, line: nil, problem: "cannot read it (\((error as NSError).localizedDescription))")
        }
        try self.init(parsing: text, path: path)
    }

    /// The principal of a presented key, or nil if no key matches. Compares against every key.
    package func principal(presenting key: some Collection<UInt8>) -> Principal? {
        let digest = Digest.sha256(key)
        var found: Principal?
        for entry in entries where Digest.constantTimeEqual(entry.digest, digest) { found = entry.principal }
        return found
    }
}

extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

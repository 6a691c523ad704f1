import FanfareStorage
import FanfareTLS
internal import Foundation

/// Reads an apps file (JSON; fields beyond these are ignored):
///
///     {"apps": [{"id": "scores", "bundle_id": "com.example.scores", "team_id": "TEAM123456", "default": true,
///                "keys": [{"key_id": "ABC123DEFG", "file": "keys/AuthKey_ABC123DEFG.p8",
///                          "environments": ["production", "sandbox"]}],
///                "endpoints": {"production": "https://127.0.0.1:2197", "sandbox": "https://127.0.0.1:2198"},
///                "ca_file": "ca.pem"}]}
///
/// A key's PEM comes from `file` (relative to the apps file's directory) or from the environment variable `env`;
/// `topics` makes it a topic-specific key; `team_id` on a key overrides the app's. `channel_management` names the
/// channel-management endpoints per environment like `endpoints`.
extension AppCatalog {
    /// Reads and checks `path`; key files and the CA file are relative to its directory. `environment` is where
    /// `env` keys are looked up (nil: the process's).
    public static func load(
        path: String, environment: [String: String]? = nil
    ) throws(AppCatalogError) -> AppCatalog {
        let environment = environment ?? ProcessInfo.processInfo.environment
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw AppCatalogError(source: path, problem: "cannot be read (\(Self.reason(error)))")
        }
        let directory = (path as NSString).deletingLastPathComponent
        return try parse(Array(data), source: path, directory: directory, environment: environment)
    }

    /// Parses and checks an apps file's bytes.
    public static func parse(
        _ bytes: [UInt8], source: String, directory: String, environment: [String: String]
    ) throws(AppCatalogError) -> AppCatalog {
        let file: FileShape
        do {
            file = try JSONDecoder().decode(FileShape.self, from: Data(bytes))
        } catch let error as DecodingError {
            throw Self.describe(error, source: source)
        } catch {
            throw AppCatalogError(source: source, problem: "is not JSON (\(error))")
        }
        let reader = KeyReader(source: source, directory: directory, environment: environment)
        var apps: [AppDefinition] = []
        for (index, app) in file.apps.enumerated() {
            apps.append(try reader.app(app, field: "apps[\(index)]"))
        }
        return try AppCatalog(apps: apps, source: source)
    }

    private static func reason(_ error: any Error) -> String {
        if let underlying = (error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError {
            return String(cString: strerror(Int32(underlying.code)))
        }
        return (error as NSError).localizedDescription
    }

    /// A decoding error as the field it is about and what is wrong, never the file's text.
    private static func describe(_ error: DecodingError, source: String) -> AppCatalogError {
        func path(_ context: DecodingError.Context, adding key: (any CodingKey)? = nil) -> String? {
            var text = ""
            for component in context.codingPath + (key.map { [$0] } ?? []) {
                if let index = component.intValue {
                    text += "[\(index)]"
                } else {
                    text += (text.isEmpty ? "" : ".") + component.stringValue
                }
            }
            return text.isEmpty ? nil : text
        }
        switch error {
        case .keyNotFound(let key, let context):
            return AppCatalogError(source: source, field: path(context, adding: key), problem: "is missing")
        case .typeMismatch(let type, let context):
            return AppCatalogError(source: source, field: path(context), problem: "must be \(Self.jsonName(type))")
        case .valueNotFound(let type, let context):
            return AppCatalogError(source: source, field: path(context), problem: "must be \(Self.jsonName(type))")
        case .dataCorrupted(let context):
            return AppCatalogError(
                source: source, field: path(context), problem: "is not valid JSON (\(context.debugDescription))")
        @unknown default:
            return AppCatalogError(source: source, problem: "cannot be read as an apps file")
        }
    }

    private static func jsonName(_ type: Any.Type) -> String {
        if type == String.self { return "a string" }
        if type == Bool.self { return "true or false" }
        if type is [Any].Type || "\(type)".hasPrefix("Array") { return "a list" }
        return "an object"
    }
}

/// The file's JSON, as written.
private struct FileShape: Decodable {
    var apps: [AppShape]
}

private struct AppShape: Decodable {
    var id: String
    var bundleID: String
    var teamID: String
    var isDefault: Bool?
    var keys: [KeyShape]
    var endpoints: [String: String]?
    var channelManagement: [String: String]?
    var caFile: String?

    enum CodingKeys: String, CodingKey {
        case id, keys, endpoints
        case bundleID = "bundle_id"
        case teamID = "team_id"
        case isDefault = "default"
        case channelManagement = "channel_management"
        case caFile = "ca_file"
    }
}

private struct KeyShape: Decodable {
    var keyID: String
    var teamID: String?
    var file: String?
    var env: String?
    var environments: [String]
    var topics: [String]?

    enum CodingKeys: String, CodingKey {
        case file, env, environments, topics
        case keyID = "key_id"
        case teamID = "team_id"
    }
}

/// Turns the file's shapes into checked definitions, loading each key.
private struct KeyReader {
    var source: String
    var directory: String
    var environment: [String: String]

    func fail(_ field: String, _ problem: String) -> AppCatalogError {
        AppCatalogError(source: source, field: field, problem: problem)
    }

    func resolve(_ path: String) -> String {
        path.hasPrefix("/") || directory.isEmpty ? path : (directory as NSString).appendingPathComponent(path)
    }

    func app(_ shape: AppShape, field: String) throws(AppCatalogError) -> AppDefinition {
        guard Self.isBundleID(shape.bundleID) else {
            throw fail("\(field).bundle_id", "'\(shape.bundleID.prefix(80))' is not a bundle id like com.example.app")
        }
        guard AppleIdentifier.isValid(shape.teamID) else {
            throw fail("\(field).team_id", "'\(shape.teamID.prefix(80))' must be 10 characters of A-Z and 0-9")
        }
        guard !shape.keys.isEmpty else { throw fail("\(field).keys", "lists no key") }
        var keys: [ProviderKeyDefinition] = []
        for (index, key) in shape.keys.enumerated() {
            let loaded = try self.key(key, appTeam: shape.teamID, field: "\(field).keys[\(index)]")
            if keys.contains(where: { $0.keyID == loaded.keyID }) {
                throw fail("\(field).keys[\(index)].key_id", "\(loaded.keyID) is listed twice")
            }
            keys.append(loaded)
        }
        var caFile: String?
        if let file = shape.caFile {
            caFile = resolve(file)
            if let problem = Self.unreadable(caFile!) { throw fail("\(field).ca_file", "\(caFile!): \(problem)") }
        }
        return AppDefinition(
            id: shape.id, bundleID: shape.bundleID, teamID: shape.teamID, isDefault: shape.isDefault ?? false,
            keys: keys, endpoints: try endpoints(shape.endpoints, field: "\(field).endpoints"),
            channelManagementEndpoints: try endpoints(shape.channelManagement, field: "\(field).channel_management"),
            caFile: caFile)
    }

    func endpoints(
        _ given: [String: String]?, field: String
    ) throws(AppCatalogError) -> [APNsEnvironment: AppEndpoint] {
        var endpoints: [APNsEnvironment: AppEndpoint] = [:]
        for (name, url) in (given ?? [:]).sorted(by: { $0.key < $1.key }) {
            guard let environment = Self.environment(name) else {
                throw fail("\(field).\(name)", "is not an environment: use production or sandbox")
            }
            switch AppEndpoint.parse(url) {
            case .success(let endpoint): endpoints[environment] = endpoint
            case .failure(let problem): throw fail("\(field).\(name)", problem)
            }
        }
        return endpoints
    }

    func key(_ shape: KeyShape, appTeam: String, field: String) throws(AppCatalogError) -> ProviderKeyDefinition {
        guard AppleIdentifier.isValid(shape.keyID) else {
            throw fail("\(field).key_id", "'\(shape.keyID.prefix(80))' must be 10 characters of A-Z and 0-9")
        }
        let team = shape.teamID ?? appTeam
        guard AppleIdentifier.isValid(team) else {
            throw fail("\(field).team_id", "'\(team.prefix(80))' must be 10 characters of A-Z and 0-9")
        }
        var environments: Set<APNsEnvironment> = []
        for (index, name) in shape.environments.enumerated() {
            guard let environment = Self.environment(name) else {
                throw fail("\(field).environments[\(index)]", "'\(name.prefix(40))' is not production or sandbox")
            }
            environments.insert(environment)
        }
        guard !environments.isEmpty else {
            throw fail("\(field).environments", "lists none: give production, sandbox or both")
        }
        if let topics = shape.topics {
            guard !topics.isEmpty else { throw fail("\(field).topics", "is empty: leave it out for a team key") }
            for (index, topic) in topics.enumerated() where !Self.isBundleID(topic) {
                throw fail("\(field).topics[\(index)]", "'\(topic.prefix(80))' is not a bundle id")
            }
        }
        let (source, pem) = try material(shape, field: field)
        let signer: ProviderTokenSigner
        do {
            signer = try ProviderTokenSigner(
                privateKeyPEM: String(decoding: pem, as: UTF8.self), source: source.description, keyID: shape.keyID,
                teamID: team)
        } catch {
            throw fail(field, "\(error)")
        }
        let fingerprint = pem.withUnsafeBytes { Digest.sha256($0) }.prefix(8).map { byte in
            String(byte, radix: 16).count == 1 ? "0" + String(byte, radix: 16) : String(byte, radix: 16)
        }.joined()
        return ProviderKeyDefinition(
            keyID: shape.keyID, teamID: team, source: source, environments: environments, topics: shape.topics,
            signer: signer, fingerprint: fingerprint)
    }

    /// The key's PEM bytes, from its file or its environment variable (exactly one of them).
    func material(
        _ shape: KeyShape, field: String
    ) throws(AppCatalogError) -> (ProviderKeyDefinition.Source, [UInt8]) {
        switch (shape.file, shape.env) {
        case (let file?, nil):
            let path = resolve(file)
            do {
                return (.file(path), Array(try Data(contentsOf: URL(fileURLWithPath: path))))
            } catch {
                throw fail("\(field).file", "\(path) cannot be read (\(Self.unreadable(path) ?? "unreadable"))")
            }
        case (nil, let name?):
            guard let text = environment[name], !text.isEmpty else {
                throw fail("\(field).env", "$\(name) is not set (it must hold the .p8's PEM text)")
            }
            return (.environment(name), Array(text.utf8))
        case (nil, nil):
            throw fail(field, "needs \"file\" (a .p8 path) or \"env\" (a variable holding its PEM text)")
        case (.some, .some):
            throw fail(field, "gives both \"file\" and \"env\": give one")
        }
    }

    static func environment(_ name: String) -> APNsEnvironment? {
        APNsEnvironment.allCases.first { $0.description == name.lowercased() }
    }

    static func unreadable(_ path: String) -> String? {
        guard FileManager.default.isReadableFile(atPath: path) else {
            return FileManager.default.fileExists(atPath: path) ? "not readable" : "no such file"
        }
        return nil
    }

    /// Reverse-DNS with at least two labels of letters, digits, '-' and '_' (Apple allows these in bundle ids).
    static func isBundleID(_ text: String) -> Bool {
        let labels = text.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, text.utf8.count <= 155 else { return false }
        return labels.allSatisfy { label in
            !label.isEmpty
                && label.utf8.allSatisfy { byte in
                    (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                        || byte == 0x2D || byte == 0x5F
                }
        }
    }
}

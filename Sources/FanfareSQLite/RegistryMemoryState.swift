import FanfareCore
import FanfareStorage

/// What the store keeps in memory next to the database: where each token's row is, and the ids of channel names
/// and apps. Only touched inside a database transaction (the store holds its lock for the whole transaction);
/// changes made during one are logged and undone if it does not commit, so memory always matches the file.
struct RegistryMemoryState {
    var tokens = TokenIndex()
    private(set) var channelIDs: [String: Int64] = [:]
    private(set) var appIDs: [AppKey: Int64] = [:]
    /// Set by `close()`; every later call fails instead of touching the closed connection.
    var isClosed = false

    private var undoLog: [Change] = []

    private enum Change {
        case insertedToken(hash: Int, id: Int64)
        case removedToken(hash: Int, id: Int64)
        case addedChannel(String)
        case removedChannel(String, Int64)
        case addedApp(AppKey)
    }

    mutating func insertToken(hash: Int, id: Int64) {
        tokens.insert(hash: hash, id: id)
        undoLog.append(.insertedToken(hash: hash, id: id))
    }

    mutating func removeToken(hash: Int, id: Int64) {
        tokens.remove(hash: hash, id: id)
        undoLog.append(.removedToken(hash: hash, id: id))
    }

    mutating func addChannel(_ name: String, id: Int64) {
        channelIDs[name] = id
        undoLog.append(.addedChannel(name))
    }

    mutating func removeChannel(_ name: String) {
        guard let id = channelIDs.removeValue(forKey: name) else { return }
        undoLog.append(.removedChannel(name, id))
    }

    mutating func addApp(_ key: AppKey, id: Int64) {
        appIDs[key] = id
        undoLog.append(.addedApp(key))
    }

    /// The app rows `scope` covers (nil: every app, no filter needed).
    func appIDs(in scope: RegistryScope) -> [Int64]? {
        guard !scope.isEverything else { return nil }
        return appIDs.filter { scope.contains(bundleID: $0.key.bundleID, environment: $0.key.environment) }.map(\.value)
    }

    /// A SQL condition on `column` for `scope` (`app_id IN (...)`; empty for every app). Ids are integers the store
    /// assigned, so writing them inline is safe.
    func appCondition(_ scope: RegistryScope, column: String = "app_id") -> String {
        guard let ids = appIDs(in: scope) else { return "" }
        return " AND \(column) IN (\(ids.isEmpty ? "NULL" : ids.map(String.init).joined(separator: ",")))"
    }

    /// The transaction committed: keep everything.
    mutating func commit() {
        undoLog.removeAll(keepingCapacity: undoLog.count <= 1024)
    }

    /// The transaction rolled back: undo every change since the last commit, newest first.
    mutating func rollBack() {
        for change in undoLog.reversed() {
            switch change {
            case .insertedToken(let hash, let id): tokens.remove(hash: hash, id: id)
            case .removedToken(let hash, let id): tokens.insert(hash: hash, id: id)
            case .addedChannel(let name): channelIDs.removeValue(forKey: name)
            case .removedChannel(let name, let id): channelIDs[name] = id
            case .addedApp(let key): appIDs.removeValue(forKey: key)
            }
        }
        undoLog.removeAll()
    }
}

/// Row ids of the stored tokens by `DeviceToken.hashValue`: the registry's only index by token.
///
/// Why not an index in SQLite: tokens are random, so every registration inserts at a random place in any index
/// keyed by them. With a million tokens, a 10k batch dirtied most pages of such an index (20-35 MB of WAL per
/// commit) and registration ran at ~50k/s; without one, new rows only append. This map costs about 32 bytes per
/// token and is rebuilt from the table at open (the hash is per process, so nothing hash-related is stored).
/// Hashes may collide: a hash gives candidate ids, and the caller checks the token bytes in the row.
struct TokenIndex {
    /// The first id for each hash.
    private var first: [Int: Int64] = [:]
    /// Further ids for hashes that several tokens share (almost always empty).
    private var more: [Int: [Int64]] = [:]
    private(set) var count = 0

    static func hash(_ token: DeviceToken) -> Int { token.hashValue }

    mutating func reserveCapacity(_ capacity: Int) { first.reserveCapacity(capacity) }

    /// The first candidate id for `hash` that satisfies `matches`, or nil.
    func firstID(hash: Int, where matches: (Int64) throws -> Bool) rethrows -> Int64? {
        guard let id = first[hash] else { return nil }
        if try matches(id) { return id }
        guard let others = more[hash] else { return nil }
        for id in others where try matches(id) { return id }
        return nil
    }

    mutating func insert(hash: Int, id: Int64) {
        count += 1
        if first[hash] == nil {
            first[hash] = id
        } else {
            more[hash, default: []].append(id)
        }
    }

    mutating func remove(hash: Int, id: Int64) {
        if first[hash] == id {
            if var others = more[hash], let promoted = others.popLast() {
                first[hash] = promoted
                more[hash] = others.isEmpty ? nil : others
            } else {
                first.removeValue(forKey: hash)
            }
        } else if var others = more[hash], let position = others.firstIndex(of: id) {
            others.remove(at: position)
            more[hash] = others.isEmpty ? nil : others
        } else {
            return
        }
        count -= 1
    }
}

/// (bundle id, environment): the key of the `apps` table.
struct AppKey: Hashable, Sendable {
    var bundleID: String
    var environment: APNsEnvironment

    init(_ bundleID: String, _ environment: APNsEnvironment) {
        self.bundleID = bundleID
        self.environment = environment
    }
}

import FanfareCore
import Synchronization

/// A broadcast channel as APNs keeps it (apns-spec.md §8.2): created for one app in one environment, with a
/// storage policy that never changes.
public struct BroadcastChannel: Sendable, Equatable {
    public var id: BroadcastChannelID
    public var environment: SimulatorConfiguration.Environment
    public var bundleID: String
    /// `message-storage-policy`: 0 no message stored (`apns-expiration` must be 0), 1 most recent stored.
    public var storagePolicy: Int

    public init(
        id: BroadcastChannelID, environment: SimulatorConfiguration.Environment, bundleID: String, storagePolicy: Int
    ) {
        self.id = id
        self.environment = environment
        self.bundleID = bundleID
        self.storagePolicy = storagePolicy
    }
}

/// Why a channel could not be created.
public enum BroadcastChannelError: Error, Equatable, CustomStringConvertible {
    /// `maxChannelsPerApp` channels exist for the app in this environment (400 `CannotCreateChannelConfig`).
    case limitReached(Int)

    public var description: String {
        switch self {
        case .limitReached(let limit): "the app has \(limit) channels in this environment, the most APNs allows"
        }
    }
}

/// The simulator's broadcast channels, shared by the management listener (create, read, list, delete) and the
/// push workers (a broadcast checks its channel). One lock, taken per management request and per broadcast;
/// token pushes never touch it.
///
/// Every id ever issued is remembered (`issued`), so a deleted id is never handed out again, even after a
/// restart on the same state file.
///
/// Changes are saved in groups (group commit): `create` and `delete` change the table and mark it unsaved;
/// the management worker calls `persist()` before any answer leaves (one atomic file replace for every change
/// decided since the last one), and a failed save puts the table back to the file's state (the answers then
/// never leave: the worker resets its connections). One replace per change cost O(channels) each: 10,001
/// creates over one connection took 9 minutes that way; grouped they take seconds. Ids are 16 random bytes in standard
/// base64 (24 characters with `/`, `+`
/// and `=`), as APNs' are.
public final class BroadcastChannels: Sendable {
    private struct State {
        var channels: [BroadcastChannelID: BroadcastChannel] = [:]
        /// Creation order of live channels (for `all-channels`).
        var order: [BroadcastChannelID] = []
        /// Every id ever issued, live or deleted.
        var issued: Set<BroadcastChannelID> = []
        /// Live channels per app and environment (the cap).
        var counts: [AppKey: Int] = [:]

        mutating func insert(_ channel: BroadcastChannel) {
            channels[channel.id] = channel
            order.append(channel.id)
            issued.insert(channel.id)
            counts[AppKey(channel), default: 0] += 1
        }

        mutating func remove(_ channel: BroadcastChannel) {
            channels[channel.id] = nil
            order.removeAll { $0 == channel.id }
            counts[AppKey(channel), default: 1] -= 1
        }
    }

    private struct AppKey: Hashable {
        var environment: SimulatorConfiguration.Environment
        var bundleID: String

        init(_ channel: BroadcastChannel) {
            environment = channel.environment
            bundleID = channel.bundleID
        }

        init(environment: SimulatorConfiguration.Environment, bundleID: String) {
            self.environment = environment
            self.bundleID = bundleID
        }
    }

    /// What both environments' views share: one table, one file, one lock (`sharing(environment:)`).
    private final class Shared: Sendable {
        let state: Mutex<State>
        /// Changes not yet in the file (checked without the lock before every answer the management port sends).
        let unsaved = Atomic<Bool>(false)
        /// Makes a candidate id (random; tests pass their own to see an issued id skipped).
        let makeID: @Sendable () -> BroadcastChannelID

        init(state: State, makeID: @escaping @Sendable () -> BroadcastChannelID) {
            self.state = Mutex(state)
            self.makeID = makeID
        }
    }

    /// The environment this simulator plays: only its channels are visible.
    public let environment: SimulatorConfiguration.Environment
    public let maxChannelsPerApp: Int
    /// Where channels are kept across restarts; nil = memory only.
    public let file: ChannelStateFile?
    private let shared: Shared

    /// Loads `file` when given (a missing file is an empty state; a damaged one throws, naming the file).
    public convenience init(
        environment: SimulatorConfiguration.Environment, maxChannelsPerApp: Int, file: ChannelStateFile?
    ) throws(ChannelStateFileError) {
        try self.init(environment: environment, maxChannelsPerApp: maxChannelsPerApp, file: file, makeID: Self.randomID)
    }

    init(
        environment: SimulatorConfiguration.Environment, maxChannelsPerApp: Int, file: ChannelStateFile?,
        makeID: @escaping @Sendable () -> BroadcastChannelID
    ) throws(ChannelStateFileError) {
        self.environment = environment
        self.maxChannelsPerApp = maxChannelsPerApp
        self.file = file
        var initial = State()
        if let file {
            let saved = try file.load()
            initial.issued = saved.issued
            for channel in saved.channels { initial.insert(channel) }
        }
        shared = Shared(state: initial, makeID: makeID)
    }

    private init(sharing other: BroadcastChannels, environment: SimulatorConfiguration.Environment) {
        self.environment = environment
        maxChannelsPerApp = other.maxChannelsPerApp
        file = other.file
        shared = other.shared
    }

    /// The same channels as seen from `environment`'s host: one table and one file for both environments (two tables
    /// saving to one file would each overwrite the other's changes), each seeing only its own environment's channels.
    public func sharing(environment: SimulatorConfiguration.Environment) -> BroadcastChannels {
        BroadcastChannels(sharing: self, environment: environment)
    }

    /// Creates a channel for `bundleID` in this environment. Throws `limitReached` at the cap, `notSaved` when
    /// the state file cannot be written (then nothing changed).
    public func create(bundleID: String, storagePolicy: Int) throws(BroadcastChannelError) -> BroadcastChannel {
        let result: Result<BroadcastChannel, BroadcastChannelError> = shared.state.withLock { state in
            let count = state.counts[AppKey(environment: environment, bundleID: bundleID)] ?? 0
            guard count < maxChannelsPerApp else { return .failure(.limitReached(maxChannelsPerApp)) }
            var id = shared.makeID()
            while state.issued.contains(id) { id = shared.makeID() }
            let channel = BroadcastChannel(
                id: id, environment: environment, bundleID: bundleID, storagePolicy: storagePolicy)
            state.insert(channel)
            if file != nil { shared.unsaved.store(true, ordering: .releasing) }
            return .success(channel)
        }
        return try result.get()
    }

    /// The channel with `id` if it exists for `bundleID` in this environment.
    public func channel(_ id: BroadcastChannelID, bundleID: String) -> BroadcastChannel? {
        shared.state.withLock { state in
            guard let channel = state.channels[id], channel.environment == environment, channel.bundleID == bundleID
            else { return nil }
            return channel
        }
    }

    /// The storage policy of channel `id` (raw id bytes, as in a header) for the app, or nil when there is no
    /// such channel here. For broadcasts: one lookup under the lock.
    func storagePolicy(ofChannel idBytes: UnsafeRawBufferPointer, bundle: UnsafeRawBufferPointer) -> Int? {
        guard let id = try? BroadcastChannelID(bytes: idBytes) else { return nil }
        return shared.state.withLock { state in
            guard let channel = state.channels[id], channel.environment == environment else { return nil }
            let matches = Array(channel.bundleID.utf8).withUnsafeBytes { $0.equals(bundle) }
            return matches ? channel.storagePolicy : nil
        }
    }

    /// Deletes channel `id`; false when there is no such channel for the app here. The id stays issued.
    public func delete(_ id: BroadcastChannelID, bundleID: String) -> Bool {
        shared.state.withLock { state in
            guard let channel = state.channels[id], channel.environment == environment, channel.bundleID == bundleID
            else {
                return false
            }
            state.remove(channel)
            if file != nil { shared.unsaved.store(true, ordering: .releasing) }
            return true
        }
    }

    /// Changes are waiting for `persist()`.
    public var hasUnsavedChanges: Bool { shared.unsaved.load(ordering: .acquiring) }

    /// Writes the table to the file if it changed since the last save; nil when it is durable now. On failure
    /// the table goes back to the file's last state (the changes since are forgotten: their answers must not
    /// leave) and the problem is returned.
    @discardableResult
    public func persist() -> String? {
        guard let file else { return nil }
        return shared.state.withLock { state -> String? in
            guard shared.unsaved.exchange(false, ordering: .acquiringAndReleasing) else { return nil }
            do {
                try file.save(
                    SavedChannels(channels: state.order.compactMap { state.channels[$0] }, issued: state.issued))
                return nil
            } catch {
                var restored = State()
                if let saved = try? file.load() {
                    restored.issued = saved.issued
                    for channel in saved.channels { restored.insert(channel) }
                }
                // Ids handed out since stay issued: an answer may have been seen by someone.
                restored.issued.formUnion(state.issued)
                state = restored
                return "\(error)"
            }
        }
    }

    /// The app's channels in this environment, oldest first.
    public func list(bundleID: String) -> [BroadcastChannelID] {
        shared.state.withLock { state in
            state.order.filter { id in
                guard let channel = state.channels[id] else { return false }
                return channel.environment == environment && channel.bundleID == bundleID
            }
        }
    }

    /// Live channels over every app and environment in the state (what a restart keeps).
    public var count: Int { shared.state.withLock { $0.channels.count } }

    /// Ids ever issued, live or deleted.
    public var issuedCount: Int { shared.state.withLock { $0.issued.count } }

    /// 16 random bytes in standard base64 with padding (24 characters), like APNs' ids.
    static func randomID() -> BroadcastChannelID {
        var generator = SystemRandomNumberGenerator()
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<16 { bytes[index] = UInt8.random(in: 0...255, using: &generator) }
        let text = Base64.encode(bytes, alphabet: .standard, padded: true)
        // Standard base64 of 16 bytes is always a valid id.
        return try! BroadcastChannelID(text)
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FanfareCore

/// What the state file holds: the live channels (oldest first) and every id ever issued.
public struct SavedChannels: Sendable, Equatable {
    public var channels: [BroadcastChannel]
    public var issued: Set<BroadcastChannelID>

    public init(channels: [BroadcastChannel] = [], issued: Set<BroadcastChannelID> = []) {
        self.channels = channels
        self.issued = issued
    }
}

/// Why the channel state file cannot be used.
public enum ChannelStateFileError: Error, Equatable, CustomStringConvertible {
    /// The file is there but not what `save` writes (the path, the line, what is wrong).
    case damaged(path: String, line: Int, problem: String)
    /// Reading or writing failed (the path and errno's text).
    case io(path: String, problem: String)

    public var description: String {
        switch self {
        case .damaged(let path, let line, let problem):
            "channel state file '\(path)' is damaged at line \(line): \(problem) (move it away to start without channels)"
        case .io(let path, let problem): "channel state file '\(path)': \(problem)"
        }
    }
}

/// The simulator's channels on disk (`channels` in the state directory), so a restarted simulator keeps them
/// and never reuses a deleted id. A text file, one record a line:
///
///     fanfare-simulator-channels 1
///     channel <production|sandbox> <storage policy> <id> <bundle id>
///     deleted <id>
///
/// `save` replaces the file atomically (a temporary file written and fsynced, renamed over the old one, the
/// directory fsynced), so a crash leaves the old state or the new, never a mix. `load` accepts nothing else:
/// a damaged file is an error naming the file and line, never a silent empty state.
public struct ChannelStateFile: Sendable {
    public let path: String
    static let header = "fanfare-simulator-channels 1"

    public init(path: String) {
        self.path = path
    }

    /// The file's channels; an empty state when the file does not exist.
    public func load() throws(ChannelStateFileError) -> SavedChannels {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return SavedChannels() }
            throw .io(path: path, problem: "cannot open: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .io(path: path, problem: "cannot read: \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return try parse(bytes)
    }

    func parse(_ bytes: [UInt8]) throws(ChannelStateFileError) -> SavedChannels {
        guard bytes.last == UInt8(ascii: "\n") else {
            throw .damaged(
                path: path, line: 1 + bytes.count(where: { $0 == UInt8(ascii: "\n") }),
                problem: "the last line is cut short")
        }
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).dropLast()
        var saved = SavedChannels()
        var number = 0
        for line in lines {
            number += 1
            guard let text = String(validating: line, as: UTF8.self) else {
                throw .damaged(path: path, line: number, problem: "not UTF-8 text")
            }
            if number == 1 {
                guard text == Self.header else { throw .damaged(path: path, line: 1, problem: "not '\(Self.header)'") }
                continue
            }
            let fields = text.split(separator: " ", omittingEmptySubsequences: false)
            func channelID(_ field: Substring) throws(ChannelStateFileError) -> BroadcastChannelID {
                do {
                    return try BroadcastChannelID(field)
                } catch {
                    throw .damaged(path: path, line: number, problem: "bad channel id: \(error)")
                }
            }
            switch fields.first {
            case "channel":
                guard fields.count == 5 else {
                    throw .damaged(
                        path: path, line: number, problem: "a channel line is 'channel ENVIRONMENT POLICY ID BUNDLE'")
                }
                guard let environment = SimulatorConfiguration.Environment(rawValue: String(fields[1])) else {
                    throw .damaged(
                        path: path, line: number, problem: "environment '\(fields[1])' is not production or sandbox")
                }
                guard let policy = Int(fields[2]), policy == 0 || policy == 1 else {
                    throw .damaged(path: path, line: number, problem: "storage policy '\(fields[2])' is not 0 or 1")
                }
                let id = try channelID(fields[3])
                guard !fields[4].isEmpty else { throw .damaged(path: path, line: number, problem: "empty bundle id") }
                guard !saved.issued.contains(id) else {
                    throw .damaged(path: path, line: number, problem: "channel \(id) twice")
                }
                saved.channels.append(
                    BroadcastChannel(
                        id: id, environment: environment, bundleID: String(fields[4]), storagePolicy: policy))
                saved.issued.insert(id)
            case "deleted":
                guard fields.count == 2 else {
                    throw .damaged(path: path, line: number, problem: "a deleted line is 'deleted ID'")
                }
                let id = try channelID(fields[1])
                guard !saved.issued.contains(id) else {
                    throw .damaged(path: path, line: number, problem: "channel \(id) twice")
                }
                saved.issued.insert(id)
            default:
                throw .damaged(path: path, line: number, problem: "unknown record '\(fields.first ?? "")'")
            }
        }
        guard number >= 1 else { throw .damaged(path: path, line: 1, problem: "empty file") }
        return saved
    }

    static func render(_ saved: SavedChannels) -> [UInt8] {
        var text = header + "\n"
        var live = Set<BroadcastChannelID>()
        for channel in saved.channels {
            text +=
                "channel \(channel.environment.rawValue) \(channel.storagePolicy) \(channel.id) \(channel.bundleID)\n"
            live.insert(channel.id)
        }
        // Sorted so the same state always gives the same bytes.
        for id in saved.issued.subtracting(live).map(\.description).sorted() { text += "deleted \(id)\n" }
        return Array(text.utf8)
    }

    /// Replaces the file with `saved`, atomically and durably.
    public func save(_ saved: SavedChannels) throws(ChannelStateFileError) {
        let bytes = Self.render(saved)
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io(path: temporary, problem: "cannot create: \(String(cString: strerror(errno)))") }
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0 {
                if errno == EINTR { continue }
                let problem = String(cString: strerror(errno))
                close(fd)
                unlink(temporary)
                throw .io(path: temporary, problem: "cannot write: \(problem)")
            }
            written += count
        }
        if fsync(fd) != 0 {
            let problem = String(cString: strerror(errno))
            close(fd)
            unlink(temporary)
            throw .io(path: temporary, problem: "cannot fsync: \(problem)")
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let problem = String(cString: strerror(errno))
            unlink(temporary)
            throw .io(path: path, problem: "cannot rename \(temporary) over it: \(problem)")
        }
        // The rename is durable once the directory is.
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let directoryFD = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            _ = fsync(directoryFD)
            close(directoryFD)
        }
    }
}

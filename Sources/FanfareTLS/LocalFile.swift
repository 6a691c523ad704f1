// Small, bounded file reads and writes for key and certificate files, reporting errno in words.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

enum LocalFile {
    /// Key and certificate files are a few KiB; anything far larger is not what the user meant.
    static let maximumByteCount = 1 << 20

    /// Reads a whole (small) regular file. On failure returns the reason, e.g. "No such file or directory".
    static func read(_ path: String) -> Result<[UInt8], LocalFileError> {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        if descriptor < 0 { return .failure(LocalFileError(reason: errnoText())) }
        defer { close(descriptor) }
        var status = stat()
        if fstat(descriptor, &status) != 0 { return .failure(LocalFileError(reason: errnoText())) }
        if status.st_mode & S_IFMT == S_IFDIR { return .failure(LocalFileError(reason: "is a directory")) }
        if status.st_mode & S_IFMT != S_IFREG { return .failure(LocalFileError(reason: "not a regular file")) }
        if Int(status.st_size) > maximumByteCount {
            return .failure(LocalFileError(reason: "file is larger than \(maximumByteCount) bytes"))
        }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        var filled = 0
        while filled < bytes.count {
            let count = bytes.withUnsafeMutableBytes { buffer in
                systemRead(descriptor, buffer.baseAddress! + filled, buffer.count - filled)
            }
            if count < 0 {
                if errno == EINTR { continue }
                return .failure(LocalFileError(reason: errnoText()))
            }
            if count == 0 { break }
            filled += count
        }
        bytes.removeLast(bytes.count - filled)
        return .success(bytes)
    }

    /// Returns nil when `path` is a readable regular file, otherwise the reason it is not.
    static func unreadableReason(_ path: String) -> String? {
        switch read(path) {
        case .success: return nil
        case .failure(let error): return error.reason
        }
    }

    /// Whether anything (file, directory, dangling symlink) exists at `path`.
    static func exists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0
    }

    /// Replaces `path` with `bytes`; `mode` applies to newly created files (0o600 for private keys).
    static func write(_ bytes: [UInt8], to path: String, mode: mode_t) -> LocalFileError? {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        if descriptor < 0 { return LocalFileError(reason: errnoText()) }
        defer { close(descriptor) }
        // An existing file keeps its old mode through O_CREAT; a private key must not stay world-readable.
        if fchmod(descriptor, mode) != 0 { return LocalFileError(reason: errnoText()) }
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { buffer in
                systemWrite(descriptor, buffer.baseAddress! + written, buffer.count - written)
            }
            if count < 0 {
                if errno == EINTR { continue }
                return LocalFileError(reason: errnoText())
            }
            written += count
        }
        return nil
    }

    /// Creates `path` (and missing parents) as directories only the user can enter (0700: they hold keys); nil on
    /// success or if it already exists.
    static func makeDirectory(_ path: String) -> LocalFileError? {
        var status = stat()
        if stat(path, &status) == 0 {
            return status.st_mode & S_IFMT == S_IFDIR ? nil : LocalFileError(reason: "exists and is not a directory")
        }
        if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            if let error = makeDirectory(String(path[..<slash])) { return error }
        }
        if mkdir(path, 0o700) != 0 && errno != EEXIST { return LocalFileError(reason: errnoText()) }
        return nil
    }

    static func errnoText() -> String {
        String(cString: strerror(errno))
    }
}

struct LocalFileError: Error {
    let reason: String
}

// Top-level forwarders: inside `LocalFile` the names `read`/`write` mean its own methods.
private func systemRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}

private func systemWrite(_ descriptor: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    write(descriptor, buffer, count)
}

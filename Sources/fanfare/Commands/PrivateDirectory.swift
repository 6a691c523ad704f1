import FanfareCommands
import Foundation

/// A new directory under `$TMPDIR` that only this user can enter, made by `mkdtemp` (0700, a name nobody can
/// guess or take first): `serve --simulator` keeps its CA, keys and channels there. A name made from the pid
/// let another local user create it first and plant symlinks (review L2).
struct PrivateDirectory {
    let path: String

    init(prefix: String) throws(UsageError) {
        var template = Array((FileManager.default.temporaryDirectory.path + "/" + prefix + "XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            let reason = String(cString: strerror(errno))
            throw UsageError(
                "cannot create a private temporary directory in \(FileManager.default.temporaryDirectory.path) "
                    + "(\(reason)): set TMPDIR to a writable directory")
        }
        path = String(cString: made)
    }

    /// Removes the directory and everything in it.
    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

import Foundation

/// One line on standard error, prefixed like every message of the command line.
public func printError(_ line: String) {
    FileHandle.standardError.write(Data(("fanfare: " + line + "\n").utf8))
}

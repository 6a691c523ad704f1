import ArgumentParser
import FanfareTLS
import Foundation

/// `fanfare keygen`: a P-256 provider key like Apple's .p8, and its public key for the simulator.
public struct KeygenCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Write a test provider key (.p8, EC P-256) and its public key, for use with `fanfare simulate`.",
        discussion: "APNs does not know this key: it is for local testing against the simulator only."
    )

    @Option(help: "Directory to write AuthKey_<key-id>.p8 and AuthKey_<key-id>.pub.pem into.")
    var outDir: String = "."

    @Option(help: "The 10-character key ID to name the files after.")
    var keyId: String = "FANFARE001"

    @Flag(help: "Overwrite existing files.")
    var force = false

    public init() {}

    public func run() throws {
        guard keyId.count == 10, keyId.allSatisfy({ ($0.isASCII && $0.isUppercase) || $0.isNumber }) else {
            printError("--key-id '\(keyId)' must be 10 characters of A-Z and 0-9 (like Apple's key IDs)")
            throw ExitCode(64)
        }
        let privatePath = (outDir as NSString).appendingPathComponent("AuthKey_\(keyId).p8")
        let publicPath = (outDir as NSString).appendingPathComponent("AuthKey_\(keyId).pub.pem")
        if !force {
            for path in [privatePath, publicPath] where FileManager.default.fileExists(atPath: path) {
                printError("'\(path)' exists; pass --force to overwrite it")
                throw ExitCode(1)
            }
        }
        do {
            try FileManager.default.createDirectory(atPath: outDir, withIntermediateDirectories: true)
            try ProviderKeyGenerator.generate(privateKeyFile: privatePath, publicKeyFile: publicPath)
        } catch {
            printError("cannot write the key: \(error)")
            throw ExitCode(1)
        }
        print("private key: \(privatePath)")
        print("public key:  \(publicPath)")
        print("key id:      \(keyId)")
    }
}

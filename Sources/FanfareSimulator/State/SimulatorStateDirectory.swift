#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FanfareTLS

/// What `fanfare simulate` keeps between runs in its state directory: the localhost CA and server
/// certificate (`ca.pem`, `server.pem`, `server-key.pem`), so clients that trust the CA keep trusting a
/// restarted simulator, and the provider key pair (`AuthKey_<kid>.p8`, `AuthKey_<kid>.pub.pem`).
///
/// Files that are there are reused only after they pass the checks a client would make (see
/// `CertificateAuthority.existingLocalhostChain` and `ProviderKeyGenerator.checkPair`). Each group of
/// files is generated when none of it exists, or when asked (`regenerate`); a group that is only partly
/// there, unreadable, corrupt, expired or mismatched is an error naming the file, never silently replaced
/// (a client may hold the old CA or key).
public struct SimulatorStateDirectory: Sendable {
    public let path: String

    /// Whether a group of files was found and reused or written now.
    public enum Origin: Sendable, Equatable {
        case reused
        case generated
    }

    public init(path: String) {
        self.path = path
    }

    public var certificates: GeneratedCertificates { GeneratedCertificates(directory: path) }

    public func providerPrivateKeyFile(keyID: String) -> String { path + "/AuthKey_\(keyID).p8" }
    public func providerPublicKeyFile(keyID: String) -> String { path + "/AuthKey_\(keyID).pub.pem" }

    /// The CA and server certificate: reused when valid, generated when absent or when `regenerate`.
    public func prepareCertificates(regenerate: Bool) throws(SimulatorStateError) -> (GeneratedCertificates, Origin) {
        if !regenerate {
            do {
                if let existing = try CertificateAuthority.existingLocalhostChain(in: path) {
                    return (existing, .reused)
                }
            } catch {
                throw .unusable(error.description)
            }
        }
        do {
            return (try CertificateAuthority.generateLocalhostChain(in: path), .generated)
        } catch {
            throw .cannotGenerate(error.description)
        }
    }

    /// The provider key pair for `keyID`: reused when both files hold matching P-256 keys, generated when
    /// neither exists or when `regenerate`.
    public func prepareProviderKey(keyID: String, regenerate: Bool) throws(SimulatorStateError) -> Origin {
        guard !keyID.isEmpty, keyID.utf8.allSatisfy(Self.isFileNameByte) else { throw .badKeyID(keyID) }
        let privateFile = providerPrivateKeyFile(keyID: keyID)
        let publicFile = providerPublicKeyFile(keyID: keyID)
        if !regenerate {
            switch (Self.exists(privateFile), Self.exists(publicFile)) {
            case (true, true):
                do {
                    try ProviderKeyGenerator.checkPair(privateKeyFile: privateFile, publicKeyFile: publicFile)
                } catch {
                    throw .unusable(error.description)
                }
                return .reused
            case (false, false):
                break
            case (true, false):
                throw .unusable("incomplete provider key in '\(path)': \(publicFile) missing (\(privateFile) present)")
            case (false, true):
                throw .unusable("incomplete provider key in '\(path)': \(privateFile) missing (\(publicFile) present)")
            }
        }
        do {
            try ProviderKeyGenerator.generate(privateKeyFile: privateFile, publicKeyFile: publicFile)
        } catch {
            throw .cannotGenerate("\(error)")
        }
        return .generated
    }

    private static func isFileNameByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-")
            || byte == UInt8(ascii: "_")
    }

    private static func exists(_ file: String) -> Bool {
        var status = stat()
        return lstat(file, &status) == 0
    }
}

/// Why the state directory cannot be used as it is.
public enum SimulatorStateError: Error, Equatable, CustomStringConvertible {
    /// Files are there but cannot be reused (partial, unreadable, corrupt, expired, mismatched).
    case unusable(String)
    /// Writing new files failed.
    case cannotGenerate(String)
    /// A key ID that cannot be part of a file name.
    case badKeyID(String)

    public var description: String {
        switch self {
        case .unusable(let problem): "state directory: \(problem)"
        case .cannotGenerate(let problem): "state directory: \(problem)"
        case .badKeyID(let keyID): "key id '\(keyID)' must use only A-Z a-z 0-9 - _ (it names the key files)"
        }
    }
}

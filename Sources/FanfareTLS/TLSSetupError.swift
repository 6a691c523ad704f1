// Errors from building TLS contexts and connections: configuration mistakes a person must fix.

/// Why a `TLSContext` or `TLSConnection` could not be created. Each description names the file
/// and OpenSSL's reason, e.g. `cannot read CA file '/x/ca.pem': No such file or directory`.
public enum TLSSetupError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file could not be opened or read at all (missing, permissions, a directory).
    case cannotReadFile(kind: TLSFileKind, path: String, reason: String)
    /// The file was read but OpenSSL could not use it (not PEM, wrong contents).
    case invalidFile(kind: TLSFileKind, path: String, reason: String)
    /// The private key does not belong to the certificate's public key.
    case certificateKeyMismatch(certificateFile: String, privateKeyFile: String)
    /// A client certificate was given without its key, or a key without its certificate.
    case incompleteClientIdentity
    /// The server name is empty or contains a NUL byte.
    case invalidServerName(String)
    /// OpenSSL refused a call that only fails when out of memory or misbuilt.
    case openSSL(operation: String, reason: String)

    public var description: String {
        switch self {
        case .cannotReadFile(let kind, let path, let reason):
            return "cannot read \(kind) '\(path)': \(reason)"
        case .invalidFile(let kind, let path, let reason):
            return "cannot use \(kind) '\(path)': \(reason)"
        case .certificateKeyMismatch(let certificateFile, let privateKeyFile):
            return "certificate and private key do not match (certificate '\(certificateFile)', "
                + "key '\(privateKeyFile)'); pass the key that was generated with this certificate"
        case .incompleteClientIdentity:
            return "a client certificate needs both certificateFile and privateKeyFile"
        case .invalidServerName(let name):
            return "invalid TLS server name '\(name)': expected a DNS host name or an IP address"
        case .openSSL(let operation, let reason):
            return "OpenSSL failed to \(operation): \(reason)"
        }
    }
}

/// Which of the TLS input files an error is about, spelled for messages.
public enum TLSFileKind: String, Sendable, Equatable, CustomStringConvertible {
    case caFile = "CA file"
    case certificateFile = "certificate file"
    case privateKeyFile = "private key file"

    public var description: String { rawValue }
}

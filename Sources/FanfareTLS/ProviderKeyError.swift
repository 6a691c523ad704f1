// Errors about APNs provider-token keys (.p8) and their identifiers: what is wrong, how to fix it.

public enum ProviderKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidKeyID(String)
    case invalidTeamID(String)
    /// `source` is the file path, or "<PEM text>" for keys passed as strings.
    case unreadableFile(path: String, reason: String)
    case notPEM(source: String)
    /// A PEM block of the wrong kind, e.g. "CERTIFICATE".
    case unexpectedPEMBlock(source: String, label: String)
    case publicKeyInsteadOfPrivate(source: String)
    case encryptedKey(source: String)
    case notECKey(source: String, keyType: String)
    case wrongCurve(source: String, curve: String)
    case undecodable(source: String, reason: String)
    case cannotWriteFile(path: String, reason: String)
    /// The public key file does not hold the private key's public half.
    case keyPairMismatch(privateKeyFile: String, publicKeyFile: String)
    /// OpenSSL failed while signing or generating (out of memory or a broken installation).
    case openSSL(operation: String, reason: String)

    public var description: String {
        switch self {
        case .invalidKeyID(let keyID):
            return "invalid key id '\(keyID)': expected 10 characters of A-Z and 0-9 "
                + "(the Key ID shown next to the key in your Apple developer account)"
        case .invalidTeamID(let teamID):
            return "invalid team id '\(teamID)': expected 10 characters of A-Z and 0-9 "
                + "(the Team ID shown in your Apple developer account membership details)"
        case .unreadableFile(let path, let reason):
            return "cannot read provider key file '\(path)': \(reason)"
        case .notPEM(let source):
            return "provider key '\(source)' is not PEM: expected a '-----BEGIN PRIVATE KEY-----' block "
                + "like Apple's AuthKey_<KEYID>.p8"
        case .unexpectedPEMBlock(let source, let label):
            return "provider key '\(source)' holds a '\(label)' PEM block, not an EC P-256 key"
        case .publicKeyInsteadOfPrivate(let source):
            return "provider key '\(source)' is a public key; signing provider tokens needs the private key "
                + "(the .p8 file downloaded from Apple)"
        case .encryptedKey(let source):
            return "provider key '\(source)' is encrypted; Apple's .p8 keys are not, so decrypt it first "
                + "(openssl pkcs8 -in encrypted.p8 -out AuthKey.p8)"
        case .notECKey(let source, let keyType):
            return "provider key '\(source)' is an \(keyType) key; APNs provider tokens (ES256) need an "
                + "EC P-256 key"
        case .wrongCurve(let source, let curve):
            return "provider key '\(source)' is an EC key on curve \(curve); APNs provider tokens (ES256) "
                + "need P-256 (prime256v1)"
        case .undecodable(let source, let reason):
            return "provider key '\(source)' could not be decoded: \(reason)"
        case .cannotWriteFile(let path, let reason):
            return "cannot write key file '\(path)': \(reason)"
        case .keyPairMismatch(let privateKeyFile, let publicKeyFile):
            return "'\(publicKeyFile)' is not the public key of '\(privateKeyFile)'"
        case .openSSL(let operation, let reason):
            return "OpenSSL failed to \(operation): \(reason)"
        }
    }
}

// Reads APNs provider keys from PEM and insists on EC P-256, with a specific error for each
// way a key file is commonly wrong (public key, RSA, P-384, encrypted, not PEM at all).
import COpenSSL

enum ProviderKeyPEM {
    /// Label shown in errors for keys that were passed as text rather than a file.
    static let textSource = "<PEM text>"

    static func readFile(_ path: String) throws(ProviderKeyError) -> [UInt8] {
        switch LocalFile.read(path) {
        case .success(let bytes): return bytes
        case .failure(let error): throw .unreadableFile(path: path, reason: error.reason)
        }
    }

    /// An EC P-256 private key (`EVP_PKEY*`, caller frees).
    static func privateKey(pem: [UInt8], source: String) throws(ProviderKeyError) -> OpaquePointer {
        let label = try firstBlockLabel(pem, source: source)
        switch label {
        case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY", "DSA PRIVATE KEY":
            if isLegacyEncrypted(pem) { throw .encryptedKey(source: source) }
        case "ENCRYPTED PRIVATE KEY":
            throw .encryptedKey(source: source)
        case "PUBLIC KEY", "EC PUBLIC KEY", "RSA PUBLIC KEY":
            throw .publicKeyInsteadOfPrivate(source: source)
        default:
            throw .unexpectedPEMBlock(source: source, label: label)
        }
        let key = try decode(pem, source: source) { bio in
            PEM_read_bio_PrivateKey(bio, nil, fanfareRefusePassphrase, nil)
        }
        return try requireMatchingHalves(requireP256(key, source: source), source: source)
    }

    /// An EC P-256 public key (`EVP_PKEY*`, caller frees). A private key is accepted too: it
    /// contains the public one, and the simulator may be pointed at the same .p8 as the client.
    static func publicKey(pem: [UInt8], source: String) throws(ProviderKeyError) -> OpaquePointer {
        let label = try firstBlockLabel(pem, source: source)
        let key: OpaquePointer
        switch label {
        case "PUBLIC KEY":
            key = try decode(pem, source: source) { bio in PEM_read_bio_PUBKEY(bio, nil, nil, nil) }
        case "PRIVATE KEY", "EC PRIVATE KEY":
            if isLegacyEncrypted(pem) { throw .encryptedKey(source: source) }
            key = try decode(pem, source: source) { bio in
                PEM_read_bio_PrivateKey(bio, nil, fanfareRefusePassphrase, nil)
            }
            return try requireMatchingHalves(requireP256(key, source: source), source: source)
        case "ENCRYPTED PRIVATE KEY":
            throw .encryptedKey(source: source)
        case "RSA PUBLIC KEY", "RSA PRIVATE KEY":
            throw .notECKey(source: source, keyType: "RSA")
        default:
            throw .unexpectedPEMBlock(source: source, label: label)
        }
        return try requireP256(key, source: source)
    }

    // MARK: - Steps

    /// The label of the first `-----BEGIN <label>-----` line.
    private static func firstBlockLabel(_ pem: [UInt8], source: String) throws(ProviderKeyError) -> String {
        let text = String(decoding: pem, as: UTF8.self)
        guard let begin = text.firstRange(of: "-----BEGIN ") else { throw .notPEM(source: source) }
        let rest = text[begin.upperBound...]
        guard let end = rest.firstRange(of: "-----"), !rest[..<end.lowerBound].contains("\n") else {
            throw .notPEM(source: source)
        }
        return String(rest[..<end.lowerBound])
    }

    /// Traditional ("-----BEGIN EC PRIVATE KEY-----") encryption announces itself in a header.
    private static func isLegacyEncrypted(_ pem: [UInt8]) -> Bool {
        String(decoding: pem, as: UTF8.self).contains("Proc-Type: 4,ENCRYPTED")
    }

    private static func decode(
        _ pem: [UInt8],
        source: String,
        _ read: (OpaquePointer) -> OpaquePointer?
    ) throws(ProviderKeyError) -> OpaquePointer {
        OpenSSLErrorQueue.clear()
        let key: OpaquePointer? = pem.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return read(bio)
        }
        guard let key else { throw .undecodable(source: source, reason: OpenSSLErrorQueue.drain()) }
        return key
    }

    /// Returns the private `key` if the public key stored with it is its own; otherwise frees it and throws.
    /// (OpenSSL loads a damaged .p8 whose public half was altered: tokens would be signed with the private
    /// half while a verifier given the same file checks them against the other.)
    private static func requireMatchingHalves(
        _ key: OpaquePointer, source: String
    ) throws(ProviderKeyError) -> OpaquePointer {
        OpenSSLErrorQueue.clear()
        let context = EVP_PKEY_CTX_new_from_pkey(nil, key, nil)
        defer { EVP_PKEY_CTX_free(context) }
        guard let context, EVP_PKEY_pairwise_check(context) == 1 else {
            OpenSSLErrorQueue.clear()
            EVP_PKEY_free(key)
            throw .undecodable(
                source: source, reason: "its public key does not belong to its private key (the file is damaged)")
        }
        return key
    }

    /// Returns `key` if it is EC on P-256; otherwise frees it and throws.
    private static func requireP256(_ key: OpaquePointer, source: String) throws(ProviderKeyError) -> OpaquePointer {
        guard EVP_PKEY_is_a(key, "EC") == 1 else {
            let type = ECKey.typeName(key)
            EVP_PKEY_free(key)
            throw .notECKey(source: source, keyType: type)
        }
        let curve = ECKey.curveName(key)
        guard curve == ECKey.p256GroupName else {
            EVP_PKEY_free(key)
            throw .wrongCurve(source: source, curve: curve ?? "with explicit parameters")
        }
        return key
    }
}

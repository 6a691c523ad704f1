// New provider keys for the simulator and tests, in the same format as Apple's .p8 downloads.
import COpenSSL

public enum ProviderKeyGenerator {
    /// Writes a new EC P-256 key: the private key as unencrypted PKCS#8
    /// (`-----BEGIN PRIVATE KEY-----`, mode 0600, like Apple's AuthKey_<KEYID>.p8) and its
    /// public key (`-----BEGIN PUBLIC KEY-----`) for `ProviderTokenVerifier`.
    public static func generate(privateKeyFile: String, publicKeyFile: String) throws(ProviderKeyError) {
        OpenSSLErrorQueue.clear()
        guard let key = ECKey.generateP256() else {
            throw .openSSL(operation: "generate an EC P-256 key", reason: OpenSSLErrorQueue.drain())
        }
        defer { EVP_PKEY_free(key) }
        guard let privatePEM = ECKey.privateKeyPEM(key), let publicPEM = ECKey.publicKeyPEM(key) else {
            throw .openSSL(operation: "encode the key as PEM", reason: OpenSSLErrorQueue.drain())
        }
        if let error = LocalFile.write(privatePEM, to: privateKeyFile, mode: 0o600) {
            throw .cannotWriteFile(path: privateKeyFile, reason: error.reason)
        }
        if let error = LocalFile.write(publicPEM, to: publicKeyFile, mode: 0o644) {
            throw .cannotWriteFile(path: publicKeyFile, reason: error.reason)
        }
    }
}

// New provider keys for the simulator and tests, in the same format as Apple's .p8 downloads.
import COpenSSL

public enum ProviderKeyGenerator {
    /// Writes a new EC P-256 key: the private key as unencrypted PKCS#8
    /// (`-----BEGIN PRIVATE KEY-----`, mode 0600, like Apple's AuthKey_<KEYID>.p8) and its
    /// public key (`-----BEGIN PUBLIC KEY-----`) for `ProviderTokenVerifier`. Missing parent directories
    /// are created.
    public static func generate(privateKeyFile: String, publicKeyFile: String) throws(ProviderKeyError) {
        for file in [privateKeyFile, publicKeyFile] {
            guard let slash = file.lastIndex(of: "/"), slash != file.startIndex else { continue }
            if let error = LocalFile.makeDirectory(String(file[..<slash])) {
                throw .cannotWriteFile(path: file, reason: error.reason)
            }
        }
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

    /// Checks a pair written by `generate` earlier: both files read as EC P-256 keys (the private one
    /// unencrypted) and the public key is the private key's. Throws what is wrong with which file.
    public static func checkPair(privateKeyFile: String, publicKeyFile: String) throws(ProviderKeyError) {
        let privateKey = try ProviderKeyPEM.privateKey(
            pem: try ProviderKeyPEM.readFile(privateKeyFile), source: privateKeyFile)
        defer { EVP_PKEY_free(privateKey) }
        let publicKey = try ProviderKeyPEM.publicKey(
            pem: try ProviderKeyPEM.readFile(publicKeyFile), source: publicKeyFile)
        defer { EVP_PKEY_free(publicKey) }
        OpenSSLErrorQueue.clear()
        guard EVP_PKEY_eq(privateKey, publicKey) == 1 else {
            OpenSSLErrorQueue.clear()
            throw .keyPairMismatch(privateKeyFile: privateKeyFile, publicKeyFile: publicKeyFile)
        }
    }
}

// EC P-256 key plumbing shared by the certificate generator, the JWT signer and verifier.
import COpenSSL

enum ECKey {
    /// OpenSSL's name for P-256 (what `EVP_PKEY_get_group_name` reports).
    static let p256GroupName = "prime256v1"

    /// A fresh P-256 key pair (`EVP_PKEY*`, caller frees), or nil with the error queue filled.
    static func generateP256() -> OpaquePointer? {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { return nil }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1,
            EVP_PKEY_CTX_set_group_name(context, "P-256") == 1
        else { return nil }
        var key: OpaquePointer? = nil
        guard EVP_PKEY_generate(context, &key) == 1 else { return nil }
        return key
    }

    /// The key's algorithm as OpenSSL names it: "EC", "RSA", "ED25519", ...
    static func typeName(_ key: OpaquePointer) -> String {
        if let name = EVP_PKEY_get0_type_name(key) { return String(cString: name) }
        return "unknown"
    }

    /// The named curve of an EC key ("prime256v1", "secp384r1"), or nil (explicit parameters).
    static func curveName(_ key: OpaquePointer) -> String? {
        var buffer = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(key, &buffer, buffer.count, &length) == 1, length > 0 else { return nil }
        return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// PKCS#8 `-----BEGIN PRIVATE KEY-----`, unencrypted: the format of Apple's `.p8` files.
    static func privateKeyPEM(_ key: OpaquePointer) -> [UInt8]? {
        MemoryBIO.collect { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }
    }

    /// SubjectPublicKeyInfo `-----BEGIN PUBLIC KEY-----`.
    static func publicKeyPEM(_ key: OpaquePointer) -> [UInt8]? {
        MemoryBIO.collect { PEM_write_bio_PUBKEY($0, key) }
    }
}

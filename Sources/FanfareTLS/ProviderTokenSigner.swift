// ES256 signing of APNs provider tokens with a team's .p8 key.
import COpenSSL
import FanfareCore

/// Signs provider JWTs with one EC P-256 key. The key and digest are loaded once; each `mint`
/// uses a fresh `EVP_MD_CTX`, so concurrent mints are safe (OpenSSL treats the key as read-only).
public final class ProviderTokenSigner: @unchecked Sendable {
    public let keyID: String
    public let teamID: String
    /// `EVP_PKEY*`, owned.
    private let key: OpaquePointer
    /// `EVP_MD*` for SHA-256, fetched once (per-call fetches contend on OpenSSL 3 locks).
    private let digest: OpaquePointer
    /// The base64url JOSE header, fixed for this key id.
    private let encodedHeader: String

    /// Loads Apple's `AuthKey_<KEYID>.p8` (PKCS#8 PEM, EC P-256).
    public convenience init(privateKeyPEMFile path: String, keyID: String, teamID: String) throws(ProviderKeyError) {
        try Self.validate(keyID: keyID, teamID: teamID)
        let pem = try ProviderKeyPEM.readFile(path)
        try self.init(pem: pem, source: path, keyID: keyID, teamID: teamID)
    }

    /// As `init(privateKeyPEMFile:...)`, with the PEM text itself (e.g. from a secret store). `source` names where
    /// the text came from in errors (e.g. `$LEAGUE_KEY_PEM`); the text itself never appears in one.
    public convenience init(
        privateKeyPEM: String, source: String? = nil, keyID: String, teamID: String
    ) throws(ProviderKeyError) {
        try Self.validate(keyID: keyID, teamID: teamID)
        try self.init(
            pem: Array(privateKeyPEM.utf8), source: source ?? ProviderKeyPEM.textSource, keyID: keyID, teamID: teamID)
    }

    private init(pem: [UInt8], source: String, keyID: String, teamID: String) throws(ProviderKeyError) {
        let key = try ProviderKeyPEM.privateKey(pem: pem, source: source)
        OpenSSLErrorQueue.clear()
        guard let digest = EVP_MD_fetch(nil, "SHA256", nil) else {
            EVP_PKEY_free(key)
            throw .openSSL(operation: "fetch SHA-256", reason: OpenSSLErrorQueue.drain())
        }
        self.key = key
        self.digest = digest
        self.keyID = keyID
        self.teamID = teamID
        encodedHeader = Base64.encode(#"{"alg":"ES256","kid":""# + keyID + #""}"#)
        // Sign once now so a key that cannot sign fails at load time, not 40 minutes later.
        _ = try signature(over: "fanfare key check")
    }

    deinit {
        EVP_MD_free(digest)
        EVP_PKEY_free(key)
    }

    /// Signs a token with `iat = issuedAt`: header `{"alg":"ES256","kid":"<kid>"}`, claims
    /// `{"iss":"<team>","iat":<issuedAt>}`, signature raw r‖s (64 bytes), all base64url.
    public func mint(issuedAt: Int64) throws(ProviderKeyError) -> ProviderToken {
        let claims = #"{"iss":""# + teamID + #"","iat":"# + String(issuedAt) + "}"
        let signingInput = encodedHeader + "." + Base64.encode(claims)
        let signature = try signature(over: signingInput)
        assert(signature.count == 64)
        let jwt = signingInput + "." + Base64.encode(signature)
        return ProviderToken(jwt: jwt, issuedAt: issuedAt, keyID: keyID, teamID: teamID)
    }

    /// The public half as `-----BEGIN PUBLIC KEY-----` PEM, for configuring a verifier.
    public var publicKeyPEM: String {
        guard let pem = ECKey.publicKeyPEM(key) else { preconditionFailure("encoding a loaded EC public key failed") }
        return String(decoding: pem, as: UTF8.self)
    }

    /// ES256 over `input`, converted from OpenSSL's DER `ECDSA-Sig-Value` to JOSE's r‖s.
    func signature(over input: String) throws(ProviderKeyError) -> [UInt8] {
        OpenSSLErrorQueue.clear()
        guard let context = EVP_MD_CTX_new() else {
            throw .openSSL(operation: "allocate a digest context", reason: OpenSSLErrorQueue.drain())
        }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, digest, nil, key) == 1 else {
            throw .openSSL(operation: "start an ES256 signature", reason: OpenSSLErrorQueue.drain())
        }
        var der = [UInt8](repeating: 0, count: Int(EVP_PKEY_get_size(key)))
        var derLength = der.count
        var input = input
        let signed = input.withUTF8 { bytes in
            EVP_DigestSign(context, &der, &derLength, bytes.baseAddress, bytes.count)
        }
        guard signed == 1 else {
            throw .openSSL(operation: "sign the provider token", reason: OpenSSLErrorQueue.drain())
        }
        guard let rawSignature = ECDSASignature.rawFromDER(der, count: derLength) else {
            throw .openSSL(operation: "decode the ECDSA signature", reason: OpenSSLErrorQueue.drain())
        }
        return rawSignature
    }

    private static func validate(keyID: String, teamID: String) throws(ProviderKeyError) {
        guard AppleIdentifier.isValid(keyID) else { throw .invalidKeyID(keyID) }
        guard AppleIdentifier.isValid(teamID) else { throw .invalidTeamID(teamID) }
    }
}

// Checks provider JWTs the way APNs would (for the simulator): ES256 signature, then claims.
import COpenSSL
import FanfareCore

public struct ProviderTokenClaims: Sendable, Equatable {
    /// The header's `kid`.
    public let keyID: String
    /// The `iss` claim.
    public let teamID: String
    /// The `iat` claim, UNIX seconds.
    public let issuedAt: Int64
    /// `iat` came as a decimal string (`"1700000000"`) rather than a JSON number. RFC 7519 says NumericDate,
    /// but APNs accepts the string: a widely used Swift client (APNSwift) sends it that way in production.
    public var issuedAtIsString = false
}

public enum ProviderTokenVerificationError: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    case unsupportedAlgorithm(String)
    case badSignature
    case missingClaim(String)

    public var description: String {
        switch self {
        case .malformed(let detail): return "malformed provider token: \(detail)"
        case .unsupportedAlgorithm(let algorithm):
            return "provider token uses algorithm '\(algorithm)'; APNs accepts only ES256"
        case .badSignature: return "provider token signature does not verify with the configured key"
        case .missingClaim(let name): return "provider token lacks '\(name)'"
        }
    }
}

/// Verifies provider tokens against one EC P-256 public key. Timeliness (`iat` within the hour)
/// and key-id/team-id matching are the caller's policy; this returns the claims to check.
public final class ProviderTokenVerifier: @unchecked Sendable {
    /// `EVP_PKEY*`, owned; only read after init, so concurrent `verify` calls are safe.
    private let key: OpaquePointer
    /// `EVP_MD*` for SHA-256, fetched once.
    private let digest: OpaquePointer

    /// Loads a `-----BEGIN PUBLIC KEY-----` file (a private .p8 works too: it holds the public key).
    public convenience init(publicKeyPEMFile path: String) throws(ProviderKeyError) {
        let pem = try ProviderKeyPEM.readFile(path)
        try self.init(pem: pem, source: path)
    }

    public convenience init(publicKeyPEM: String) throws(ProviderKeyError) {
        try self.init(pem: Array(publicKeyPEM.utf8), source: ProviderKeyPEM.textSource)
    }

    private init(pem: [UInt8], source: String) throws(ProviderKeyError) {
        let key = try ProviderKeyPEM.publicKey(pem: pem, source: source)
        OpenSSLErrorQueue.clear()
        guard let digest = EVP_MD_fetch(nil, "SHA256", nil) else {
            EVP_PKEY_free(key)
            throw .openSSL(operation: "fetch SHA-256", reason: OpenSSLErrorQueue.drain())
        }
        self.key = key
        self.digest = digest
    }

    deinit {
        EVP_MD_free(digest)
        EVP_PKEY_free(key)
    }

    public func verify(_ jwt: String) -> Result<ProviderTokenClaims, ProviderTokenVerificationError> {
        var jwt = jwt
        return jwt.withUTF8 { verify(UnsafeRawBufferPointer($0)) }
    }

    /// Checks, in order: three base64url parts, header JSON with `alg` = ES256 and a `kid`, the
    /// signature over `header.claims`, then claims JSON with string `iss` and `iat` an integer or a string of
    /// 1...18 decimal digits (`issuedAtIsString` says which; a caller wanting RFC 7519's NumericDate alone
    /// rejects the string). Other members (`typ`, a `kid` claim) are ignored, as APNs ignores them.
    public func verify(_ jwt: UnsafeRawBufferPointer) -> Result<ProviderTokenClaims, ProviderTokenVerificationError> {
        let dots = jwt.indices.filter { jwt[$0] == UInt8(ascii: ".") }
        guard dots.count == 2 else { return .failure(.malformed("expected 3 dot-separated parts")) }
        let headerPart = UnsafeRawBufferPointer(rebasing: jwt[..<dots[0]])
        let claimsPart = UnsafeRawBufferPointer(rebasing: jwt[(dots[0] + 1)..<dots[1]])
        let signaturePart = UnsafeRawBufferPointer(rebasing: jwt[(dots[1] + 1)...])
        let signingInput = UnsafeRawBufferPointer(rebasing: jwt[..<dots[1]])

        let header: FlatJSONObject
        switch Self.decodeJSON(headerPart, part: "header") {
        case .success(let object): header = object
        case .failure(let error): return .failure(error)
        }
        guard let algorithm = header["alg"] else { return .failure(.missingClaim("alg")) }
        guard case .string(let algorithmName) = algorithm else { return .failure(.malformed("'alg' is not a string")) }
        guard algorithmName == "ES256" else { return .failure(.unsupportedAlgorithm(algorithmName)) }
        guard let keyIDValue = header["kid"] else { return .failure(.missingClaim("kid")) }
        guard case .string(let keyID) = keyIDValue else { return .failure(.malformed("'kid' is not a string")) }

        guard let signature = Base64.decode(signaturePart, padding: .forbidden) else {
            return .failure(.malformed("signature is not base64url"))
        }
        guard signature.count == 2 * ECDSASignature.coordinateByteCount else {
            return .failure(.malformed("ES256 signature is \(signature.count) bytes, expected 64 (r‖s)"))
        }
        guard isValidSignature(signature, over: signingInput) else { return .failure(.badSignature) }

        let claims: FlatJSONObject
        switch Self.decodeJSON(claimsPart, part: "claims") {
        case .success(let object): claims = object
        case .failure(let error): return .failure(error)
        }
        guard let issuerValue = claims["iss"] else { return .failure(.missingClaim("iss")) }
        guard case .string(let teamID) = issuerValue else { return .failure(.malformed("'iss' is not a string")) }
        guard let issuedAtValue = claims["iat"] else { return .failure(.missingClaim("iat")) }
        switch issuedAtValue {
        case .integer(let issuedAt):
            return .success(ProviderTokenClaims(keyID: keyID, teamID: teamID, issuedAt: issuedAt))
        case .string(let text):
            guard let issuedAt = Self.decimalSeconds(text) else {
                return .failure(.malformed("'iat' is the string '\(text)', not a decimal number of seconds"))
            }
            return .success(
                ProviderTokenClaims(keyID: keyID, teamID: teamID, issuedAt: issuedAt, issuedAtIsString: true))
        case .other:
            return .failure(.malformed("'iat' is not an integer number of seconds"))
        }
    }

    /// `"1700000000"` → 1700000000: 1...18 ASCII digits, nothing else (no sign, space or fraction).
    static func decimalSeconds(_ text: String) -> Int64? {
        let digits = text.utf8
        guard !digits.isEmpty, digits.count <= 18 else { return nil }
        var value: Int64 = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
        }
        return value
    }

    private static func decodeJSON(
        _ part: UnsafeRawBufferPointer,
        part name: String
    ) -> Result<FlatJSONObject, ProviderTokenVerificationError> {
        guard let bytes = Base64.decode(part, padding: .forbidden) else {
            return .failure(.malformed("\(name) is not base64url"))
        }
        do {
            return .success(try FlatJSONObject.parse(bytes))
        } catch {
            return .failure(.malformed("\(name) is not a JSON object: \(error.reason)"))
        }
    }

    private func isValidSignature(_ rawSignature: [UInt8], over input: UnsafeRawBufferPointer) -> Bool {
        guard let der = ECDSASignature.derFromRaw(rawSignature) else { return false }
        OpenSSLErrorQueue.clear()
        guard let context = EVP_MD_CTX_new() else { return false }
        defer {
            EVP_MD_CTX_free(context)
            OpenSSLErrorQueue.clear()  // a failed verify leaves reasons we do not report
        }
        guard EVP_DigestVerifyInit(context, nil, digest, nil, key) == 1 else { return false }
        return EVP_DigestVerify(
            context, der, der.count, input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count) == 1
    }
}

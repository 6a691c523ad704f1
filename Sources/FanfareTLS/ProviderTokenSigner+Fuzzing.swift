// For the fuzz targets (Fuzzing/): a correctly signed JWT around any header and claims bytes, so the
// verifier's JSON handling is reached by inputs that pass the signature check.

extension ProviderTokenSigner {
    /// `base64url(header).base64url(claims).base64url(ES256 signature)` for these exact bytes.
    @_spi(Fuzzing) public func signedToken(header: [UInt8], claims: [UInt8]) throws(ProviderKeyError) -> String {
        let signingInput = JWTBase64URL.encode(header) + "." + JWTBase64URL.encode(claims)
        return signingInput + "." + JWTBase64URL.encode(try signature(over: signingInput))
    }
}

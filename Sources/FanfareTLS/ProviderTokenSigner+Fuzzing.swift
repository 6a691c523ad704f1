// For the fuzz targets (Fuzzing/): a correctly signed JWT around any header and claims bytes, so the
// verifier's JSON handling is reached by inputs that pass the signature check.
import FanfareCore

extension ProviderTokenSigner {
    /// `base64url(header).base64url(claims).base64url(ES256 signature)` for these exact bytes.
    @_spi(Fuzzing) public func signedToken(header: [UInt8], claims: [UInt8]) throws(ProviderKeyError) -> String {
        let signingInput = Base64.encode(header) + "." + Base64.encode(claims)
        return signingInput + "." + Base64.encode(try signature(over: signingInput))
    }
}

import FanfareTLS

/// Verifies each provider token with the public half of the key its `kid` names (the apps' keys, each its own key
/// pair), and hands tokens of other keys to `fallback` (nil: they are invalid).
public struct KeyedProviderTokenVerifier: ProviderTokenVerifying {
    private let verifiers: [String: ES256ProviderTokenVerifier]
    private let fallback: (any ProviderTokenVerifying)?

    /// `publicKeys`: PEM by key id (a `-----BEGIN PUBLIC KEY-----` or the private `.p8`).
    public init(publicKeys: [String: String], fallback: (any ProviderTokenVerifying)?) throws(ProviderKeyError) {
        var verifiers: [String: ES256ProviderTokenVerifier] = [:]
        for (keyID, pem) in publicKeys {
            verifiers[keyID] = ES256ProviderTokenVerifier(try ProviderTokenVerifier(publicKeyPEM: pem))
        }
        self.verifiers = verifiers
        self.fallback = fallback
    }

    /// Runs once per distinct token per connection (`ConnectionAuthState`): reading the `kid` first costs little.
    public func verify(jwt: UnsafeRawBufferPointer) -> VerifiedProviderToken? {
        guard let claims = ProviderTokenDecoding.decodeClaims(jwt) else { return nil }
        guard let verifier = verifiers[claims.keyID] else { return fallback?.verify(jwt: jwt) }
        return verifier.verify(jwt: jwt)
    }
}

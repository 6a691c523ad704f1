import FanfareTLS

/// Lets the simulator's provider-token rules use the ES256 verifier from FanfareTLS.
public struct ES256ProviderTokenVerifier: ProviderTokenVerifying {
    public let verifier: ProviderTokenVerifier

    public init(_ verifier: ProviderTokenVerifier) {
        self.verifier = verifier
    }

    public func verify(jwt: UnsafeRawBufferPointer) -> VerifiedProviderToken? {
        switch verifier.verify(jwt) {
        case .success(let claims):
            return VerifiedProviderToken(
                keyID: claims.keyID, teamID: claims.teamID, issuedAt: claims.issuedAt,
                issuedAtIsString: claims.issuedAtIsString)
        case .failure:
            return nil
        }
    }
}

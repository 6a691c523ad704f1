// A minted APNs provider token (JWT) and the identifiers rules shared by signer and verifier.

/// One signed provider JWT (apns-spec.md §6.1), shared by every connection of one team/key.
public struct ProviderToken: Sendable, Equatable {
    /// `<header>.<claims>.<signature>`, each base64url without padding.
    public let jwt: String
    /// The `iat` claim, UNIX seconds.
    public let issuedAt: Int64
    public let keyID: String
    public let teamID: String

    /// The value for the `authorization` request header.
    public var authorizationHeaderValue: String { "bearer " + jwt }
}

public enum AppleIdentifier {
    /// Apple key ids and team ids: exactly 10 characters of A-Z and 0-9.
    public static func isValid(_ identifier: String) -> Bool {
        identifier.utf8.count == 10
            && identifier.utf8.allSatisfy { byte in
                (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                    || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
            }
    }
}

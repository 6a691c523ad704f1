import FanfareCore

/// The crypto-free part of reading an APNs provider token (JWT, apns-spec.md §6.1): splitting it,
/// base64url-decoding it and reading `alg`, `kid`, `iss`, `iat`. An ES256 verifier (FanfareTLS) checks the
/// signature over `signingInput` and then calls `decodeClaims`.
public enum ProviderTokenDecoding {
    /// Views into a compact JWS `header.claims.signature`.
    public struct Parts {
        /// `header.claims`: the bytes the ES256 signature covers.
        public var signingInput: UnsafeRawBufferPointer
        public var encodedHeader: UnsafeRawBufferPointer
        public var encodedClaims: UnsafeRawBufferPointer
        public var encodedSignature: UnsafeRawBufferPointer
    }

    /// Largest decoded header or claims section accepted (APNs tokens are well under 200 bytes each).
    public static let maximumSectionBytes = 1024

    /// Splits a compact JWS into its three base64url sections; nil unless there are exactly two dots and
    /// no empty section.
    public static func split(_ jwt: UnsafeRawBufferPointer) -> Parts? {
        var firstDot = -1
        var secondDot = -1
        for index in 0..<jwt.count where jwt[index] == UInt8(ascii: ".") {
            if firstDot < 0 {
                firstDot = index
            } else if secondDot < 0 {
                secondDot = index
            } else {
                return nil
            }
        }
        guard firstDot > 0, secondDot > firstDot + 1, secondDot < jwt.count - 1 else { return nil }
        return Parts(
            signingInput: jwt.slice(from: 0, count: secondDot),
            encodedHeader: jwt.slice(from: 0, count: firstDot),
            encodedClaims: jwt.slice(from: firstDot + 1, count: secondDot - firstDot - 1),
            encodedSignature: jwt.suffix(from: secondDot + 1)
        )
    }

    /// Reads the JOSE header and claims; does NOT check the signature. Requires `alg` = `ES256`, a string
    /// `kid`, a string `iss` and `iat` as an integer or a string of decimal digits (as APNs accepts; the
    /// result says which); other members are ignored.
    public static func decodeClaims(_ jwt: UnsafeRawBufferPointer) -> VerifiedProviderToken? {
        guard let parts = split(jwt) else { return nil }
        return withUnsafeTemporaryAllocation(byteCount: 2 * maximumSectionBytes, alignment: 1) { scratch in
            let headerBuffer = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<maximumSectionBytes])
            let claimsBuffer = UnsafeMutableRawBufferPointer(rebasing: scratch[maximumSectionBytes...])
            guard let headerCount = decodeSection(parts.encodedHeader, into: headerBuffer),
                let claimsCount = decodeSection(parts.encodedClaims, into: claimsBuffer)
            else { return nil }
            let header = UnsafeRawBufferPointer(headerBuffer).slice(from: 0, count: headerCount)
            let claims = UnsafeRawBufferPointer(claimsBuffer).slice(from: 0, count: claimsCount)
            guard let algorithm = stringMember(header, key: "alg"), algorithm.equals("ES256"),
                let keyID = stringMember(header, key: "kid"),
                let teamID = stringMember(claims, key: "iss"),
                let issuedAt = issuedAtMember(claims)
            else { return nil }
            return VerifiedProviderToken(
                keyID: String(decoding: keyID, as: UTF8.self),
                teamID: String(decoding: teamID, as: UTF8.self),
                issuedAt: issuedAt.seconds,
                issuedAtIsString: issuedAt.isString
            )
        }
    }

    /// Decodes one unpadded base64url section; nil on a bad character, an impossible length, or too little
    /// room. Unused bits in the last character are not checked (they never have been here; the ES256 verifier
    /// refuses them).
    static func decodeSection(_ text: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Int? {
        Base64.decode(text, into: output, alphabet: .url, padding: .forbidden, canonicalOnly: false)
    }

    /// A top-level string member's raw bytes (without quotes); nil if absent, not a string, or escaped.
    static func stringMember(_ json: UnsafeRawBufferPointer, key: StaticString) -> UnsafeRawBufferPointer? {
        guard let found = SimulatorJSON.topLevelMember(json, key: key), let range = found else { return nil }
        guard range.count >= 2, json[range.lowerBound] == UInt8(ascii: "\"") else { return nil }
        let inner = json.slice(from: range.lowerBound + 1, count: range.count - 2)
        for byte in inner where byte == UInt8(ascii: "\\") { return nil }
        return inner
    }

    /// `iat` as a JSON integer, or as a string of 1...18 decimal digits (then the flag is true).
    static func issuedAtMember(_ json: UnsafeRawBufferPointer) -> (seconds: Int64, isString: Bool)? {
        if let number = integerMember(json, key: "iat") { return (number, false) }
        guard let text = stringMember(json, key: "iat"), text.count <= 18,
            let number = HeaderSyntax.parseNonNegativeInteger(text)
        else { return nil }
        return (number, true)
    }

    /// A top-level integer member (optionally negative, no fraction or exponent).
    static func integerMember(_ json: UnsafeRawBufferPointer, key: StaticString) -> Int64? {
        guard let found = SimulatorJSON.topLevelMember(json, key: key), let range = found else { return nil }
        let text = json.slice(from: range.lowerBound, count: range.count)
        if text.count > 1, text[0] == UInt8(ascii: "-") {
            return HeaderSyntax.parseNonNegativeInteger(text.suffix(from: 1)).map { -$0 }
        }
        return HeaderSyntax.parseNonNegativeInteger(text)
    }
}

/// A verifier that decodes the claims but accepts any signature. For load tests and for running the
/// simulator without the signing key's public half; never a stand-in for real verification.
public struct UnsignedProviderTokenVerifier: ProviderTokenVerifying {
    public init() {}

    public func verify(jwt: UnsafeRawBufferPointer) -> VerifiedProviderToken? {
        ProviderTokenDecoding.decodeClaims(jwt)
    }
}

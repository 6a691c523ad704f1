import FanfareTestSupport
import Foundation
import Testing
@testable import FanfareSimulator

@Suite(.ownThread) struct ProviderTokenDecodingTests {
    func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    func jwt(header: String, claims: String, signature: String = "c2lnbmF0dXJl") -> String {
        "\(base64URL(header)).\(base64URL(claims)).\(signature)"
    }

    @Test func decodesKeyTeamAndIssuedAt() {
        let token = jwt(
            header: #"{"alg":"ES256","kid":"KEYID00001"}"#, claims: #"{"iss":"TEAMID0001","iat":1750000000}"#)
        let decoded = withBytes(token) { ProviderTokenDecoding.decodeClaims($0) }
        #expect(decoded == VerifiedProviderToken(keyID: "KEYID00001", teamID: "TEAMID0001", issuedAt: 1_750_000_000))
    }

    /// APNSwift's shape: pretty-printed, `typ` in the header, `iat` as a string and a `kid` claim.
    @Test func decodesAPNSwiftShapedClaims() {
        let token = jwt(
            header: "{\n    \"alg\": \"ES256\",\n    \"typ\": \"JWT\",\n    \"kid\": \"KEYID00001\"\n}",
            claims: "{\n    \"iss\": \"TEAMID0001\",\n    \"iat\": \"1750000000\",\n    \"kid\": \"KEYID00001\"\n}")
        let decoded = withBytes(token) { ProviderTokenDecoding.decodeClaims($0) }
        #expect(
            decoded
                == VerifiedProviderToken(
                    keyID: "KEYID00001", teamID: "TEAMID0001", issuedAt: 1_750_000_000, issuedAtIsString: true))
    }

    @Test(arguments: [
        (#"{"alg":"HS256","kid":"K"}"#, #"{"iss":"T","iat":1}"#),
        (#"{"kid":"K"}"#, #"{"iss":"T","iat":1}"#),
        (#"{"alg":"ES256"}"#, #"{"iss":"T","iat":1}"#),
        (#"{"alg":"ES256","kid":"K"}"#, #"{"iat":1}"#),
        (#"{"alg":"ES256","kid":"K"}"#, #"{"iss":"T","iat":"1x"}"#),
        (#"{"alg":"ES256","kid":"K"}"#, #"{"iss":"T","iat":"-1"}"#),
        (#"{"alg":"ES256","kid":"K"}"#, #"{"iss":"T","iat":""}"#),
        (#"{"alg":"ES256","kid":"K"}"#, #"{"iss":"T","iat":"1234567890123456789"}"#),
        (#"{"alg":"ES256","kid":"K"}"#, #"{"iss":"T","iat":1.5}"#),
        (#"{"alg":"ES256","kid":"K""#, #"{"iss":"T","iat":1}"#),
    ])
    func rejectsWrongAlgorithmMissingOrMistypedClaims(_ sections: (String, String)) {
        let token = jwt(header: sections.0, claims: sections.1)
        #expect(withBytes(token) { ProviderTokenDecoding.decodeClaims($0) } == nil)
    }

    @Test(arguments: ["a.b", "a.b.c.d", ".b.c", "a..c", "a.b.", "a!.b.c"])
    func rejectsMalformedStructure(_ token: String) {
        #expect(withBytes(token) { ProviderTokenDecoding.decodeClaims($0) } == nil)
    }

    @Test func splitFindsTheSigningInput() {
        let parts = withBytes("aaa.bbb.ccc") { bytes in
            ProviderTokenDecoding.split(bytes).map { parts in
                (
                    String(decoding: parts.signingInput, as: UTF8.self),
                    String(decoding: parts.encodedSignature, as: UTF8.self)
                )
            }
        }
        #expect(parts?.0 == "aaa.bbb")
        #expect(parts?.1 == "ccc")
    }

    @Test(arguments: ["", "f", "fo", "foo", "foob", "fooba", "foobar", "\u{00}\u{FF}é"])
    func base64URLRoundTrips(_ text: String) {
        let encoded = base64URL(text)
        var output = [UInt8](repeating: 0, count: 32)
        let count = withBytes(encoded) { input in
            output.withUnsafeMutableBytes { ProviderTokenDecoding.decodeSection(input, into: $0) }
        }
        #expect(count.map { Array(output[0..<$0]) } == Array(text.utf8))
    }

    @Test func unsignedVerifierAcceptsAnySignatureButNeedsClaims() {
        let verifier = UnsignedProviderTokenVerifier()
        let token = jwt(
            header: #"{"alg":"ES256","kid":"KEYID00001"}"#, claims: #"{"iss":"TEAMID0001","iat":5}"#, signature: "xx")
        #expect(withBytes(token) { verifier.verify(jwt: $0) }?.issuedAt == 5)
        #expect(withBytes("nonsense") { verifier.verify(jwt: $0) } == nil)
    }
}

// Provider tokens (JWT) as APNs (the simulator) reads them: `ProviderTokenVerifier` (ES256 signature, then
// the JOSE header and claims through FanfareTLS's `FlatJSONObject`) and `ProviderTokenDecoding` (the simulator's
// allocation-free claims reader). Inputs either are a whole token, or are a header and claims that this
// target signs with its own key, so the claims are read after a valid signature.
// Checked: the verifier never accepts a token signed by another key; a correctly signed token with
// string `kid`/`iss`, integer `iat` and `alg` ES256 is accepted; when both readers accept, they read the
// same `kid`, `iss` and `iat`.
//
// Input: mode byte. Even: the rest is a JWT. Odd: a header chunk, then the claims (the rest), signed here.
@_spi(Fuzzing) import FanfareTLS
import FanfareSimulator
import FuzzSupport

#if canImport(Glibc)
import Glibc
#endif

@main
enum FuzzJWT {
    static func main() {
        runFuzzer(testOneInput, seeds: seeds)
    }
}

struct Keys {
    let signer: ProviderTokenSigner
    let verifier: ProviderTokenVerifier
    /// Verifies against a different key.
    let otherVerifier: ProviderTokenVerifier
}

/// Two keys made once per process.
let keys: Keys = {
    func makeKey(_ name: String) -> (ProviderTokenSigner, ProviderTokenVerifier) {
        let privatePath = "fanfare-fuzz-jwt-\(getpid())-\(name).p8"
        let publicPath = "fanfare-fuzz-jwt-\(getpid())-\(name).pem"
        defer {
            unlink(privatePath)
            unlink(publicPath)
        }
        try! ProviderKeyGenerator.generate(privateKeyFile: privatePath, publicKeyFile: publicPath)
        return (
            try! ProviderTokenSigner(privateKeyPEMFile: privatePath, keyID: "KEYID00001", teamID: "TEAMID0001"),
            try! ProviderTokenVerifier(publicKeyPEMFile: publicPath)
        )
    }
    let (signer, verifier) = makeKey("a")
    let (_, otherVerifier) = makeKey("b")
    return Keys(signer: signer, verifier: verifier, otherVerifier: otherVerifier)
}()

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    if input.byte() & 1 == 0 {
        check(Array(input.rest()), signedHere: nil)
    } else {
        let header = Array(input.chunk())
        let claims = Array(input.rest())
        guard let jwt = try? keys.signer.signedToken(header: header, claims: claims) else {
            require(false, "cannot sign")
            return 0
        }
        check(Array(jwt.utf8), signedHere: (header, claims))
    }
    return 0
}

func check(_ jwt: [UInt8], signedHere: (header: [UInt8], claims: [UInt8])?) {
    let verified = jwt.withUnsafeBytes { keys.verifier.verify($0) }
    let decoded = jwt.withUnsafeBytes { ProviderTokenDecoding.decodeClaims($0) }
    if case .failure(let error) = verified { require(!error.description.isEmpty, "an error without a description") }
    if case .success(let claims) = jwt.withUnsafeBytes({ keys.otherVerifier.verify($0) }) {
        require(false, "a token verified with a key that did not sign it: \(claims)")
    }
    if case .success(let claims) = verified, let decoded {
        require(
            decoded.keyID == claims.keyID && decoded.teamID == claims.teamID && decoded.issuedAt == claims.issuedAt,
            "the simulator's reader got \(decoded), the verifier \(claims)")
    }
    if let (header, claims) = signedHere, isPlain(header, claims) {
        guard case .success = verified else {
            return require(false, "a correctly signed plain token was refused: \(verified)")
        }
    }
}

/// The canonical shape: `{"alg":"ES256","kid":"<A-Z0-9>"}` and `{"iss":"<A-Z0-9>","iat":<digits>}`.
func isPlain(_ header: [UInt8], _ claims: [UInt8]) -> Bool {
    func matches(_ bytes: [UInt8], _ prefix: String, _ middle: String, _ suffix: String, digitsOnly: Bool) -> Bool {
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.hasPrefix(prefix), text.hasSuffix(suffix), text.count > prefix.count + suffix.count else { return false }
        let inner = text.dropFirst(prefix.count).dropLast(suffix.count)
        guard let split = inner.firstRange(of: middle) else { return false }
        let first = inner[..<split.lowerBound]
        let second = inner[split.upperBound...]
        let identifier = { (part: Substring) in !part.isEmpty && part.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) } }
        // JSON integers: no leading zero.
        let digits = { (part: Substring) in
            !part.isEmpty && part.count < 18 && (part == "0" || !part.hasPrefix("0")) && part.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
        }
        return digitsOnly ? identifier(first) && digits(second) : identifier(first) && second.isEmpty
    }
    return matches(header, #"{"alg":"ES256","kid":""#, #"""#, "}", digitsOnly: false)
        && matches(claims, #"{"iss":""#, #"","iat":"#, "}", digitsOnly: true)
}

func seeds() -> [Seed] {
    let header = Array(#"{"alg":"ES256","kid":"KEYID00001"}"#.utf8)
    func signedProgram(_ header: [UInt8], _ claims: String) -> [UInt8] {
        var writer = FuzzInputWriter()
        writer.byte(1)
        writer.chunk(header)
        writer.raw(claims.utf8)
        return writer.bytes
    }
    let token = try! keys.signer.mint(issuedAt: 1_700_000_000)
    return [
        Seed("minted", [0] + Array(token.jwt.utf8)),
        Seed("minted-bad-signature", [0] + Array(token.jwt.dropLast(4).utf8) + Array("AAAA".utf8)),
        Seed("signed-plain", signedProgram(header, #"{"iss":"TEAMID0001","iat":1700000000}"#)),
        Seed("signed-spaced", signedProgram(Array(#" { "kid" : "K1" , "alg" : "ES256" , "typ" : "JWT" } "#.utf8), #" { "iat" : -5 , "iss" : "T\u0031" , "x" : [1, {"y": null}] } "#)),
        Seed("signed-duplicate", signedProgram(header, #"{"iss":"A","iss":"B","iat":1}"#)),
        Seed("signed-wrong-types", signedProgram(Array(#"{"alg":"HS256","kid":7}"#.utf8), #"{"iss":1,"iat":"1"}"#)),
        Seed("signed-float", signedProgram(header, #"{"iss":"TEAMID0001","iat":1.7e9}"#)),
        Seed("three-dots", [0] + Array("a.b.c.d".utf8)),
    ]
}

import FanfareTestSupport
import FanfareCore
import Foundation
import Testing
@testable import FanfareTLS

private let keyID = "ABC123DEFG"
private let teamID = "TEAM456789"

/// A fresh P-256 key pair written by `ProviderKeyGenerator`.
private struct KeyPair {
    let directory: TemporaryDirectory
    let privateKeyFile: String
    let publicKeyFile: String

    init() throws {
        directory = try TemporaryDirectory()
        privateKeyFile = directory.file("AuthKey_\(keyID).p8")
        publicKeyFile = directory.file("AuthKey_\(keyID).pub.pem")
        try ProviderKeyGenerator.generate(privateKeyFile: privateKeyFile, publicKeyFile: publicKeyFile)
    }

    func signer() throws -> ProviderTokenSigner {
        try ProviderTokenSigner(privateKeyPEMFile: privateKeyFile, keyID: keyID, teamID: teamID)
    }

    func verifier() throws -> ProviderTokenVerifier {
        try ProviderTokenVerifier(publicKeyPEMFile: publicKeyFile)
    }
}

/// DER `ECDSA-Sig-Value` from JOSE r‖s, built by hand so the openssl check does not rely on the
/// code under test.
private func derSignature(fromRaw raw: [UInt8]) -> [UInt8] {
    func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var value = Array(bytes.drop(while: { $0 == 0 }))
        if value.isEmpty || value[0] & 0x80 != 0 { value.insert(0, at: 0) }
        return [0x02, UInt8(value.count)] + value
    }
    let body = integer(raw[0..<32]) + integer(raw[32..<64])
    return [0x30, UInt8(body.count)] + body
}

@Suite(.ownThread) struct ProviderTokenSignerTests {
    @Test func headerAndClaimsAreExactlyTheAPNsJSON() throws {
        let keys = try KeyPair()
        let token = try keys.signer().mint(issuedAt: 1_700_000_000)
        let parts = token.jwt.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 3)
        #expect(!token.jwt.contains("="))
        let header = try #require(foundationBase64URLDecode(parts[0]))
        let claims = try #require(foundationBase64URLDecode(parts[1]))
        #expect(String(decoding: header, as: UTF8.self) == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(String(decoding: claims, as: UTF8.self) == #"{"iss":"TEAM456789","iat":1700000000}"#)
        #expect(try #require(foundationBase64URLDecode(parts[2])).count == 64)
        #expect(token.issuedAt == 1_700_000_000)
        #expect(token.keyID == keyID && token.teamID == teamID)
        #expect(token.authorizationHeaderValue == "bearer " + token.jwt)
    }

    @Test func ourVerifierAcceptsTheToken() throws {
        let keys = try KeyPair()
        let token = try keys.signer().mint(issuedAt: 1_700_000_123)
        let claims = try keys.verifier().verify(token.jwt).get()
        #expect(claims == ProviderTokenClaims(keyID: keyID, teamID: teamID, issuedAt: 1_700_000_123))
        // The private .p8 also works as the verifier's key.
        let fromPrivate = try ProviderTokenVerifier(publicKeyPEMFile: keys.privateKeyFile)
        #expect(try fromPrivate.verify(token.jwt).get() == claims)
        // And the signer's own public key export.
        let fromExport = try ProviderTokenVerifier(publicKeyPEM: try keys.signer().publicKeyPEM)
        #expect(try fromExport.verify(token.jwt).get() == claims)
    }

    @Test func opensslCLIVerifiesTheSignature() throws {
        let keys = try KeyPair()
        let token = try keys.signer().mint(issuedAt: 1_700_000_000)
        let lastDot = try #require(token.jwt.lastIndex(of: "."))
        let signingInput = String(token.jwt[..<lastDot])
        let raw = try #require(foundationBase64URLDecode(token.jwt[token.jwt.index(after: lastDot)...]))

        let input = try keys.directory.write("input.txt", signingInput)
        let signature = try keys.directory.write("sig.der", bytes: derSignature(fromRaw: Array(raw)))
        let good = try runOpenSSL(["dgst", "-sha256", "-verify", keys.publicKeyFile, "-signature", signature, input])
        #expect(good.status == 0, "\(good.output)")
        #expect(good.output.contains("Verified OK"))

        let tampered = try keys.directory.write("tampered.txt", signingInput + "x")
        let bad = try runOpenSSL(["dgst", "-sha256", "-verify", keys.publicKeyFile, "-signature", signature, tampered])
        #expect(bad.status != 0)
    }

    @Test func keysMadeByTheOpenSSLCLILoad() throws {
        let directory = try TemporaryDirectory()
        let pkcs8 = directory.file("pkcs8.p8")
        let legacy = directory.file("legacy.pem")
        #expect(
            try runOpenSSL(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", pkcs8]).status
                == 0)
        #expect(try runOpenSSL(["ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", legacy]).status == 0)
        for path in [pkcs8, legacy] {
            let signer = try ProviderTokenSigner(privateKeyPEMFile: path, keyID: keyID, teamID: teamID)
            let verifier = try ProviderTokenVerifier(publicKeyPEMFile: path)
            #expect(try verifier.verify(signer.mint(issuedAt: 42).jwt).get().issuedAt == 42)
        }
    }

    @Test func inlinePEMWorksLikeAFile() throws {
        let keys = try KeyPair()
        let pem = try String(contentsOfFile: keys.privateKeyFile, encoding: .utf8)
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let signer = try ProviderTokenSigner(privateKeyPEM: pem, keyID: keyID, teamID: teamID)
        let publicPEM = try String(contentsOfFile: keys.publicKeyFile, encoding: .utf8)
        #expect(publicPEM.hasPrefix("-----BEGIN PUBLIC KEY-----"))
        let verifier = try ProviderTokenVerifier(publicKeyPEM: publicPEM)
        #expect(try verifier.verify(signer.mint(issuedAt: 7).jwt).get().teamID == teamID)
    }
}

@Suite(.ownThread) struct ProviderTokenVerifierTests {
    @Test func tokenFromAnotherKeyFails() throws {
        let keys = try KeyPair()
        let otherKeys = try KeyPair()
        let token = try otherKeys.signer().mint(issuedAt: 1_700_000_000)
        #expect(try keys.verifier().verify(token.jwt) == .failure(.badSignature))
    }

    @Test func tamperedClaimsFail() throws {
        let keys = try KeyPair()
        let token = try keys.signer().mint(issuedAt: 1_700_000_000)
        let parts = token.jwt.split(separator: ".")
        let forgedClaims = Base64.encode(#"{"iss":"TEAM456789","iat":1800000000}"#)
        let forged = "\(parts[0]).\(forgedClaims).\(parts[2])"
        #expect(try keys.verifier().verify(forged) == .failure(.badSignature))

        var flipped = Array(try #require(foundationBase64URLDecode(parts[2])))
        flipped[10] ^= 1
        let badSignature = "\(parts[0]).\(parts[1]).\(Base64.encode(flipped))"
        #expect(try keys.verifier().verify(badSignature) == .failure(.badSignature))
    }

    @Test func wrongAlgorithmAndMissingFieldsAreNamed() throws {
        let keys = try KeyPair()
        let verifier = try keys.verifier()
        let signature = Base64.encode([UInt8](repeating: 1, count: 64))
        func token(_ header: String, _ claims: String) -> String {
            Base64.encode(header) + "." + Base64.encode(claims) + "." + signature
        }
        let claims = #"{"iss":"TEAM456789","iat":1}"#
        #expect(
            verifier.verify(token(#"{"alg":"HS256","kid":"ABC123DEFG"}"#, claims))
                == .failure(.unsupportedAlgorithm("HS256")))
        #expect(verifier.verify(token(#"{"kid":"ABC123DEFG"}"#, claims)) == .failure(.missingClaim("alg")))
        #expect(verifier.verify(token(#"{"alg":"ES256"}"#, claims)) == .failure(.missingClaim("kid")))

        // Claims are checked after the signature, so these need properly signed tokens.
        let signer = try keys.signer()
        func signed(_ claims: String) throws -> String {
            let input = Base64.encode(#"{"alg":"ES256","kid":"ABC123DEFG"}"#) + "." + Base64.encode(claims)
            return input + "." + Base64.encode(try signer.signature(over: input))
        }
        #expect(verifier.verify(try signed(#"{"iat":1}"#)) == .failure(.missingClaim("iss")))
        #expect(verifier.verify(try signed(#"{"iss":"TEAM456789"}"#)) == .failure(.missingClaim("iat")))
        #expect(
            verifier.verify(try signed(#"{"iss":"TEAM456789","iat":true}"#))
                == .failure(.malformed("'iat' is not an integer number of seconds")))
        #expect(
            verifier.verify(try signed(#"{"iss":"TEAM456789","iat":"1x"}"#))
                == .failure(.malformed("'iat' is the string '1x', not a decimal number of seconds")))
        #expect(
            verifier.verify(try signed(#"{"iss":"TEAM456789","iat":12,"extra":[1]}"#))
                == .success(ProviderTokenClaims(keyID: keyID, teamID: teamID, issuedAt: 12)))
        #expect(ProviderTokenVerificationError.missingClaim("iat").description == "provider token lacks 'iat'")
    }

    /// APNSwift's token, byte for byte in shape: pretty-printed header with `typ`, claims with `iat` as a
    /// decimal string and an extra `kid` claim. APNs accepts it; so does the verifier (and says the `iat` was
    /// a string, for a caller that wants RFC 7519's NumericDate only).
    @Test func apnsSwiftShapedTokenVerifies() throws {
        let keys = try KeyPair()
        let verifier = try keys.verifier()
        let signer = try keys.signer()
        let header = "{\n    \"alg\": \"ES256\",\n    \"typ\": \"JWT\",\n    \"kid\": \"\(keyID)\"\n}"
        let claims = "{\n    \"iss\": \"\(teamID)\",\n    \"iat\": \"1700000123\",\n    \"kid\": \"\(keyID)\"\n}"
        let input = Base64.encode(header) + "." + Base64.encode(claims)
        let token = input + "." + Base64.encode(try signer.signature(over: input))
        #expect(
            verifier.verify(token)
                == .success(
                    ProviderTokenClaims(keyID: keyID, teamID: teamID, issuedAt: 1_700_000_123, issuedAtIsString: true)))
    }

    @Test(arguments: ["", "-1", "+1", " 1", "1 ", "1.0", "1e3", "0x10", "1234567890123456789", "١٢"])
    func issuedAtStringsThatAreNotDecimalSecondsAreRejected(_ text: String) {
        #expect(ProviderTokenVerifier.decimalSeconds(text) == nil)
    }

    @Test func issuedAtDecimalStrings() {
        #expect(ProviderTokenVerifier.decimalSeconds("0") == 0)
        #expect(ProviderTokenVerifier.decimalSeconds("0001700000000") == 1_700_000_000)
        #expect(ProviderTokenVerifier.decimalSeconds("999999999999999999") == 999_999_999_999_999_999)
    }

    @Test func malformedTokensAreMalformed() throws {
        let verifier = try KeyPair().verifier()
        let cases = ["", "abc", "a.b", "a.b.c.d", "!!!.e30.AAAA", Base64.encode("[1]") + ".e30.AAAA"]
        for jwt in cases {
            guard case .failure(.malformed) = verifier.verify(jwt) else {
                Issue.record("'\(jwt)' was not reported as malformed: \(verifier.verify(jwt))")
                continue
            }
        }
        let shortSignature = Base64.encode(#"{"alg":"ES256","kid":"K"}"#) + ".e30." + Base64.encode([1, 2, 3])
        #expect(
            verifier.verify(shortSignature) == .failure(.malformed("ES256 signature is 3 bytes, expected 64 (r‖s)")))
    }
}

@Suite(.ownThread) struct ProviderKeyErrorTests {
    @Test func identifiersMustBeTenUppercaseAlphanumerics() throws {
        let keys = try KeyPair()
        for bad in ["ABC", "abc123defg", "ABC123DEFGH", "ABC-23DEFG", ""] {
            #expect(throws: ProviderKeyError.invalidKeyID(bad)) {
                try ProviderTokenSigner(privateKeyPEMFile: keys.privateKeyFile, keyID: bad, teamID: teamID)
            }
            #expect(throws: ProviderKeyError.invalidTeamID(bad)) {
                try ProviderTokenSigner(privateKeyPEMFile: keys.privateKeyFile, keyID: keyID, teamID: bad)
            }
        }
        #expect(
            ProviderKeyError.invalidKeyID("abc").description.hasPrefix(
                "invalid key id 'abc': expected 10 characters of A-Z and 0-9"
            ))
    }

    @Test func missingFile() throws {
        let error = expectKeyError(path: "/nonexistent/AuthKey.p8")
        #expect(error == .unreadableFile(path: "/nonexistent/AuthKey.p8", reason: "No such file or directory"))
        #expect(
            error?.description == "cannot read provider key file '/nonexistent/AuthKey.p8': No such file or directory")
    }

    @Test func notPEM() throws {
        let directory = try TemporaryDirectory()
        let path = try directory.write("key.p8", "this is not a key\n")
        let error = expectKeyError(path: path)
        #expect(error == .notPEM(source: path))
        #expect(error?.description.contains("is not PEM") == true)
    }

    @Test func rsaKey() throws {
        let directory = try TemporaryDirectory()
        let path = directory.file("rsa.p8")
        let made = try runOpenSSL(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out", path])
        #expect(made.status == 0, "\(made.output)")
        let error = expectKeyError(path: path)
        #expect(error == .notECKey(source: path, keyType: "RSA"))
        #expect(
            error?.description
                == "provider key '\(path)' is an RSA key; APNs provider tokens (ES256) need an EC P-256 key")
    }

    @Test func p384Key() throws {
        let directory = try TemporaryDirectory()
        let path = directory.file("p384.p8")
        let made = try runOpenSSL(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", path])
        #expect(made.status == 0, "\(made.output)")
        let error = expectKeyError(path: path)
        #expect(error == .wrongCurve(source: path, curve: "secp384r1"))
        #expect(error?.description.contains("curve secp384r1; APNs provider tokens (ES256) need P-256") == true)
        // The verifier insists on P-256 too.
        #expect(throws: ProviderKeyError.wrongCurve(source: path, curve: "secp384r1")) {
            try ProviderTokenVerifier(publicKeyPEMFile: path)
        }
    }

    @Test func publicKeyGivenToTheSigner() throws {
        let keys = try KeyPair()
        let error = expectKeyError(path: keys.publicKeyFile)
        #expect(error == .publicKeyInsteadOfPrivate(source: keys.publicKeyFile))
        #expect(error?.description.contains("is a public key; signing provider tokens needs the private key") == true)
    }

    @Test func encryptedKey() throws {
        let directory = try TemporaryDirectory()
        let path = directory.file("encrypted.p8")
        let made = try runOpenSSL([
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-aes256", "-pass", "pass:secret",
            "-out", path,
        ])
        #expect(made.status == 0, "\(made.output)")
        #expect(expectKeyError(path: path) == .encryptedKey(source: path))
    }

    /// Found by Fuzzing/FuzzPEM: a .p8 whose stored public key is not its own loaded, and its tokens failed
    /// against a verifier given the same file.
    @Test func publicHalfOfAnotherKey() throws {
        let first = try KeyPair()
        let second = try KeyPair()
        func der(_ path: String) throws -> [UInt8] {
            let text = try String(contentsOfFile: path, encoding: .utf8)
            let body = text.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
            return Array(try #require(Data(base64Encoded: body)))
        }
        // OpenSSL's PKCS#8 P-256 key ends with the uncompressed public point (65 bytes).
        var damaged = try der(first.privateKeyFile)
        let other = try der(second.privateKeyFile)
        #expect(damaged.count == 138 && other.count == 138)
        damaged.replaceSubrange((damaged.count - 65)..., with: other.suffix(65))
        let base64 = Data(damaged).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        let path = try first.directory.write(
            "damaged.p8", "-----BEGIN PRIVATE KEY-----\n\(base64)\n-----END PRIVATE KEY-----\n")
        let reason = "its public key does not belong to its private key (the file is damaged)"
        #expect(expectKeyError(path: path) == .undecodable(source: path, reason: reason))
        #expect(throws: ProviderKeyError.undecodable(source: path, reason: reason)) {
            try ProviderTokenVerifier(publicKeyPEMFile: path)
        }
        _ = try first.signer()  // the undamaged file still loads
    }

    @Test func certificateAndGarbageInsidePEM() throws {
        let directory = try TemporaryDirectory()
        let chain = try CertificateAuthority.generateLocalhostChain(in: directory.path)
        #expect(
            expectKeyError(path: chain.caCertificateFile)
                == .unexpectedPEMBlock(source: chain.caCertificateFile, label: "CERTIFICATE"))

        let garbage = try directory.write(
            "garbage.p8", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        guard case .undecodable(garbage, let reason)? = expectKeyError(path: garbage) else {
            Issue.record("garbage PEM was not reported as undecodable")
            return
        }
        #expect(!reason.isEmpty)
    }

    @Test func inlineTextIsNamedAsSuch() throws {
        #expect(throws: ProviderKeyError.notPEM(source: "<PEM text>")) {
            try ProviderTokenSigner(privateKeyPEM: "nope", keyID: keyID, teamID: teamID)
        }
    }

    private func expectKeyError(path: String) -> ProviderKeyError? {
        do {
            _ = try ProviderTokenSigner(privateKeyPEMFile: path, keyID: keyID, teamID: teamID)
            Issue.record("loading '\(path)' unexpectedly succeeded")
            return nil
        } catch {
            return error
        }
    }
}

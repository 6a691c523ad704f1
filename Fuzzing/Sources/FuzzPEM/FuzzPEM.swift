// Provider key files (.p8 PEM, the way users hand them over: text or a file): `ProviderTokenSigner`
// (private keys) and `ProviderTokenVerifier` (public keys, or a private key for its public half).
// Checked: a key either loads or fails with a described error; a loaded signer's token verifies with its
// own public key and with a verifier loaded from the same PEM; a verifier never accepts another key's token.
//
// Input: mode byte (bit 0: read from a file instead of text), then the PEM bytes.
import FanfareTLS
import FuzzSupport

#if canImport(Glibc)
import Glibc
#endif

@main
enum FuzzPEM {
    static func main() {
        runFuzzer(testOneInput, seeds: seeds)
    }
}

/// A token signed by a key no input holds (the chance that an input is that key is nil).
let foreignToken: ProviderToken = {
    let directory = "fanfare-fuzz-pem-\(getpid())"
    mkdir(directory, 0o700)
    defer { rmdir(directory) }
    let privatePath = directory + "/AuthKey.p8"
    let publicPath = directory + "/public.pem"
    defer {
        unlink(privatePath)
        unlink(publicPath)
    }
    try! ProviderKeyGenerator.generate(privateKeyFile: privatePath, publicKeyFile: publicPath)
    return try! ProviderTokenSigner(privateKeyPEMFile: privatePath, keyID: "FOREIGN001", teamID: "FOREIGN001").mint(issuedAt: 1_700_000_000)
}()

/// The file mode's key file: this process's own, in the working directory, removed at exit.
let keyPath = "fanfare-fuzz-key-\(getpid()).p8"

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let fromFile = input.bool()
    let pem = input.rest()
    let text = String(decoding: pem, as: UTF8.self)
    if fromFile {
        writeKeyFile(pem)
    }
    let signer = Result { () throws(ProviderKeyError) in
        fromFile
            ? try ProviderTokenSigner(privateKeyPEMFile: keyPath, keyID: "FUZZKEY001", teamID: "FUZZTEAM01")
            : try ProviderTokenSigner(privateKeyPEM: text, keyID: "FUZZKEY001", teamID: "FUZZTEAM01")
    }
    let verifier = Result { () throws(ProviderKeyError) in
        fromFile ? try ProviderTokenVerifier(publicKeyPEMFile: keyPath) : try ProviderTokenVerifier(publicKeyPEM: text)
    }
    for case .failure(let error) in [signer.map { _ in () }, verifier.map { _ in () }] {
        require(!error.description.isEmpty, "a key error without a description")
    }
    if case .success(let verifier) = verifier {
        require(verifier.verify(foreignToken.jwt) == .failure(.badSignature), "a verifier accepted another key's token")
    }
    if case .success(let signer) = signer {
        let token: ProviderToken
        do {
            token = try signer.mint(issuedAt: 1_700_000_000)
        } catch {
            return failed("a loaded key cannot sign: \(error)")
        }
        guard let own = try? ProviderTokenVerifier(publicKeyPEM: signer.publicKeyPEM) else {
            return failed("the signer's public key does not load")
        }
        let expected = own.verify(token.jwt)
        guard case .success(let verified) = expected else { return failed("own token does not verify: \(expected)") }
        require(verified.keyID == "FUZZKEY001" && verified.teamID == "FUZZTEAM01" && verified.issuedAt == 1_700_000_000, "claims \(verified)")
        // The same PEM loads as a verifier too (a private key holds its public half) and agrees.
        guard case .success(let sameKey) = verifier else { return failed("a private key loads for signing but not for verifying: \(verifier)") }
        require(sameKey.verify(token.jwt) == expected, "the verifier from the same PEM disagrees")
    }
    return 0
}

func failed(_ message: String) -> Int32 {
    require(false, message)
    return 0
}

func writeKeyFile(_ bytes: UnsafeRawBufferPointer) {
    struct Once { nonisolated(unsafe) static var registered = false }
    if !Once.registered {
        Once.registered = true
        atexit { unlink(keyPath) }
    }
    guard let file = fopen(keyPath, "wb") else { return require(false, "cannot write \(keyPath)") }
    if bytes.count > 0 { fwrite(bytes.baseAddress, 1, bytes.count, file) }
    fclose(file)
}

/// A fresh .p8 and its public key, and the ways such files go wrong: other PEM labels, a legacy
/// encryption header, CRLF line ends, a truncated body, no PEM at all (text and file modes). Keys of other
/// types and curves (RSA, P-384, Ed25519, SEC1, encrypted PKCS#8) come from the openssl command line; see
/// README.md.
func seeds() -> [Seed] {
    let privatePath = "fanfare-fuzz-seed-\(getpid()).p8"
    let publicPath = "fanfare-fuzz-seed-\(getpid()).pem"
    defer {
        unlink(privatePath)
        unlink(publicPath)
    }
    try! ProviderKeyGenerator.generate(privateKeyFile: privatePath, publicKeyFile: publicPath)
    func read(_ path: String) -> String {
        let file = fopen(path, "rb")!
        defer { fclose(file) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        let count = fread(&bytes, 1, bytes.count, file)
        return String(decoding: bytes[0..<count], as: UTF8.self)
    }
    let privateKey = read(privatePath)
    let publicKey = read(publicPath)
    func seed(_ name: String, _ text: String, file: Bool = false) -> Seed { Seed(name, [file ? 1 : 0] + Array(text.utf8)) }
    let body = privateKey.split(separator: "\n").dropFirst().dropLast().joined(separator: "\n")
    return [
        seed("p8", privateKey),
        seed("p8-file", privateKey, file: true),
        seed("public", publicKey),
        seed("p8-crlf", privateKey.split(separator: "\n").joined(separator: "\r\n") + "\r\n"),
        seed("p8-text-around", "Key for FUZZKEY001:\n" + privateKey + "\nthanks\n"),
        seed("ec-label", "-----BEGIN EC PRIVATE KEY-----\n" + body + "\n-----END EC PRIVATE KEY-----\n"),
        seed("legacy-encrypted", "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00000000000000000000000000000000\n\n" + body + "\n-----END EC PRIVATE KEY-----\n"),
        seed("encrypted-label", "-----BEGIN ENCRYPTED PRIVATE KEY-----\n" + body + "\n-----END ENCRYPTED PRIVATE KEY-----\n"),
        seed("certificate-label", "-----BEGIN CERTIFICATE-----\n" + body + "\n-----END CERTIFICATE-----\n"),
        seed("truncated", String(privateKey.prefix(privateKey.count / 2))),
        seed("no-end", "-----BEGIN PRIVATE KEY-----\n" + body + "\n"),
        seed("not-pem", "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg"),
        seed("empty-file", "", file: true),
    ]
}

import FanfareTestSupport
import Foundation
import Testing
@testable import FanfareSimulator
@testable import FanfareTLS

/// `--state-dir`: a restarted simulator reuses its CA, certificate and provider key after checking them;
/// anything it cannot reuse is a clear error (never a crash, never a silent replacement), and
/// `regenerate` writes new files.
@Suite(.ownThread) struct SimulatorStateDirectoryTests {
    final class Directory {
        let path = NSTemporaryDirectory() + "fanfare-state-tests-" + UUID().uuidString
        var state: SimulatorStateDirectory { SimulatorStateDirectory(path: path) }
        deinit { try? FileManager.default.removeItem(atPath: path) }

        func read(_ file: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: file)) }
        func write(_ file: String, _ text: String) throws {
            try text.write(toFile: file, atomically: false, encoding: .utf8)
        }
    }

    private func unusable(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            guard case .unusable(let problem)? = error as? SimulatorStateError else { return "not .unusable: \(error)" }
            return problem
        }
    }

    @Test func generatedOnceThenReusedByteForByte() throws {
        let directory = Directory()
        let (files, origin) = try directory.state.prepareCertificates(regenerate: false)
        #expect(origin == .generated)
        #expect(try directory.state.prepareProviderKey(keyID: "KEYID00001", regenerate: false) == .generated)
        let ca = try directory.read(files.caCertificateFile)
        let key = try directory.read(directory.state.providerPrivateKeyFile(keyID: "KEYID00001"))

        let (again, secondOrigin) = try directory.state.prepareCertificates(regenerate: false)
        #expect(secondOrigin == .reused && again == files)
        #expect(
            try directory.read(files.caCertificateFile) == ca,
            "a client holding the CA keeps trusting the restarted simulator")
        #expect(try directory.state.prepareProviderKey(keyID: "KEYID00001", regenerate: false) == .reused)
        #expect(try directory.read(directory.state.providerPrivateKeyFile(keyID: "KEYID00001")) == key)
        // The reused files work: a server context loads them.
        _ = try TLSContext.server(certificateFile: again.certificateFile, privateKeyFile: again.privateKeyFile)
    }

    @Test func regenerateWritesNewFiles() throws {
        let directory = Directory()
        let (files, _) = try directory.state.prepareCertificates(regenerate: false)
        _ = try directory.state.prepareProviderKey(keyID: "KEYID00001", regenerate: false)
        let ca = try directory.read(files.caCertificateFile)
        let key = try directory.read(directory.state.providerPrivateKeyFile(keyID: "KEYID00001"))
        #expect(try directory.state.prepareCertificates(regenerate: true).1 == .generated)
        #expect(try directory.state.prepareProviderKey(keyID: "KEYID00001", regenerate: true) == .generated)
        #expect(try directory.read(files.caCertificateFile) != ca)
        #expect(try directory.read(directory.state.providerPrivateKeyFile(keyID: "KEYID00001")) != key)
        #expect(try directory.state.prepareCertificates(regenerate: false).1 == .reused)
    }

    @Test func aCorruptFileIsNamed() throws {
        let directory = Directory()
        let (files, _) = try directory.state.prepareCertificates(regenerate: false)
        try directory.write(files.certificateFile, "-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
        let problem = unusable { _ = try directory.state.prepareCertificates(regenerate: false) }
        #expect(
            problem?.contains("server.pem") == true && problem?.contains("not a PEM certificate") == true,
            "\(problem ?? "nil")")
        try directory.write(files.privateKeyFile, "")
        #expect(unusable { _ = try directory.state.prepareCertificates(regenerate: false) } != nil)
        #expect(try directory.state.prepareCertificates(regenerate: true).1 == .generated)
    }

    @Test func aPartialSetIsNamed() throws {
        let directory = Directory()
        let (files, _) = try directory.state.prepareCertificates(regenerate: false)
        try FileManager.default.removeItem(atPath: files.privateKeyFile)
        let problem = unusable { _ = try directory.state.prepareCertificates(regenerate: false) }
        #expect(problem?.contains("server-key.pem missing") == true, "\(problem ?? "nil")")

        _ = try directory.state.prepareProviderKey(keyID: "KEYID00001", regenerate: false)
        try FileManager.default.removeItem(atPath: directory.state.providerPublicKeyFile(keyID: "KEYID00001"))
        let keyProblem = unusable { _ = try directory.state.prepareProviderKey(keyID: "KEYID00001", regenerate: false) }
        #expect(keyProblem?.contains(".pub.pem missing") == true, "\(keyProblem ?? "nil")")
    }

    @Test func aKeyFromAnotherCertificateIsAMismatch() throws {
        let directory = Directory()
        let other = Directory()
        let (files, _) = try directory.state.prepareCertificates(regenerate: false)
        let (otherFiles, _) = try other.state.prepareCertificates(regenerate: false)
        try FileManager.default.removeItem(atPath: files.privateKeyFile)
        try FileManager.default.copyItem(atPath: otherFiles.privateKeyFile, toPath: files.privateKeyFile)
        let problem = unusable { _ = try directory.state.prepareCertificates(regenerate: false) }
        #expect(problem?.contains("is not the private key of") == true, "\(problem ?? "nil")")

        // A certificate and key from elsewhere, with this directory's CA: the chain does not verify.
        try FileManager.default.removeItem(atPath: files.privateKeyFile)
        try FileManager.default.removeItem(atPath: files.certificateFile)
        try FileManager.default.copyItem(atPath: otherFiles.privateKeyFile, toPath: files.privateKeyFile)
        try FileManager.default.copyItem(atPath: otherFiles.certificateFile, toPath: files.certificateFile)
        let chainProblem = unusable { _ = try directory.state.prepareCertificates(regenerate: false) }
        #expect(chainProblem?.contains("does not verify against") == true, "\(chainProblem ?? "nil")")
    }

    @Test func mismatchedProviderKeysAreNamed() throws {
        let directory = Directory()
        _ = try directory.state.prepareProviderKey(keyID: "KEYID00001", regenerate: false)
        _ = try directory.state.prepareProviderKey(keyID: "OTHERKEY01", regenerate: false)
        try FileManager.default.removeItem(atPath: directory.state.providerPublicKeyFile(keyID: "KEYID00001"))
        try FileManager.default.copyItem(
            atPath: directory.state.providerPublicKeyFile(keyID: "OTHERKEY01"),
            toPath: directory.state.providerPublicKeyFile(keyID: "KEYID00001"))
        let problem = unusable { _ = try directory.state.prepareProviderKey(keyID: "KEYID00001", regenerate: false) }
        #expect(problem?.contains("is not the public key of") == true, "\(problem ?? "nil")")
        try directory.write(directory.state.providerPrivateKeyFile(keyID: "KEYID00001"), "not a key")
        #expect(
            unusable { _ = try directory.state.prepareProviderKey(keyID: "KEYID00001", regenerate: false) }?.contains(
                "not PEM") == true)
    }

    @Test func anExpiredChainIsNamed() throws {
        let directory = Directory()
        _ = try CertificateAuthority.generateLocalhostChain(
            in: directory.path, notBefore: -2 * 86_400, notAfter: -86_400)
        let problem = unusable { _ = try directory.state.prepareCertificates(regenerate: false) }
        #expect(problem?.contains("expired") == true, "\(problem ?? "nil")")
        let future = Directory()
        _ = try CertificateAuthority.generateLocalhostChain(in: future.path, notBefore: 86_400, notAfter: 2 * 86_400)
        let notYet = unusable { _ = try future.state.prepareCertificates(regenerate: false) }
        #expect(notYet?.contains("not yet valid") == true, "\(notYet ?? "nil")")
    }

    @Test func keyIDsThatCannotNameAFileAreRefused() {
        let directory = Directory()
        #expect(throws: SimulatorStateError.badKeyID("../x")) {
            try directory.state.prepareProviderKey(keyID: "../x", regenerate: false)
        }
        #expect(throws: SimulatorStateError.badKeyID("")) {
            try directory.state.prepareProviderKey(keyID: "", regenerate: false)
        }
    }
}

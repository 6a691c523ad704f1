import FanfareTestSupport
import Foundation
import Testing
@testable import FanfareTLS

@Suite(.ownThread) struct TLSContextTests {
    @Test func missingCAFileNamesTheFileAndTheReason() throws {
        #expect {
            try TLSContext.client(caFile: "/nonexistent/ca.pem")
        } throws: { error in
            "\(error)" == "cannot read CA file '/nonexistent/ca.pem': No such file or directory"
        }
    }

    @Test func caFileWithoutCertificatesIsRejected() throws {
        let directory = try TemporaryDirectory()
        let path = try directory.write("ca.pem", "this is not a certificate\n")
        #expect {
            try TLSContext.client(caFile: path)
        } throws: { error in
            guard case TLSSetupError.invalidFile(.caFile, path, let reason) = error else { return false }
            return "\(error)".hasPrefix("cannot use CA file '\(path)': ") && !reason.isEmpty
        }
    }

    @Test func mismatchedCertificateAndKeyAreReported() throws {
        let directory = try TemporaryDirectory()
        let first = try CertificateAuthority.generateLocalhostChain(in: directory.file("a"))
        let second = try CertificateAuthority.generateLocalhostChain(in: directory.file("b"))
        #expect {
            try TLSContext.server(certificateFile: first.certificateFile, privateKeyFile: second.privateKeyFile)
        } throws: { error in
            error as? TLSSetupError
                == .certificateKeyMismatch(
                    certificateFile: first.certificateFile, privateKeyFile: second.privateKeyFile
                ) && "\(error)".hasPrefix("certificate and private key do not match")
        }
        #expect {
            try TLSContext.client(certificateFile: first.certificateFile, privateKeyFile: second.privateKeyFile)
        } throws: { error in
            "\(error)".hasPrefix("certificate and private key do not match")
        }
    }

    @Test func clientIdentityLoadsWhenItMatches() throws {
        let directory = try TemporaryDirectory()
        let files = try CertificateAuthority.generateLocalhostChain(in: directory.path)
        _ = try TLSContext.client(
            caFile: files.caCertificateFile, certificateFile: files.certificateFile,
            privateKeyFile: files.privateKeyFile
        )
    }

    @Test func clientIdentityNeedsBothFiles() throws {
        #expect(throws: TLSSetupError.incompleteClientIdentity) {
            try TLSContext.client(certificateFile: "client-cert.pem")
        }
    }

    @Test func unreadableServerFilesAreNamed() throws {
        let directory = try TemporaryDirectory()
        let files = try CertificateAuthority.generateLocalhostChain(in: directory.path)
        #expect {
            try TLSContext.server(certificateFile: "/nonexistent/server.pem", privateKeyFile: files.privateKeyFile)
        } throws: { error in
            "\(error)" == "cannot read certificate file '/nonexistent/server.pem': No such file or directory"
        }
        #expect {
            try TLSContext.server(certificateFile: files.certificateFile, privateKeyFile: directory.path)
        } throws: { error in
            "\(error)" == "cannot read private key file '\(directory.path)': is a directory"
        }
        let garbage = try directory.write(
            "garbage.pem", "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
        #expect {
            try TLSContext.server(certificateFile: files.certificateFile, privateKeyFile: garbage)
        } throws: { error in
            "\(error)".hasPrefix("cannot use private key file '\(garbage)': ")
        }
    }
}

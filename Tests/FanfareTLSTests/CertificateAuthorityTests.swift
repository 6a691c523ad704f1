import FanfareTestSupport
import Foundation
import Testing
@testable import FanfareTLS

@Suite(.ownThread) struct CertificateAuthorityTests {
    @Test func generatedChainPassesOpenSSLVerify() throws {
        let directory = try TemporaryDirectory()
        let files = try CertificateAuthority.generateLocalhostChain(in: directory.path)
        #expect(files.caCertificateFile == directory.file("ca.pem"))
        #expect(files.certificateFile == directory.file("server.pem"))
        #expect(files.privateKeyFile == directory.file("server-key.pem"))

        let verify = try runOpenSSL(["verify", "-CAfile", files.caCertificateFile, files.certificateFile])
        #expect(verify.status == 0, "\(verify.output)")
        #expect(verify.output.contains("server.pem: OK"))

        for host in ["localhost"] {
            let named = try runOpenSSL([
                "verify", "-CAfile", files.caCertificateFile, "-verify_hostname", host, files.certificateFile,
            ])
            #expect(named.status == 0, "\(named.output)")
        }
        let ip = try runOpenSSL([
            "verify", "-CAfile", files.caCertificateFile, "-verify_ip", "::1", files.certificateFile,
        ])
        #expect(ip.status == 0, "\(ip.output)")
        let wrongHost = try runOpenSSL([
            "verify", "-CAfile", files.caCertificateFile, "-verify_hostname", "example.com", files.certificateFile,
        ])
        #expect(wrongHost.status != 0)
    }

    @Test func serverCertificateHasLocalhostNamesAndExtras() throws {
        let directory = try TemporaryDirectory()
        let files = try CertificateAuthority.generateLocalhostChain(
            in: directory.file("nested/certs"), extraHostnames: ["apns.test", "10.1.2.3"]
        )
        let text = try runOpenSSL(["x509", "-in", files.certificateFile, "-noout", "-text"])
        #expect(text.status == 0)
        #expect(text.output.contains("DNS:localhost"))
        #expect(text.output.contains("IP Address:127.0.0.1"))
        #expect(text.output.contains("IP Address:0:0:0:0:0:0:0:1"))
        #expect(text.output.contains("DNS:apns.test"))
        #expect(text.output.contains("IP Address:10.1.2.3"))
        #expect(text.output.contains("TLS Web Server Authentication"))
        #expect(text.output.contains("ASN1 OID: prime256v1"))
        #expect(text.output.contains("CA:FALSE"))

        let ca = try runOpenSSL(["x509", "-in", files.caCertificateFile, "-noout", "-text"])
        #expect(ca.output.contains("CA:TRUE"))
        #expect(ca.output.contains("Certificate Sign"))

        let attributes = try FileManager.default.attributesOfItem(atPath: files.privateKeyFile)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let key = try String(contentsOfFile: files.privateKeyFile, encoding: .utf8)
        #expect(key.hasPrefix("-----BEGIN PRIVATE KEY-----"))
    }

    @Test func validityStartsAnHourAgo() throws {
        let directory = try TemporaryDirectory()
        let files = try CertificateAuthority.generateLocalhostChain(in: directory.path, validityDays: 2)
        // Valid now and in 47 hours, not in 49 hours; `-checkend` exits 0 if still valid then.
        let inHours = { (hours: Int) in
            try runOpenSSL(["x509", "-in", files.certificateFile, "-noout", "-checkend", String(hours * 3600)])
        }
        #expect(try inHours(47).status == 0)
        #expect(try inHours(49).status != 0)
        let dates = try runOpenSSL(["x509", "-in", files.certificateFile, "-noout", "-startdate"])
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "MMM d HH:mm:ss yyyy zzz"
        let startText = dates.output.replacingOccurrences(of: "notBefore=", with: "")
            .trimmingCharacters(in: .whitespacesAndNewlines)
            .replacingOccurrences(of: "  ", with: " ")
        let start = try #require(formatter.date(from: startText), "cannot parse '\(startText)'")
        let age = Date().timeIntervalSince(start)
        #expect(age > 3500 && age < 3700)
    }

    @Test func rejectsUnsafeExtraHostnames() throws {
        let directory = try TemporaryDirectory()
        #expect {
            try CertificateAuthority.generateLocalhostChain(in: directory.path, extraHostnames: ["evil,DNS:x"])
        } throws: { error in
            "\(error)".contains("invalid extra host name 'evil,DNS:x'")
        }
    }
}

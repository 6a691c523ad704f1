// A throwaway local CA and a localhost server certificate, for the APNs simulator and tests.
import COpenSSL

/// PEM files written by `CertificateAuthority.generateLocalhostChain`.
public struct GeneratedCertificates: Sendable, Equatable {
    /// The self-signed CA certificate: what clients pass as `caFile` to trust the server.
    public let caCertificateFile: String
    /// The server's certificate (signed by the CA) for `TLSContext.server(certificateFile:...)`.
    public let certificateFile: String
    /// The server's PKCS#8 private key (mode 0600).
    public let privateKeyFile: String

    /// The three files' places in `directory`: `ca.pem`, `server.pem`, `server-key.pem`.
    public init(directory: String) {
        caCertificateFile = directory + "/ca.pem"
        certificateFile = directory + "/server.pem"
        privateKeyFile = directory + "/server-key.pem"
    }

    var all: [String] { [caCertificateFile, certificateFile, privateKeyFile] }
}

public struct CertificateGenerationError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

public enum CertificateAuthority {
    /// Creates `directory` if needed and writes `ca.pem`, `server.pem` and `server-key.pem`:
    /// a self-signed CA (EC P-256) and a server certificate it signed for `localhost`,
    /// `127.0.0.1`, `::1` and `extraHostnames` (DNS names or IP literals), valid from one hour
    /// ago (tolerates clock skew) for `validityDays`. The CA's key is never written, so the CA
    /// cannot sign anything else.
    public static func generateLocalhostChain(
        in directory: String,
        extraHostnames: [String] = [],
        validityDays: Int = 365
    ) throws(CertificateGenerationError) -> GeneratedCertificates {
        precondition(validityDays > 0 && validityDays <= 3650, "validityDays must be 1...3650")
        return try generateLocalhostChain(
            in: directory, extraHostnames: extraHostnames, notBefore: -3600, notAfter: validityDays * 86_400)
    }

    /// As above with the validity window given in seconds from now (internal: tests make expired chains).
    static func generateLocalhostChain(
        in directory: String,
        extraHostnames: [String] = [],
        notBefore: Int,
        notAfter: Int
    ) throws(CertificateGenerationError) -> GeneratedCertificates {
        let subjectAltNames = try subjectAltNameList(extraHostnames)
        if let error = LocalFile.makeDirectory(directory) {
            throw CertificateGenerationError(message: "cannot create directory '\(directory)': \(error.reason)")
        }
        let files = GeneratedCertificates(directory: directory)

        OpenSSLErrorQueue.clear()
        guard let caKey = ECKey.generateP256(), let serverKey = ECKey.generateP256() else {
            throw openSSLError("generate an EC P-256 key")
        }
        defer {
            EVP_PKEY_free(caKey)
            EVP_PKEY_free(serverKey)
        }
        let ca = try makeCertificate(
            commonName: "Fanfare Local CA", key: caKey, issuer: nil, issuerKey: caKey, notBefore: notBefore,
            notAfter: notAfter,
            extensions: [
                (NID_basic_constraints, "critical,CA:TRUE,pathlen:0"),
                (NID_key_usage, "critical,keyCertSign,cRLSign"),
                (NID_subject_key_identifier, "hash"),
            ]
        )
        defer { X509_free(ca) }
        let server = try makeCertificate(
            commonName: "localhost", key: serverKey, issuer: ca, issuerKey: caKey, notBefore: notBefore,
            notAfter: notAfter,
            extensions: [
                (NID_basic_constraints, "critical,CA:FALSE"),
                (NID_key_usage, "critical,digitalSignature"),
                (NID_ext_key_usage, "serverAuth"),
                (NID_subject_key_identifier, "hash"),
                (NID_authority_key_identifier, "keyid:always"),
                (NID_subject_alt_name, subjectAltNames),
            ]
        )
        defer { X509_free(server) }

        try write(MemoryBIO.collect { PEM_write_bio_X509($0, ca) }, to: files.caCertificateFile, mode: 0o644)
        try write(MemoryBIO.collect { PEM_write_bio_X509($0, server) }, to: files.certificateFile, mode: 0o644)
        try write(ECKey.privateKeyPEM(serverKey), to: files.privateKeyFile, mode: 0o600)
        return files
    }

    /// "DNS:localhost,IP:127.0.0.1,IP:::1,..." after checking each extra name is safe to splice in.
    private static func subjectAltNameList(_ extraHostnames: [String]) throws(CertificateGenerationError) -> String {
        var entries = ["DNS:localhost", "IP:127.0.0.1", "IP:::1"]
        for name in extraHostnames {
            let entry: String
            if IPAddressLiteral.matches(name) {
                entry = "IP:" + name
            } else {
                let allowed = name.utf8.allSatisfy { byte in
                    (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                        || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                        || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                        || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "*")
                }
                guard allowed, !name.isEmpty, name.utf8.count <= 253 else {
                    throw CertificateGenerationError(
                        message:
                            "invalid extra host name '\(name)': use letters, digits, '-', '.', '*' or an IP address"
                    )
                }
                entry = "DNS:" + name
            }
            if !entries.contains(entry) { entries.append(entry) }
        }
        return entries.joined(separator: ",")
    }

    /// Builds and signs one X.509 v3 certificate (`X509*`, caller frees). `issuer == nil` means
    /// self-signed.
    private static func makeCertificate(
        commonName: String,
        key: OpaquePointer,
        issuer: OpaquePointer?,
        issuerKey: OpaquePointer,
        notBefore: Int,
        notAfter: Int,
        extensions: [(Int32, String)]
    ) throws(CertificateGenerationError) -> OpaquePointer {
        OpenSSLErrorQueue.clear()
        guard let certificate = X509_new() else { throw openSSLError("allocate a certificate") }
        var succeeded = false
        defer { if !succeeded { X509_free(certificate) } }

        guard X509_set_version(certificate, 2) == 1,  // 2 means v3
            setRandomSerial(certificate),
            X509_gmtime_adj(X509_getm_notBefore(certificate), notBefore) != nil,
            X509_gmtime_adj(X509_getm_notAfter(certificate), notAfter) != nil,
            X509_set_pubkey(certificate, key) == 1
        else { throw openSSLError("fill in certificate fields") }

        guard let name = X509_NAME_new() else { throw openSSLError("allocate a certificate name") }
        defer { X509_NAME_free(name) }
        guard X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, "Fanfare", -1, -1, 0) == 1,
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, commonName, -1, -1, 0) == 1,
            X509_set_subject_name(certificate, name) == 1,
            X509_set_issuer_name(certificate, issuer.map { X509_get_subject_name($0) } ?? name) == 1
        else { throw openSSLError("set the certificate names") }

        var extensionContext = X509V3_CTX()
        X509V3_set_ctx(&extensionContext, issuer ?? certificate, certificate, nil, nil, 0)
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_conf_nid(nil, &extensionContext, nid, value) else {
                throw openSSLError("build certificate extension '\(value)'")
            }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(certificate, ext, -1) == 1 else { throw openSSLError("add extension '\(value)'") }
        }

        guard X509_sign(certificate, issuerKey, EVP_sha256()) > 0 else { throw openSSLError("sign the certificate") }
        succeeded = true
        return certificate
    }

    /// A random positive 127-bit serial: unique enough that browsers and OpenSSL never see two
    /// different certificates from "the same" CA with the same serial.
    private static func setRandomSerial(_ certificate: OpaquePointer) -> Bool {
        guard let number = BN_new() else { return false }
        defer { BN_free(number) }
        guard BN_rand(number, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1 else { return false }
        return BN_to_ASN1_INTEGER(number, X509_get_serialNumber(certificate)) != nil
    }

    private static func write(_ bytes: [UInt8]?, to path: String, mode: UInt32) throws(CertificateGenerationError) {
        guard let bytes else { throw openSSLError("encode PEM for '\(path)'") }
        if let error = LocalFile.write(bytes, to: path, mode: mode) {
            throw CertificateGenerationError(message: "cannot write '\(path)': \(error.reason)")
        }
    }

    static func openSSLError(_ operation: String) -> CertificateGenerationError {
        CertificateGenerationError(message: "OpenSSL failed to \(operation): \(OpenSSLErrorQueue.drain())")
    }
}

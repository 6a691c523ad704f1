// Reusing a localhost chain written earlier (the simulator's --state-dir): only after checking it still works.
import COpenSSL

extension CertificateAuthority {
    /// The chain `generateLocalhostChain(in: directory)` wrote earlier, checked as a client would check it.
    ///
    /// Returns nil when none of `ca.pem`, `server.pem`, `server-key.pem` exists (nothing to reuse: generate).
    /// Throws, naming the file and the problem, when only some exist, when one cannot be read or parsed, when
    /// the key is not the certificate's, when the CA did not sign the certificate, when either certificate
    /// is expired or not yet valid, or when the certificate does not cover `localhost` and `127.0.0.1`.
    /// Never rewrites anything: a client may trust that CA already.
    public static func existingLocalhostChain(
        in directory: String
    ) throws(CertificateGenerationError) -> GeneratedCertificates? {
        let files = GeneratedCertificates(directory: directory)
        let present = files.all.filter { LocalFile.exists($0) }
        if present.isEmpty { return nil }
        if present.count < files.all.count {
            let missing = files.all.filter { !present.contains($0) }
            throw CertificateGenerationError(
                message: "incomplete certificate files in '\(directory)': \(missing.joined(separator: ", ")) missing "
                    + "(\(present.joined(separator: ", ")) present)")
        }

        let ca = try readCertificate(files.caCertificateFile)
        defer { X509_free(ca) }
        let server = try readCertificate(files.certificateFile)
        defer { X509_free(server) }
        let key = try readKey(files.privateKeyFile)
        defer { EVP_PKEY_free(key) }

        OpenSSLErrorQueue.clear()
        guard X509_check_private_key(server, key) == 1 else {
            OpenSSLErrorQueue.clear()
            throw CertificateGenerationError(
                message: "'\(files.privateKeyFile)' is not the private key of '\(files.certificateFile)'")
        }
        try verify(server, issuedBy: ca, files: files)
        guard X509_check_host(server, "localhost", 9, 0, nil) == 1, X509_check_ip_asc(server, "127.0.0.1", 0) == 1
        else {
            throw CertificateGenerationError(
                message: "'\(files.certificateFile)' does not cover localhost and 127.0.0.1")
        }
        return files
    }

    /// Chain, signature, validity period and server purpose, as a TLS client's verification does them.
    private static func verify(
        _ server: OpaquePointer, issuedBy ca: OpaquePointer, files: GeneratedCertificates
    ) throws(CertificateGenerationError) {
        OpenSSLErrorQueue.clear()
        guard let store = X509_STORE_new() else { throw openSSLError("allocate a certificate store") }
        defer { X509_STORE_free(store) }
        guard let context = X509_STORE_CTX_new() else { throw openSSLError("allocate a verification context") }
        defer { X509_STORE_CTX_free(context) }
        guard X509_STORE_add_cert(store, ca) == 1, X509_STORE_CTX_init(context, store, server, nil) == 1,
            X509_STORE_CTX_set_purpose(context, X509_PURPOSE_SSL_SERVER) == 1
        else { throw openSSLError("set up certificate verification") }
        guard X509_verify_cert(context) != 1 else { return }
        let code = X509_STORE_CTX_get_error(context)
        let depth = X509_STORE_CTX_get_error_depth(context)
        OpenSSLErrorQueue.clear()
        let reason = String(cString: X509_verify_cert_error_string(Int(code)))
        let file = depth >= 1 ? files.caCertificateFile : files.certificateFile
        throw CertificateGenerationError(
            message: "'\(file)' does not verify against '\(files.caCertificateFile)': \(reason)")
    }

    private static func readCertificate(_ path: String) throws(CertificateGenerationError) -> OpaquePointer {
        let bytes = try readFile(path)
        OpenSSLErrorQueue.clear()
        let certificate: OpaquePointer? = bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_X509(bio, nil, nil, nil)
        }
        guard let certificate else {
            throw CertificateGenerationError(
                message: "'\(path)' is not a PEM certificate: \(OpenSSLErrorQueue.drain())")
        }
        return certificate
    }

    private static func readKey(_ path: String) throws(CertificateGenerationError) -> OpaquePointer {
        let bytes = try readFile(path)
        OpenSSLErrorQueue.clear()
        let key: OpaquePointer? = bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, fanfareRefusePassphrase, nil)
        }
        guard let key else {
            throw CertificateGenerationError(
                message: "'\(path)' is not a PEM private key: \(OpenSSLErrorQueue.drain())")
        }
        return key
    }

    private static func readFile(_ path: String) throws(CertificateGenerationError) -> [UInt8] {
        switch LocalFile.read(path) {
        case .success(let bytes): return bytes
        case .failure(let error): throw CertificateGenerationError(message: "cannot read '\(path)': \(error.reason)")
        }
    }
}

import Glibc
internal import NIOSSL

/// `--tls-cert FILE --tls-key FILE`: the API over HTTPS (review M3). Read and checked when made, so a file the
/// service cannot use stops it before it listens, with the file named; nothing is read again later.
public struct ServiceTLS: Sendable {
    public let certificateFile: String
    public let privateKeyFile: String
    /// TLS 1.2 and 1.3 with swift-nio-ssl's default ciphers; no client certificates.
    let configuration: TLSConfiguration

    public init(certificateFile: String, privateKeyFile: String) throws(ServiceTLSError) {
        self.certificateFile = certificateFile
        self.privateKeyFile = privateKeyFile
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(try Self.read(certificateFile, flag: "--tls-cert"))
        } catch let error as ServiceTLSError {
            throw error
        } catch {
            throw ServiceTLSError("--tls-cert \(certificateFile): not a PEM certificate (\(error))")
        }
        guard let leaf = chain.first else {
            throw ServiceTLSError("--tls-cert \(certificateFile): no PEM certificate in it")
        }
        if leaf.notValidAfter < time(nil) {
            throw ServiceTLSError("--tls-cert \(certificateFile): the certificate has expired")
        }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(bytes: try Self.read(privateKeyFile, flag: "--tls-key"), format: .pem)
        } catch let error as ServiceTLSError {
            throw error
        } catch {
            throw ServiceTLSError("--tls-key \(privateKeyFile): not an unencrypted PEM private key")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        do {
            // Making a context checks that the key belongs to the certificate.
            _ = try NIOSSLContext(configuration: configuration)
        } catch {
            throw ServiceTLSError(
                "--tls-key \(privateKeyFile) does not go with the certificate in --tls-cert \(certificateFile) "
                    + "(\(error))")
        }
        self.configuration = configuration
    }

    /// A key or certificate file's bytes (they are small); the reason in words when it cannot be read.
    private static func read(_ path: String, flag: String) throws(ServiceTLSError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw ServiceTLSError("\(flag) \(path): cannot read it (\(String(cString: strerror(errno))))")
        }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while bytes.count <= maximumFileBytes {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw ServiceTLSError("\(flag) \(path): cannot read it (\(String(cString: strerror(errno))))")
            }
            if count == 0 { return bytes }
            bytes += buffer[0..<count]
        }
        throw ServiceTLSError("\(flag) \(path): larger than \(maximumFileBytes) bytes, not a PEM file")
    }

    /// PEM certificate chains and keys are a few KiB.
    static let maximumFileBytes = 1 << 20
}

/// Why `--tls-cert` / `--tls-key` cannot be used; the message names the file.
public struct ServiceTLSError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

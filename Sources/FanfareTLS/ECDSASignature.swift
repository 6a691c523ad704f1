// Converting ECDSA P-256 signatures between OpenSSL's DER form and JOSE's fixed 64-byte r‖s.
import COpenSSL

enum ECDSASignature {
    /// Bytes per coordinate for P-256.
    static let coordinateByteCount = 32

    /// DER `SEQUENCE { r INTEGER, s INTEGER }` → r‖s, each left-padded to 32 bytes.
    static func rawFromDER(_ der: [UInt8], count: Int) -> [UInt8]? {
        precondition(count <= der.count)
        let signature: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, count)
        }
        guard let signature else { return nil }
        defer { ECDSA_SIG_free(signature) }
        var r: OpaquePointer? = nil
        var s: OpaquePointer? = nil
        ECDSA_SIG_get0(signature, &r, &s)
        guard let r, let s else { return nil }
        var raw = [UInt8](repeating: 0, count: 2 * coordinateByteCount)
        let written = raw.withUnsafeMutableBufferPointer { buffer in
            (
                BN_bn2binpad(r, buffer.baseAddress, Int32(coordinateByteCount)),
                BN_bn2binpad(s, buffer.baseAddress! + coordinateByteCount, Int32(coordinateByteCount))
            )
        }
        guard written.0 == Int32(coordinateByteCount), written.1 == Int32(coordinateByteCount) else { return nil }
        return raw
    }

    /// r‖s (64 bytes) → DER, for `EVP_DigestVerify`. Nil if `raw` is not 64 bytes.
    static func derFromRaw(_ raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 2 * coordinateByteCount, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let coordinates: (OpaquePointer?, OpaquePointer?) = raw.withUnsafeBufferPointer { buffer in
            (
                BN_bin2bn(buffer.baseAddress, Int32(coordinateByteCount), nil),
                BN_bin2bn(buffer.baseAddress! + coordinateByteCount, Int32(coordinateByteCount), nil)
            )
        }
        guard let r = coordinates.0, let s = coordinates.1 else {
            BN_free(coordinates.0)
            BN_free(coordinates.1)
            return nil
        }
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {  // takes ownership of r and s on success
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }
}

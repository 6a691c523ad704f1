// Capturing what an OpenSSL writer (PEM encoders) produces, without touching the file system.
import COpenSSL

enum MemoryBIO {
    /// Runs `write` against a fresh memory BIO and returns the bytes it wrote, or nil if it
    /// did not return 1.
    static func collect(_ write: (OpaquePointer) -> Int32) -> [UInt8]? {
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { return nil }
        let count = Int(capns_BIO_pending(bio))
        var bytes = [UInt8](repeating: 0, count: count)
        let read = bytes.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32(count)) }
        guard read == Int32(count) else { return nil }
        return bytes
    }
}

import CFanfareCryptoPool

/// OpenSSL's small allocations come from a per-thread cache (Sources/CFanfareCryptoPool), installed when the
/// program loads: OpenSSL 3.0 allocates and frees a 40-byte block on every `SSL_write_ex`/`SSL_read_ex`, and
/// with the cache that costs no malloc in steady state. `FANFARE_OPENSSL_POOL=0` turns it off.
public enum OpenSSLAllocationCache {
    /// False when turned off, or when OpenSSL had allocated before the program's constructors ran.
    public static var isInstalled: Bool { fanfare_crypto_pool_installed() == 1 }

    /// OpenSSL allocations that went to malloc (cache empty, or blocks over 512 bytes).
    public static var misses: UInt64 { UInt64(fanfare_crypto_pool_misses()) }
}

import CFanfareCryptoPool

/// An opt-in per-thread cache for OpenSSL's small allocations (Sources/CFanfareCryptoPool): OpenSSL 3.0
/// allocates and frees a 40-byte block on every `SSL_write_ex`/`SSL_read_ex`, and with the cache that costs
/// no malloc in steady state.
///
/// It replaces the allocator of every OpenSSL user in the process, so linking Fanfare never turns it on:
/// the `fanfare` binary calls `install()` first thing, and an application that wants it does the same before
/// anything in the process uses OpenSSL. `FANFARE_OPENSSL_POOL=0` in the environment keeps it off.
public enum OpenSSLAllocationCache {
    /// Installs the cache; returns whether it is installed. False when `FANFARE_OPENSSL_POOL=0`, or when
    /// OpenSSL had already allocated (OpenSSL then refuses a new allocator and nothing changes). Call once,
    /// early; repeated calls return the first answer.
    @discardableResult
    public static func install() -> Bool { fanfare_crypto_pool_install() == 1 }

    /// Whether `install()` succeeded in this process.
    public static var isInstalled: Bool { fanfare_crypto_pool_installed() == 1 }

    /// OpenSSL allocations that went to malloc (cache empty, or blocks over 512 bytes).
    public static var misses: UInt64 { UInt64(fanfare_crypto_pool_misses()) }
}

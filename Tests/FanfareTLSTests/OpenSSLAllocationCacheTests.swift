import FanfareTLS
import Testing

@Suite struct OpenSSLAllocationCacheTests {
    @Test func theCacheIsInstalledBeforeOpenSSLAllocates() {
        // The constructor runs at load, before any test touches OpenSSL (unless FANFARE_OPENSSL_POOL=0).
        #expect(OpenSSLAllocationCache.isInstalled)
    }
}

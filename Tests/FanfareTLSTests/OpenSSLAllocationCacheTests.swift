import FanfareTLS
import FanfareTestSupport
import Testing

@Suite(.ownThread) struct OpenSSLAllocationCacheTests {
    @Test func linkingTheLibraryLeavesOpenSSLsAllocatorAlone() {
        // Nothing in this test process opts in, and loading FanfareTLS must not replace the host's allocator.
        #expect(!OpenSSLAllocationCache.isInstalled)
    }
}

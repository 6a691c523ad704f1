// A per-thread cache of OpenSSL's small allocations, installed with CRYPTO_set_mem_functions when the
// program loads (before OpenSSL can allocate anything). OpenSSL 3.0 allocates and frees a 40-byte
// WPACKET_SUB on every SSL_write_ex/SSL_read_ex; with this cache those come from a thread-local free list,
// so the steady-state push path does not reach malloc. FANFARE_OPENSSL_POOL=0 in the environment turns it off.
#ifndef FANFARE_CRYPTO_POOL_H
#define FANFARE_CRYPTO_POOL_H
#include <stddef.h>

/// 1 when the cache is installed, 0 when it is off or OpenSSL had already allocated (then nothing changes).
int fanfare_crypto_pool_installed(void);
/// OpenSSL allocations that went to malloc (the cache was empty, or the block is over 512 bytes).
unsigned long long fanfare_crypto_pool_misses(void);

#endif

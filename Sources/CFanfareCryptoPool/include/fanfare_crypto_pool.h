// A per-thread cache of OpenSSL's small allocations, installed with CRYPTO_set_mem_functions by an explicit
// call before OpenSSL allocates anything (the fanfare binary makes it first thing; a library user opts in).
// It replaces the whole process's OpenSSL allocator, which is why loading the library never installs it.
// OpenSSL 3.0 allocates and frees a 40-byte WPACKET_SUB on every SSL_write_ex/SSL_read_ex; with this cache
// those come from a thread-local free list, so the steady-state push path does not reach malloc.
// FANFARE_OPENSSL_POOL=0 in the environment turns it off.
#ifndef FANFARE_CRYPTO_POOL_H
#define FANFARE_CRYPTO_POOL_H
#include <stddef.h>

/// Installs the cache (once; later calls return the first answer). 1 when installed, 0 when turned off or
/// when OpenSSL had already allocated (then nothing changes).
int fanfare_crypto_pool_install(void);
/// 1 when the cache is installed.
int fanfare_crypto_pool_installed(void);
/// OpenSSL allocations that went to malloc (the cache was empty, or the block is over 512 bytes).
unsigned long long fanfare_crypto_pool_misses(void);

#endif

// See include/fanfare_crypto_pool.h. Every block carries a 16-byte header (its size class and the size
// asked for), so free and realloc know where it belongs. Blocks up to 512 bytes are kept in four size
// classes per thread (at most 1024 cached per class); larger ones go straight to malloc. A block freed on
// another thread joins that thread's cache (no locks). A thread's cache is returned to malloc when it exits.
#include "fanfare_crypto_pool.h"
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CLASS_COUNT 4
#define CACHE_LIMIT 1024
#define LARGE_CLASS 0xFF
static const size_t class_sizes[CLASS_COUNT] = {64, 128, 256, 512};

typedef struct header {
    uint64_t size;   // bytes asked for
    uint64_t klass;  // size class, or LARGE_CLASS
} header;
_Static_assert(sizeof(header) == 16, "the header keeps 16-byte alignment");

typedef struct free_block { struct free_block *next; } free_block;

typedef struct thread_cache {
    free_block *heads[CLASS_COUNT];
    unsigned counts[CLASS_COUNT];
} thread_cache;

static __thread thread_cache cache;
static __thread int cache_registered;
static pthread_key_t exit_key;
static int installed;
static unsigned long long misses;  // allocations that went to malloc (relaxed atomic; rare in steady state)

static void release_cache(void *unused) {
    (void)unused;
    for (int k = 0; k < CLASS_COUNT; k++) {
        free_block *block = cache.heads[k];
        while (block) {
            free_block *next = block->next;
            free((header *)block - 1);
            block = next;
        }
        cache.heads[k] = NULL;
        cache.counts[k] = 0;
    }
    // Frees after this (other exit destructors) register again, and POSIX runs this destructor again.
    cache_registered = 0;
}

static inline int class_for(size_t size) {
    for (int k = 0; k < CLASS_COUNT; k++)
        if (size <= class_sizes[k]) return k;
    return LARGE_CLASS;
}

static void *pool_malloc(size_t size, const char *file, int line) {
    (void)file; (void)line;
    int k = class_for(size);
    if (k != LARGE_CLASS && cache.heads[k]) {
        free_block *block = cache.heads[k];
        cache.heads[k] = block->next;
        cache.counts[k]--;
        ((header *)block - 1)->size = size;
        return block;
    }
    __atomic_fetch_add(&misses, 1, __ATOMIC_RELAXED);
    size_t capacity = k == LARGE_CLASS ? size : class_sizes[k];
    header *h = malloc(sizeof(header) + capacity);
    if (!h) return NULL;
    h->size = size;
    h->klass = (uint64_t)k;
    if (!cache_registered) {
        // Registering the exit hook costs one pthread_setspecific per thread, not per allocation.
        cache_registered = 1;
        pthread_setspecific(exit_key, &cache);
    }
    return h + 1;
}

static void pool_free(void *pointer, const char *file, int line) {
    (void)file; (void)line;
    if (!pointer) return;
    header *h = (header *)pointer - 1;
    int k = (int)h->klass;
    if (k != LARGE_CLASS && cache.counts[k] < CACHE_LIMIT) {
        if (!cache_registered) {
            cache_registered = 1;
            pthread_setspecific(exit_key, &cache);
        }
        free_block *block = pointer;
        block->next = cache.heads[k];
        cache.heads[k] = block;
        cache.counts[k]++;
        return;
    }
    free(h);
}

static void *pool_realloc(void *pointer, size_t size, const char *file, int line) {
    if (!pointer) return pool_malloc(size, file, line);
    if (size == 0) {
        pool_free(pointer, file, line);
        return NULL;
    }
    header *h = (header *)pointer - 1;
    int k = (int)h->klass;
    if (k != LARGE_CLASS && size <= class_sizes[k]) {
        h->size = size;
        return pointer;
    }
    void *bigger = pool_malloc(size, file, line);
    if (!bigger) return NULL;
    memcpy(bigger, pointer, h->size < size ? h->size : size);
    pool_free(pointer, file, line);
    return bigger;
}

static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static void install_pool(void) {
    const char *setting = getenv("FANFARE_OPENSSL_POOL");
    if (setting && strcmp(setting, "0") == 0) return;
    if (pthread_key_create(&exit_key, release_cache) != 0) return;
    // Refused (0) once OpenSSL has allocated anything: blocks from malloc must never reach pool_free.
    installed = CRYPTO_set_mem_functions(pool_malloc, pool_realloc, pool_free);
}

int fanfare_crypto_pool_install(void) {
    pthread_once(&install_once, install_pool);
    return installed;
}

int fanfare_crypto_pool_installed(void) { return installed; }
unsigned long long fanfare_crypto_pool_misses(void) { return __atomic_load_n(&misses, __ATOMIC_RELAXED); }

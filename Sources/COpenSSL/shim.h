// Thin C shim over OpenSSL 3: the function-like macros and macro-built constants Swift cannot import.
#ifndef FANFARE_COPENSSL_SHIM_H
#define FANFARE_COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/pem.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/rand.h>
#include <openssl/core_names.h>
#include <openssl/sha.h>

static const uint64_t capns_SSL_OP_NO_RENEGOTIATION = SSL_OP_NO_RENEGOTIATION;
static const uint64_t capns_SSL_OP_NO_COMPRESSION = SSL_OP_NO_COMPRESSION;

static inline long capns_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_mode(ctx, mode); }
static inline long capns_SSL_set_mode(SSL *ssl, long mode) { return SSL_set_mode(ssl, mode); }
static inline int capns_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int v) { return (int)SSL_CTX_set_min_proto_version(ctx, v); }
static inline int capns_SSL_set_tlsext_host_name(SSL *ssl, const char *name) { return (int)SSL_set_tlsext_host_name(ssl, name); }
static inline long capns_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_session_cache_mode(ctx, mode); }
static inline size_t capns_BIO_pending(BIO *b) { return (size_t)BIO_pending(b); }
static inline long capns_BIO_set_mem_eof_return(BIO *b, long v) { return BIO_set_mem_eof_return(b, v); }
static inline int capns_TLS1_2_VERSION(void) { return TLS1_2_VERSION; }
static inline int capns_TLS1_3_VERSION(void) { return TLS1_3_VERSION; }

/* SHA-1 of two byte strings, one after the other, into md (20 bytes); 1 on success, 0 when this OpenSSL has no
   low-level SHA-1 (built without the 3.0-deprecated API: the caller then hashes in Swift). SHA1_Init/Update/Final
   are deprecated in OpenSSL 3 but are its only path to the SHA-NI code that allocates nothing: EVP_Digest
   allocates a context per call. Used for wave pushes' name-based apns-ids (FanfareTLS `Digest.sha1`). */
static inline int capns_sha1_two(const void *first, size_t firstCount, const void *second, size_t secondCount,
                                 unsigned char *md) {
#ifndef OPENSSL_NO_DEPRECATED_3_0
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    SHA_CTX context;
    if (SHA1_Init(&context) != 1) return 0;
    if (firstCount > 0 && SHA1_Update(&context, first, firstCount) != 1) return 0;
    if (secondCount > 0 && SHA1_Update(&context, second, secondCount) != 1) return 0;
    return SHA1_Final(md, &context);
#pragma clang diagnostic pop
#else
    (void)first; (void)firstCount; (void)second; (void)secondCount; (void)md;
    return 0;
#endif
}

#endif

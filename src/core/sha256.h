/* sha256.h - OpenSSL's SHA-256, looked up once per process.
 *
 * EVP_sha256() only names the algorithm: every EVP_DigestInit_ex() given it
 * asks the provider store for an implementation again (locks, a hash table
 * lookup, reference counts). A request's fingerprint is a few dozen bytes,
 * so that lookup was most of its cost: 940 ns against 410 ns with the
 * implementation fetched once (a 31-byte body, this repository's bench
 * machine). idem_sha256() fetches it on first use and keeps it; an EVP_MD
 * is safe to share between threads. */
#ifndef IDEM_CORE_SHA256_H
#define IDEM_CORE_SHA256_H

#include <stddef.h>

#include <openssl/evp.h>

#define IDEM_SHA256_LEN 32

/* The fetched implementation (EVP_sha256() if the fetch failed). */
const EVP_MD *idem_sha256(void);

/* out = SHA-256(data[0..len)): 0, or -1 when OpenSSL cannot allocate. */
int idem_sha256_digest(const void *data, size_t len, unsigned char out[IDEM_SHA256_LEN]);

/* The same as 64 lowercase hex digits and a NUL: 0, or -1 (out untouched). */
int idem_sha256_hex(const void *data, size_t len, char out[2 * IDEM_SHA256_LEN + 1]);

#endif

/*
 * fingerprint.c - what makes two requests "the same".
 *
 * SHA-256 over method, target and body, each preceded by its length as 8
 * bytes big-endian. The length prefixes are what keep ("POST", "/ab", "c")
 * and ("POST", "/a", "bc") apart: plain concatenation would hash both to the
 * same bytes. With IDEM_FP_CANONICAL_JSON the body is hashed in its
 * canonical form (json.c), so key order and whitespace stop mattering.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "core/be64.h"
#include "core/sha256.h"
#include "idem/idem.h"

static int digest_field(EVP_MD_CTX *ctx, const void *data, size_t len) {
  uint8_t prefix[8];
  idem_be64_put(prefix, (uint64_t)len);
  if (EVP_DigestUpdate(ctx, prefix, sizeof prefix) != 1) return -1;
  if (len > 0 && EVP_DigestUpdate(ctx, data, len) != 1) return -1;
  return 0;
}

/* One digest context per thread, kept between fingerprints: a new one per
 * request cost an allocation and OpenSSL's set-up of the algorithm each
 * time (about 3% of a replay's user-space instructions). Freed when the
 * thread ends. */
static pthread_key_t ctx_key;
static int ctx_key_made;

static void ctx_free(void *ctx) { EVP_MD_CTX_free(ctx); }
static void ctx_key_make(void) { ctx_key_made = pthread_key_create(&ctx_key, ctx_free) == 0; }

/* libidem.so unloaded by dlclose: no thread may run ctx_free after it */
__attribute__((destructor)) static void ctx_key_drop(void) {
  if (ctx_key_made)
    pthread_key_delete(ctx_key);
}

static EVP_MD_CTX *thread_ctx(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (pthread_once(&once, ctx_key_make) || !ctx_key_made)
    return NULL;
  EVP_MD_CTX *ctx = pthread_getspecific(ctx_key);
  if (!ctx && (ctx = EVP_MD_CTX_new()) && pthread_setspecific(ctx_key, ctx)) {
    EVP_MD_CTX_free(ctx);
    ctx = NULL;
  }
  return ctx;
}

static int digest(const char *method, const char *target, const void *body,
                  size_t body_len, uint8_t out[IDEM_FINGERPRINT_LEN]) {
  EVP_MD_CTX *kept = thread_ctx(), *ctx = kept ? kept : EVP_MD_CTX_new();
  unsigned int n = 0;
  int ok;
  if (!ctx) return IDEM_ENOMEM;
  ok = EVP_DigestInit_ex2(ctx, idem_sha256(), NULL) == 1 &&
       digest_field(ctx, method, strlen(method)) == 0 &&
       digest_field(ctx, target, strlen(target)) == 0 &&
       digest_field(ctx, body, body_len) == 0 &&
       EVP_DigestFinal_ex(ctx, out, &n) == 1 && n == IDEM_FINGERPRINT_LEN;
  if (!kept)
    EVP_MD_CTX_free(ctx);
  /* OpenSSL fails a SHA-256 update only when it cannot allocate. */
  return ok ? 0 : IDEM_ENOMEM;
}

int idem_fingerprint(const char *method, const char *target, const void *body,
                     size_t body_len, unsigned flags,
                     uint8_t out[IDEM_FINGERPRINT_LEN]) {
  char *canon = NULL;
  size_t canon_len = 0;
  int err;
  if (!out || (!body && body_len > 0) || (flags & ~IDEM_FP_CANONICAL_JSON))
    return IDEM_EINVAL;
  if (!method) method = "";
  if (!target) target = "";
  if (flags & IDEM_FP_CANONICAL_JSON) {
    err = idem_json_canonical(body, body_len, &canon, &canon_len);
    if (err != 0) return err;
    body = canon;
    body_len = canon_len;
  }
  err = digest(method, target, body, body_len, out);
  free(canon);
  return err;
}

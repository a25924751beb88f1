/* sha256.c - see sha256.h. */
#include <pthread.h>

#include "core/sha256.h"
#include "core/text.h"

static pthread_once_t fetched = PTHREAD_ONCE_INIT;
static const EVP_MD *implementation;

static void fetch(void) {
  /* held for the life of the process, as EVP_sha256()'s own object is */
  EVP_MD *md = EVP_MD_fetch(NULL, "SHA256", NULL);
  implementation = md ? md : EVP_sha256();
}

const EVP_MD *idem_sha256(void) {
  pthread_once(&fetched, fetch);
  return implementation;
}

int idem_sha256_digest(const void *data, size_t len, unsigned char out[IDEM_SHA256_LEN]) {
  unsigned n = 0;
  return EVP_Digest(data, len, out, &n, idem_sha256(), NULL) == 1 && n == IDEM_SHA256_LEN
             ? 0
             : -1;
}

int idem_sha256_hex(const void *data, size_t len, char out[2 * IDEM_SHA256_LEN + 1]) {
  unsigned char md[IDEM_SHA256_LEN];
  if (idem_sha256_digest(data, len, md))
    return -1;
  idem_hex_encode(md, IDEM_SHA256_LEN, out);
  return 0;
}

/* be64.h - 64-bit integers as 8 big-endian bytes: the order in which
 * memcmp (and so LMDB's key order) sorts them, and the one length prefix
 * fingerprints use. */
#ifndef IDEM_CORE_BE64_H
#define IDEM_CORE_BE64_H

#include <stdint.h>

static inline void idem_be64_put(unsigned char *p, uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8)
    p[i] = (unsigned char)v;
}

static inline uint64_t idem_be64_get(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = v << 8 | p[i];
  return v;
}

#endif

/* scoped_key.h - (scope, key) as one byte string, for stores keyed by bytes.
 *
 * Layout: scope length (1 byte), scope, key. Records of one scope sort
 * together, and no (scope, key) pair can be mistaken for another. The longest
 * is 1 + 255 + 255 = 511 bytes: exactly LMDB's default key size limit.
 */
#ifndef IDEM_CORE_SCOPED_KEY_H
#define IDEM_CORE_SCOPED_KEY_H

#include <stddef.h>
#include <string.h>

#define IDEM_SCOPED_KEY_MAX (1 + 255 + 255)

/* Write the scoped key into buf (IDEM_SCOPED_KEY_MAX bytes); returns its
 * length. scope NULL counts as "". Inputs are validated by the caller. */
size_t idem_scoped_key_encode(const char *scope, const char *key, unsigned char *buf);

/* The order of scoped keys (LIST's order in every store): bytes, then the
 * shorter first. <0, 0, >0 as memcmp. */
static inline int idem_scoped_key_cmp(const unsigned char *a, size_t alen,
                                      const unsigned char *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  return c ? c : (alen > blen) - (alen < blen);
}

/* Split a scoped key into NUL-terminated scope and key (each 256 bytes).
 * Returns 0, or -1 when buf is not a scoped key. */
int idem_scoped_key_decode(const unsigned char *buf, size_t len, char *scope, char *key);

#endif

/* fnv.h - FNV-1a over bytes: under otable.h's idem_otable_hash, the hash
 * of the in-memory tables keyed by scoped keys (memory.c, cache.c). Fast on
 * short keys, and the keys are not chosen by an attacker who sees the table
 * (its size is private). */
#ifndef IDEM_CORE_FNV_H
#define IDEM_CORE_FNV_H

#include <stddef.h>
#include <stdint.h>

static inline size_t idem_fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 1099511628211ull;
  return (size_t)h;
}

#endif

/*
 * otable.h - an open-addressed hash table (linear probing) of items keyed
 * by byte strings, for the in-memory tables (memory.c's records, cache.c's
 * entries). Each slot holds an item's hash beside its pointer, so looking
 * up a key that is absent reads the slots only: in a table of millions (a
 * gateway on unique keys holds every key for its --ttl) that is one cache
 * miss, where a chained table took one for the bucket and one for every
 * node on the chain. A table owns nothing: the caller allocates and frees
 * items. Not thread-safe (callers hold a lock).
 *
 * The hash must be well mixed in its top bits, which pick the home slot:
 * idem_otable_hash gives such a hash.
 */
#ifndef IDEM_CORE_OTABLE_H
#define IDEM_CORE_OTABLE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/fnv.h"

typedef struct {
  uint64_t hash;
  void *item; /* NULL: the slot is empty */
} idem_oslot;

typedef struct {
  idem_oslot *slots;
  size_t mask;  /* slots - 1, slots a power of two */
  unsigned shift; /* 64 - log2(slots): hash >> shift is the home slot */
  size_t count;
} idem_otable;

/* Does item hold key? The caller's comparison, given to idem_otable_find. */
typedef int (*idem_otable_match)(const void *item, const unsigned char *key, size_t klen);

#define IDEM_OTABLE_HUGE ((size_t)2 << 20) /* an x86-64 huge page */

/* n empty slots. From IDEM_OTABLE_HUGE up, on huge pages where the kernel
 * gives them (transparent huge pages, asked for with madvise): a lookup
 * lands on a random slot, and on 4 KiB pages that was a TLB miss as well
 * as a cache miss, a page walk that costs more than the miss in a VM. */
static inline idem_oslot *idem_otable_slots(size_t n) {
  size_t size = n * sizeof(idem_oslot);
  if (size < IDEM_OTABLE_HUGE)
    return calloc(n, sizeof(idem_oslot));
  void *p;
  if (posix_memalign(&p, IDEM_OTABLE_HUGE, size))
    return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE); /* a hint: without it, 4 KiB pages */
#endif
  return memset(p, 0, size);
}

static inline int idem_otable_init(idem_otable *t) {
  t->mask = 63;
  t->shift = 64 - 6;
  t->count = 0;
  t->slots = idem_otable_slots(t->mask + 1);
  return t->slots ? 0 : -1;
}

/* A key's hash for the table: FNV-1a times the golden ratio (Fibonacci
 * hashing), whose top bits are well mixed, where FNV-1a's own barely differ
 * between keys that differ in their last bytes ("order-1", "order-2"). */
static inline uint64_t idem_otable_hash(const unsigned char *key, size_t len) {
  return (uint64_t)idem_fnv1a(key, len) * UINT64_C(0x9E3779B97F4A7C15);
}

static inline size_t idem_otable_home(const idem_otable *t, uint64_t hash) {
  return (size_t)(hash >> t->shift);
}

/* The slot of key (whose hash is hash), or the empty slot where it would
 * go. It ends: idem_otable_add always leaves a slot empty. */
static inline size_t idem_otable_find(const idem_otable *t, uint64_t hash, const unsigned char *key,
                                      size_t klen, idem_otable_match match) {
  size_t i = idem_otable_home(t, hash);
  while (t->slots[i].item &&
         (t->slots[i].hash != hash || !match(t->slots[i].item, key, klen)))
    i = (i + 1) & t->mask;
  return i;
}

/* The first empty slot from hash's home: where an item of that hash goes
 * when its key is known to be absent. */
static inline size_t idem_otable_empty_slot(const idem_otable *t, uint64_t hash) {
  size_t i = idem_otable_home(t, hash);
  while (t->slots[i].item)
    i = (i + 1) & t->mask;
  return i;
}

/* Double the slots; -1 without memory. */
static inline int idem_otable_grow(idem_otable *t) {
  size_t n = (t->mask + 1) * 2;
  idem_oslot *slots = idem_otable_slots(n);
  if (!slots)
    return -1;
  idem_otable old = *t;
  t->slots = slots;
  t->mask = n - 1;
  t->shift--;
  for (size_t j = 0; j <= old.mask; j++)
    if (old.slots[j].item)
      slots[idem_otable_empty_slot(t, old.slots[j].hash)] = old.slots[j];
  free(old.slots);
  return 0;
}

/* Put item in slot i, an empty one from idem_otable_find, growing the
 * table first when it would be more than half full (which moves items:
 * slots found before are stale afterwards). -1 only when it cannot grow
 * and the item would take the last empty slot, where every find stops. */
static inline int idem_otable_add(idem_otable *t, size_t i, uint64_t hash, void *item) {
  if (t->count + 1 > (t->mask + 1) / 2) {
    if (idem_otable_grow(t) == 0)
      i = idem_otable_empty_slot(t, hash);
    else if (t->count + 1 > t->mask)
      return -1; /* fuller and slower is still correct, but not full */
  }
  t->slots[i].hash = hash;
  t->slots[i].item = item;
  t->count++;
  return 0;
}

/* Put item in slot i, which holds another item of the same key. */
static inline void idem_otable_replace(idem_otable *t, size_t i, void *item) { t->slots[i].item = item; }

/* Empty slot i. Later items of its run move back into the gap when their
 * home allows (backward-shift deletion: no tombstones), so slot i may hold
 * another item afterwards, one not yet seen by a caller walking the slots
 * upwards: such a walk looks at slot i again. */
static inline void idem_otable_remove(idem_otable *t, size_t i) {
  for (size_t j = (i + 1) & t->mask; t->slots[j].item; j = (j + 1) & t->mask) {
    size_t home = idem_otable_home(t, t->slots[j].hash);
    if (((j - home) & t->mask) >= ((j - i) & t->mask)) { /* home is at i or before */
      t->slots[i] = t->slots[j];
      i = j;
    }
  }
  t->slots[i].item = NULL;
  t->count--;
}

#endif

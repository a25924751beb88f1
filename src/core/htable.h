/*
 * htable.h - a chained hash table of byte-string keys, for the in-memory
 * tables (memory.c's records, cache.c's entries). A table owns nothing: each
 * entry embeds an idem_hnode pointing at its own key bytes, and the caller
 * allocates and frees entries. Not thread-safe (callers hold their lock).
 */
#ifndef IDEM_CORE_HTABLE_H
#define IDEM_CORE_HTABLE_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/fnv.h"

typedef struct idem_hnode {
  struct idem_hnode *next;
  size_t hash; /* idem_fnv1a of the key, set before link (the caller has it
                * from finding the slot): a chain walk and a rehash read no
                * key bytes of the nodes that differ */
  size_t klen;
  const unsigned char *key;
} idem_hnode;

typedef struct {
  idem_hnode **buckets;
  size_t nbuckets; /* a power of two */
  size_t count;
} idem_htable;

/* The entry of type holding node as member. */
#define IDEM_HNODE_DATA(node, type, member) ((type *)((char *)(node) - offsetof(type, member)))

static inline int idem_htable_init(idem_htable *t) {
  t->nbuckets = 64;
  t->count = 0;
  t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
  return t->buckets ? 0 : -1;
}

/* Where the node of key (whose idem_fnv1a is hash) is, or would be linked:
 * *slot is NULL when absent. */
static inline idem_hnode **idem_htable_slot_hashed(idem_htable *t, size_t hash,
                                                   const unsigned char *key, size_t klen) {
  idem_hnode **slot = &t->buckets[hash & (t->nbuckets - 1)];
  while (*slot && ((*slot)->hash != hash || (*slot)->klen != klen || memcmp((*slot)->key, key, klen)))
    slot = &(*slot)->next;
  return slot;
}

static inline idem_hnode **idem_htable_slot(idem_htable *t, const unsigned char *key, size_t klen) {
  return idem_htable_slot_hashed(t, idem_fnv1a(key, klen), key, klen);
}

/* Link node (its key, klen and hash set) at slot, an empty one from
 * idem_htable_slot; the table may grow, so slots found before are stale
 * afterwards. */
static inline void idem_htable_link(idem_htable *t, idem_hnode **slot, idem_hnode *node) {
  node->next = NULL;
  *slot = node;
  if (++t->count <= t->nbuckets)
    return;
  size_t n = t->nbuckets * 2;
  idem_hnode **buckets = calloc(n, sizeof *buckets);
  if (!buckets)
    return; /* longer chains: slower, still correct */
  for (size_t i = 0; i < t->nbuckets; i++)
    for (idem_hnode *e = t->buckets[i], *next; e; e = next) {
      next = e->next;
      idem_hnode **head = &buckets[e->hash & (n - 1)];
      e->next = *head;
      *head = e;
    }
  free(t->buckets);
  t->buckets = buckets;
  t->nbuckets = n;
}

/* Take the node at slot out of the table (the caller frees its entry). */
static inline idem_hnode *idem_htable_unlink(idem_htable *t, idem_hnode **slot) {
  idem_hnode *node = *slot;
  *slot = node->next;
  t->count--;
  return node;
}

#endif

/*
 * lmdb_overlay.c - the in-memory state of records the log holds ahead of
 * LMDB (see lmdb_overlay.h): a chained hash table under one mutex.
 */
#include <stdlib.h>
#include <string.h>

#include "store/lmdb_overlay.h"

/* The table starts at MIN_BUCKETS, doubles when it holds more entries than
 * buckets, and is halved down (never below MIN_BUCKETS) once pruning leaves
 * fewer than a quarter: after a burst (a checkpoint that kept failing for a
 * while) the checkpointer's collect and the writer's prune, which walk every
 * bucket under the lock every checkpoint, go back to a short walk. */
#define MIN_BUCKETS 1024

struct lmdb_ov_entry {
  lmdb_ov_entry *next;
  uint32_t hash;
  lmdb_blob *val; /* durable, or NULL */
  uint64_t seq;   /* the batch that made val durable */
  lmdb_blob *staged;
  size_t klen;
  unsigned char key[];
};

lmdb_blob *lmdb_blob_new(size_t len) {
  lmdb_blob *b = malloc(sizeof *b + len);
  if (!b)
    return NULL;
  atomic_init(&b->refs, 1);
  b->del = 0;
  b->expires_at = 0;
  b->len = len;
  return b;
}

void lmdb_blob_ref(lmdb_blob *b) { atomic_fetch_add(&b->refs, 1); }

void lmdb_blob_unref(lmdb_blob *b) {
  if (b && atomic_fetch_sub(&b->refs, 1) == 1)
    free(b);
}

static uint32_t hash_of(const unsigned char *k, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ k[i]) * 16777619u;
  return h;
}

int lmdb_overlay_init(lmdb_overlay *ov) {
  memset(ov, 0, sizeof *ov);
  ov->nbuckets = MIN_BUCKETS;
  ov->buckets = calloc(ov->nbuckets, sizeof *ov->buckets);
  if (!ov->buckets || pthread_mutex_init(&ov->lock, NULL)) {
    free(ov->buckets);
    return -1;
  }
  return 0;
}

static void entry_free(lmdb_overlay *ov, lmdb_ov_entry *en) {
  if (en->val)
    ov->bytes -= en->val->len;
  if (en->staged)
    ov->bytes -= en->staged->len;
  lmdb_blob_unref(en->val);
  lmdb_blob_unref(en->staged);
  free(en);
  ov->count--;
}

void lmdb_overlay_destroy(lmdb_overlay *ov) {
  if (!ov->buckets)
    return;
  for (size_t i = 0; i < ov->nbuckets; i++)
    while (ov->buckets[i]) {
      lmdb_ov_entry *en = ov->buckets[i];
      ov->buckets[i] = en->next;
      entry_free(ov, en);
    }
  free(ov->buckets);
  ov->buckets = NULL;
  pthread_mutex_destroy(&ov->lock);
}

static lmdb_ov_entry **slot_of(lmdb_overlay *ov, const unsigned char *key, size_t klen,
                               uint32_t h) {
  lmdb_ov_entry **pp = &ov->buckets[h & (ov->nbuckets - 1)];
  while (*pp && ((*pp)->hash != h || (*pp)->klen != klen || memcmp((*pp)->key, key, klen)))
    pp = &(*pp)->next;
  return pp;
}

static lmdb_blob *take(lmdb_blob *b) {
  if (b)
    lmdb_blob_ref(b);
  return b;
}

lmdb_blob *lmdb_overlay_get(lmdb_overlay *ov, const unsigned char *key, size_t klen) {
  pthread_mutex_lock(&ov->lock);
  lmdb_ov_entry *en = ov->count ? *slot_of(ov, key, klen, hash_of(key, klen)) : NULL;
  lmdb_blob *b = en ? take(en->val) : NULL;
  pthread_mutex_unlock(&ov->lock);
  return b;
}

lmdb_blob *lmdb_overlay_latest(lmdb_overlay *ov, const unsigned char *key, size_t klen) {
  pthread_mutex_lock(&ov->lock);
  lmdb_ov_entry *en = ov->count ? *slot_of(ov, key, klen, hash_of(key, klen)) : NULL;
  lmdb_blob *b = en ? take(en->staged ? en->staged : en->val) : NULL;
  pthread_mutex_unlock(&ov->lock);
  return b;
}

/* Rehash into n buckets (a power of two). */
static void resize(lmdb_overlay *ov, size_t n) {
  lmdb_ov_entry **nb = calloc(n, sizeof *nb);
  if (!nb)
    return; /* longer chains or a longer walk, still correct */
  for (size_t i = 0; i < ov->nbuckets; i++)
    while (ov->buckets[i]) {
      lmdb_ov_entry *en = ov->buckets[i];
      ov->buckets[i] = en->next;
      en->next = nb[en->hash & (n - 1)];
      nb[en->hash & (n - 1)] = en;
    }
  free(ov->buckets);
  ov->buckets = nb;
  ov->nbuckets = n;
}

static void shrink_if_sparse(lmdb_overlay *ov) {
  size_t n = ov->nbuckets;
  while (n > MIN_BUCKETS && ov->count < n / 4)
    n /= 2;
  if (n != ov->nbuckets)
    resize(ov, n);
}

lmdb_ov_entry *lmdb_overlay_stage(lmdb_overlay *ov, const unsigned char *key, size_t klen,
                                  lmdb_blob *val) {
  uint32_t h = hash_of(key, klen);
  pthread_mutex_lock(&ov->lock);
  lmdb_ov_entry **pp = slot_of(ov, key, klen, h), *en = *pp;
  if (!en && (en = calloc(1, sizeof *en + klen)) != NULL) {
    en->hash = h;
    en->klen = klen;
    memcpy(en->key, key, klen);
    *pp = en;
    ov->count++;
    if (ov->count > ov->nbuckets)
      resize(ov, ov->nbuckets * 2);
  }
  if (en) {
    if (en->staged) {
      ov->bytes -= en->staged->len;
      lmdb_blob_unref(en->staged);
    }
    en->staged = val;
    ov->bytes += val->len;
  }
  pthread_mutex_unlock(&ov->lock);
  return en;
}

void lmdb_overlay_promote(lmdb_overlay *ov, lmdb_ov_entry **entries, size_t n, uint64_t seq) {
  pthread_mutex_lock(&ov->lock);
  for (size_t i = 0; i < n; i++) {
    lmdb_ov_entry *en = entries[i];
    if (!en->staged)
      continue; /* the same key twice in the batch: promoted already */
    if (en->val) {
      ov->bytes -= en->val->len;
      lmdb_blob_unref(en->val);
    }
    en->val = en->staged;
    en->staged = NULL;
    en->seq = seq;
  }
  ov->durable_seq = seq;
  pthread_mutex_unlock(&ov->lock);
}

/* Free every entry that holds no value at all. */
static void drop_empty(lmdb_overlay *ov) {
  for (size_t i = 0; i < ov->nbuckets; i++) {
    lmdb_ov_entry **pp = &ov->buckets[i];
    while (*pp) {
      lmdb_ov_entry *en = *pp;
      if (!en->val && !en->staged) {
        *pp = en->next;
        entry_free(ov, en);
      } else {
        pp = &en->next;
      }
    }
  }
}

void lmdb_overlay_unstage(lmdb_overlay *ov, lmdb_ov_entry **entries, size_t n) {
  pthread_mutex_lock(&ov->lock);
  for (size_t i = 0; i < n; i++) {
    lmdb_ov_entry *en = entries[i];
    if (!en->staged)
      continue; /* the same key twice in the batch */
    ov->bytes -= en->staged->len;
    lmdb_blob_unref(en->staged);
    en->staged = NULL;
  }
  drop_empty(ov); /* after the loop: entries[] may name an entry twice */
  pthread_mutex_unlock(&ov->lock);
}

void lmdb_overlay_size(lmdb_overlay *ov, uint64_t *keys, uint64_t *bytes) {
  pthread_mutex_lock(&ov->lock);
  *keys = ov->count;
  *bytes = ov->bytes;
  pthread_mutex_unlock(&ov->lock);
}

void lmdb_overlay_prune(lmdb_overlay *ov, uint64_t upto) {
  pthread_mutex_lock(&ov->lock);
  for (size_t i = 0; i < ov->nbuckets && ov->count; i++) {
    lmdb_ov_entry **pp = &ov->buckets[i];
    while (*pp) {
      lmdb_ov_entry *en = *pp;
      if (!en->staged && en->val && en->seq <= upto) {
        *pp = en->next;
        entry_free(ov, en);
      } else {
        pp = &en->next;
      }
    }
  }
  shrink_if_sparse(ov);
  pthread_mutex_unlock(&ov->lock);
}

/* One allocation for the items and their keys: the lock is held for a
 * walk and a copy, not for a malloc per key. */
long lmdb_overlay_collect(lmdb_overlay *ov, uint64_t after, lmdb_ov_item **items,
                          uint64_t *target) {
  pthread_mutex_lock(&ov->lock);
  *target = ov->durable_seq;
  size_t n = 0, key_bytes = 0;
  for (size_t i = 0; i < ov->nbuckets; i++)
    for (lmdb_ov_entry *en = ov->buckets[i]; en; en = en->next)
      if (en->val && en->seq > after) {
        n++;
        key_bytes += en->klen;
      }
  lmdb_ov_item *out = malloc((n ? n : 1) * sizeof *out + key_bytes);
  unsigned char *keys = out ? (unsigned char *)(out + n) : NULL;
  for (size_t i = 0, k = 0; out && i < ov->nbuckets; i++)
    for (lmdb_ov_entry *en = ov->buckets[i]; en; en = en->next) {
      if (!en->val || en->seq <= after)
        continue;
      memcpy(keys, en->key, en->klen);
      out[k++] = (lmdb_ov_item){keys, en->klen, take(en->val)};
      keys += en->klen;
    }
  pthread_mutex_unlock(&ov->lock);
  *items = out;
  return out ? (long)n : -1;
}

void lmdb_overlay_items_free(lmdb_ov_item *items, long n) {
  for (long i = 0; i < n; i++)
    lmdb_blob_unref(items[i].val);
  free(items); /* the keys live in the same block */
}

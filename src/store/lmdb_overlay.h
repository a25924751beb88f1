/*
 * lmdb_overlay.h - acknowledged record states the log holds and LMDB does
 * not yet: scoped key -> the latest encoded record (or a deletion).
 *
 * Each entry has a durable value (flushed in the log: what readers see)
 * and, while the writer's batch is being flushed, a staged one (what the
 * writer's next operations on that key see). After the flush the writer
 * promotes every staged value of the batch at once. The checkpointer copies
 * durable values into LMDB; only the writer removes entries (prune), and
 * only those LMDB already holds, so a reader that misses a key here and
 * then opens a snapshot never misses its state.
 */
#ifndef IDEM_STORE_LMDB_OVERLAY_H
#define IDEM_STORE_LMDB_OVERLAY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* An immutable value, shared by reference. */
typedef struct {
  _Atomic uint32_t refs;
  int del; /* a deletion: no record */
  int64_t expires_at;
  size_t len;
  unsigned char data[]; /* idem_record_encode() bytes */
} lmdb_blob;

lmdb_blob *lmdb_blob_new(size_t len);
void lmdb_blob_ref(lmdb_blob *b);
void lmdb_blob_unref(lmdb_blob *b);

typedef struct lmdb_ov_entry lmdb_ov_entry;

typedef struct {
  pthread_mutex_t lock;
  lmdb_ov_entry **buckets;
  size_t nbuckets, count;
  uint64_t bytes;       /* of the values held, durable and staged */
  uint64_t durable_seq; /* the last batch promoted */
} lmdb_overlay;

int lmdb_overlay_init(lmdb_overlay *ov);
void lmdb_overlay_destroy(lmdb_overlay *ov);

/* Readers: the durable value of a key, referenced (unref it), or NULL. */
lmdb_blob *lmdb_overlay_get(lmdb_overlay *ov, const unsigned char *key, size_t klen);

/* The writer: the latest value (staged, else durable), referenced, or NULL. */
lmdb_blob *lmdb_overlay_latest(lmdb_overlay *ov, const unsigned char *key, size_t klen);
/* Stage val (the overlay takes the caller's reference) as key's next value.
 * Returns the entry, or NULL when out of memory. */
lmdb_ov_entry *lmdb_overlay_stage(lmdb_overlay *ov, const unsigned char *key, size_t klen,
                                  lmdb_blob *val);
/* After the batch seq is flushed: its staged values become durable. */
void lmdb_overlay_promote(lmdb_overlay *ov, lmdb_ov_entry **entries, size_t n, uint64_t seq);
/* After a failed flush: drop the staged values (and entries left empty). */
void lmdb_overlay_unstage(lmdb_overlay *ov, lmdb_ov_entry **entries, size_t n);
/* Remove the entries whose durable value LMDB holds (seq <= upto); every
 * entry when upto is UINT64_MAX and nothing is staged. A table left mostly
 * empty shrinks. */
void lmdb_overlay_prune(lmdb_overlay *ov, uint64_t upto);

/* How many keys the overlay holds, and the bytes of their values. */
void lmdb_overlay_size(lmdb_overlay *ov, uint64_t *keys, uint64_t *bytes);

/* The checkpointer: every durable value newer than `after`, into one block
 * it owns (keys copied into it, values referenced; free it with
 * lmdb_overlay_items_free); *target gets durable_seq. Returns how many, or
 * -1 when out of memory. */
typedef struct {
  unsigned char *key;
  size_t klen;
  lmdb_blob *val;
} lmdb_ov_item;
long lmdb_overlay_collect(lmdb_overlay *ov, uint64_t after, lmdb_ov_item **items,
                          uint64_t *target);
void lmdb_overlay_items_free(lmdb_ov_item *items, long n);

#endif

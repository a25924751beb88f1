/*
 * cache.h - the cache tier in front of a store (store.c drives it): a
 * per-process, bytes-bounded LRU of finished records, shared by every handle
 * opened with the same cache URI on the same store (store_id.h), so that a
 * replay is answered without a round trip to the store of record.
 *
 *   memory:SIZE[?ttl=DUR]   SIZE like 64MiB; ttl (default 60s) bounds how
 *                           long an entry is trusted after it was filled
 *
 * Only completed and failed records answer; a claim this process won is
 * remembered (pending) so that its complete can fill the cache without
 * asking the store; a delete leaves a tombstone that refuses records read
 * before it. Every function is thread-safe.
 */
#ifndef IDEM_STORE_CACHE_H
#define IDEM_STORE_CACHE_H

#include <stdint.h>

#include "idem/idem.h"

typedef struct idem_cache idem_cache;

/* The cache for uri in front of the store store_id names (one per distinct
 * pair in the process, referenced: two stores never answer from one):
 * IDEM_EURI with a sentence in *why (malloc'd) when the URI is malformed. */
int idem_cache_open(const char *uri, const char *store_id, idem_cache **out, char **why);
void idem_cache_release(idem_cache *c);
/* For a cache shared elsewhere (Redis, at shared_uri): the process's own
 * table of its claims (for their completes) and of the counts, one per
 * shared_uri and store like the caches of idem_cache_open. */
idem_cache *idem_cache_for_claims(const char *shared_uri, const char *store_id,
                                  uint64_t max_bytes, int64_t ttl_ms);
/* idem_cache_bury on every cache of the process in front of store_id. */
void idem_cache_bury_store(const char *store_id, const char *scope, const char *key, int64_t now);
/* Only the check of uri: 0, or IDEM_EURI with a sentence in *why (malloc'd). */
int idem_cache_uri_check(const char *uri, char **why);

/* The finished record of (scope, key) trusted at now, deep-copied into
 * *rec (idem_record_clear it): 1, or 0 when there is none. */
int idem_cache_get(idem_cache *c, const char *scope, const char *key, int64_t now,
                   idem_record *rec);
/* rec as the store of record answered it to a request submitted at read_at:
 * kept when it is finished, unless the key was buried since or this process
 * holds a claim of it. */
void idem_cache_put(idem_cache *c, const char *scope, const char *key,
                    const idem_record *rec, int64_t now, int64_t read_at);
/* This process claimed (scope, key) with fence at started: remember what a
 * complete needs to build the record. */
void idem_cache_claimed(idem_cache *c, const char *scope, const char *key,
                        const idem_op *claim, uint64_t fence, int64_t started);
/* The store took a complete or fail (op, submitted at started): the pending
 * claim of that fence becomes the finished record. */
void idem_cache_finished(idem_cache *c, const idem_op *op, int64_t started);
/* The same, but the record goes to *out (idem_record_clear it) instead of
 * this cache, for a cache elsewhere: 1, or 0 when there was no such claim. */
int idem_cache_take_finished(idem_cache *c, const idem_op *op, int64_t started,
                             idem_record *out);
/* (scope, key) changed in a way the cache does not follow: drop it (a
 * deletion's tombstone stays). */
void idem_cache_forget(idem_cache *c, const char *scope, const char *key);
/* (scope, key) was deleted at now (or is being): drop it, and refuse the
 * puts of records read by requests submitted until now (a tombstone, for
 * ten minutes; the claims and records that take its place keep refusing
 * them, and leave it behind when they go). */
void idem_cache_bury(idem_cache *c, const char *scope, const char *key, int64_t now);

/* Count one claim answered by the cache (hit) or sent to the store. */
void idem_cache_count(idem_cache *c, int hit);
/* Those counts. */
void idem_cache_counts(const idem_cache *c, uint64_t *hits, uint64_t *misses);

#endif

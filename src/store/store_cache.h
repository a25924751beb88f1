/*
 * store_cache.h - store.c's two hooks into the cache tier (store_cache.c),
 * for a store opened with idem_store_open_cached. Loop thread only.
 */
#ifndef IDEM_STORE_STORE_CACHE_H
#define IDEM_STORE_STORE_CACHE_H

#include "store/backend.h"

/* Put the cache at cache_uri in front of store (just opened): memory:...
 * or redis://... (a shared cache, opened on store's loop). */
int idem_store_cache_attach(idem_store *store, const char *cache_uri, char **errmsg);
/* Before the backend: 1 when the cache took req (answered it, or asks a
 * shared cache first and hands it to the backend itself on a miss). */
int idem_store_cache_answer(idem_store *store, idem_req *req);
/* After the answer, before the caller's callback: fill or clear the cache. */
void idem_store_cache_learn(idem_store *store, const idem_req *req);

/* The cache's replays answered and claims it did not answer: 0, or -1 when
 * store has no cache in front. */
int idem_store_cache_counts(const idem_store *store, uint64_t *hits, uint64_t *misses);

#endif

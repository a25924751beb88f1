/*
 * store_cache.h - the cache tier of a store opened with
 * idem_store_open_cached (store_cache.c), as the gateway's metrics see it.
 * store.c reaches the tier only through the hooks it set on the store.
 */
#ifndef IDEM_STORE_STORE_CACHE_H
#define IDEM_STORE_STORE_CACHE_H

#include "store/backend.h"

/* The cache's replays answered and claims it did not answer: 0, or -1 when
 * store has no cache in front. */
int idem_store_cache_counts(const idem_store *store, uint64_t *hits, uint64_t *misses);

#endif

/*
 * store_handle.h - a loop's store handle, opened when first needed and, while
 * it cannot be (a network store that is down), tried again at most once a
 * second rather than on every request. Serve's workers and the admin
 * listener each keep one.
 */
#ifndef IDEM_HTTP_STORE_HANDLE_H
#define IDEM_HTTP_STORE_HANDLE_H

#include <stdint.h>

#include <uv.h>

#include "idem/idem.h"

/* *store, opened on loop from uri (with the cache at cache_uri in front,
 * when not NULL) if it is NULL and *retry_at (uv_now ms)
 * has passed; NULL while it cannot be (the failure is logged, naming who). */
idem_store *gw_store_reopen(uv_loop_t *loop, const char *uri, const char *cache_uri,
                            const char *who, idem_store **store, uint64_t *retry_at);

#endif

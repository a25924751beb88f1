/* store_handle.c - a loop's store handle, reopened lazily (store_handle.h). */
#include "http/store_handle.h"

#include <stdio.h>
#include <stdlib.h>

#define REOPEN_EVERY_MS 1000

idem_store *gw_store_reopen(uv_loop_t *loop, const char *uri, const char *cache_uri,
                            const char *who, idem_store **store, uint64_t *retry_at) {
  if (*store)
    return *store;
  uint64_t now = uv_now(loop);
  if (now < *retry_at)
    return NULL;
  *retry_at = now + REOPEN_EVERY_MS;
  char *msg = NULL;
  int rc = idem_store_open_cached(loop, uri, cache_uri, store, &msg);
  if (rc) {
    fprintf(stderr, "idem serve: %sstore %s: %s%s%s\n", who, uri, idem_strerror(rc),
            msg ? ": " : "", msg ? msg : "");
    free(msg);
    *store = NULL;
  }
  return *store;
}

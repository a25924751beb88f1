/* fuzz_cache_uri.c - --cache URIs: any bytes are a cache (memory:SIZE
 * [?ttl=DUR], or a redis:// URI) or IDEM_EURI with a reason, never a crash
 * or a leak; a memory: cache that parses opens, keeps a record and lets it
 * go.
 *
 * The fuzz build links only src/core, so the parsers' files are compiled in
 * here (and instrumented with the target). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "idem/idem.h"
#include "store/cache.h"

#include "../../src/store/cache.c"
#include "../../src/store/uri_options.c"
#if IDEM_WITH_REDIS
#include "../../src/store/redis_uri.c"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = fuzz_cstr(data, size);
  if (!s)
    return 0;
  char *why = NULL;
  int err = idem_cache_uri_check(s, &why);
  if ((err != 0) != (why != NULL) || (err && err != IDEM_EURI && err != IDEM_ENOMEM))
    abort();
  free(why);
  idem_cache *c = NULL;
  if (!err && !strncmp(s, "memory:", 7)) {
    if (idem_cache_open(s, "memory:fuzz", &c, NULL))
      abort();
    idem_record rec = {.state = IDEM_STATE_COMPLETED, .fence = 1, .expires_at = 1000};
    idem_cache_put(c, "scope", "key", &rec, 0, 0);
    idem_record got;
    if (idem_cache_get(c, "scope", "key", 1, &got))
      idem_record_clear(&got);
    idem_cache_release(c);
  }
  free(s);
  return 0;
}

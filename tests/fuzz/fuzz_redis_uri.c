/* fuzz_redis_uri.c - redis:// and redis+cluster:// URIs, Redis record
 * names and a Cluster's MOVED/ASK replies: any bytes parse to a URI or to
 * IDEM_EURI with a reason, never a crash or a leak; a record name always
 * splits back into the (scope, key) it was made from; any slot is < 16384.
 *
 * The fuzz build links only src/core, so the parser's files are compiled in
 * here (and instrumented with the target). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "idem/idem.h"
#include "store/redis.h"

#include "../../src/store/redis_uri.c"
#include "../../src/store/uri_options.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = fuzz_cstr(data, size);
  if (!s)
    return 0;

  idem_redis_uri u;
  char *why = NULL;
  int err = idem_redis_uri_parse(s, &u, &why);
  if (err == 0) {
    if (!u.host || !u.prefix || u.port < 1 || u.port > 65535 || u.db < 0 || why)
      abort();
    idem_redis_uri_clear(&u);
  } else if (err == IDEM_EURI && !why) {
    abort(); /* every refusal says why */
  }
  free(why);
  why = NULL;
  err = idem_redis_cluster_uri_parse(s, &u, &why);
  if (err == 0) {
    if (u.nseeds == 0 || !u.seeds[0].host || strcmp(u.host, u.seeds[0].host) || u.db != 0 || why)
      abort();
    for (size_t i = 0; i < u.nseeds; i++)
      if (u.seeds[i].port < 1 || u.seeds[i].port > 65535)
        abort();
    idem_redis_uri_clear(&u);
  } else if (err == IDEM_EURI && !why) {
    abort();
  }
  free(why);

  unsigned slot;
  char host[256];
  int port;
  if (idem_redis_redirect_parse(s, &slot, host, sizeof host, &port) == 0 &&
      (slot >= IDEM_REDIS_SLOTS || port < 1 || port > 65535 || strlen(host) >= sizeof host))
    abort();
  if (idem_redis_slot(s, strlen(s)) >= IDEM_REDIS_SLOTS)
    abort();

  /* a name of ours splits back; anything else is refused without harm */
  size_t n = strlen(s);
  const char *scope, *key;
  char *copy = malloc(n + 1);
  if (copy) {
    memcpy(copy, s, n + 1);
    (void)idem_redis_key_split("idem", copy, n, &scope, &key);
    free(copy);
  }
  const char *cut = memchr(s, '|', n);
  if (cut && (size_t)(cut - s) <= IDEM_SCOPE_MAX) {
    char sc[IDEM_SCOPE_MAX + 1];
    memcpy(sc, s, (size_t)(cut - s));
    sc[cut - s] = '\0';
    const char *k = cut + 1;
    if (idem_key_valid(k, strlen(k))) {
      size_t len;
      char *name = idem_redis_key("idem", sc, k, &len);
      if (name) {
        if (idem_redis_key_split("idem", name, len, &scope, &key) != 0 ||
            strcmp(scope, sc) != 0 || strcmp(key, k) != 0)
          abort();
        free(name);
      }
      char *m = idem_redis_match("idem", sc);
      free(m);
    }
  }
  free(s);
  return 0;
}

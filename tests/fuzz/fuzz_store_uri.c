/* fuzz_store_uri.c - --store URIs: any bytes are a well-formed store URI or
 * IDEM_EURI with a reason, never a crash or a leak, whatever the scheme
 * (memory:, lmdb:, redis://, redis+cluster://, postgres://, unknown).
 * Nothing is opened: this is the check serve and consume run where they
 * read --store.
 *
 * The stores' URI parsers come from the library (uninstrumented); the
 * target still catches their crashes and leaks under ASan. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_input.h"
#include "idem/idem.h"
#include "store/backend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = fuzz_cstr(data, size);
  if (!s)
    return 0;
  char *why = NULL;
  int err = idem_store_uri_check(s, &why);
  if (err && err != IDEM_EURI && err != IDEM_ENOMEM)
    abort();
  if (!err && why)
    abort(); /* a message only with a refusal */
  free(why);
  free(s);
  return 0;
}

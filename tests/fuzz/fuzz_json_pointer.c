/* fuzz_json_pointer.c - json_pointer_get on arbitrary bytes: the input is a
 * pointer, a NUL, then a JSON text (no NUL: the whole input is the text,
 * read with pointers of the first members).
 * Properties: only EINVAL, EJSON, ENOTFOUND as errors (EINVAL exactly when
 * the pointer is malformed); a result is NUL-terminated and, but for a
 * string (decoded), a substring of the text that parses as JSON on its own
 * (idem_json_canonical). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_pointer.h"
#include "idem/idem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const char *json, size_t len, const char *ptr, size_t plen) {
  char *out = NULL, *canon = NULL;
  size_t n = 0, cn;
  json_ptr_type t;
  int rc = json_pointer_get(json, len, ptr, plen, &out, &n, &t);
  if ((rc == IDEM_EINVAL) != !json_pointer_valid(ptr, plen)) abort();
  if (rc) {
    if (rc != IDEM_EINVAL && rc != IDEM_EJSON && rc != IDEM_ENOTFOUND) abort();
    if (out) abort();
    return;
  }
  if (out[n] != 0) abort();
  if (t != JSON_PTR_STRING) {
    if (n > len || idem_json_canonical(out, n, &canon, &cn)) abort();
    free(canon);
  }
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *)data;
  const char *nul = memchr(s, 0, size);
  if (nul) {
    check(nul + 1, size - (size_t)(nul - s) - 1, s, (size_t)(nul - s));
    return 0;
  }
  static const char *const ptrs[] = {"", "/a", "/0", "/a/0", "/a~1b/1"};
  for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
    check(s, size, ptrs[i], strlen(ptrs[i]));
  return 0;
}

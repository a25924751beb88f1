/* fuzz_json.c - idem_json_canonical on arbitrary bytes.
 * Properties: only IDEM_EJSON as an error; the canonical text is no longer
 * than the input and NUL-terminated; canonicalising it again is the identity;
 * the canonical fingerprint of the input is the plain fingerprint of it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idem/idem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *out = NULL, *again = NULL;
  size_t out_len = 0, again_len = 0;
  uint8_t fp_canon[IDEM_FINGERPRINT_LEN], fp_plain[IDEM_FINGERPRINT_LEN];
  int err = idem_json_canonical((const char *)data, size, &out, &out_len);
  if (err != 0) {
    if (err != IDEM_EJSON) abort();
    return 0;
  }
  if (out_len > size || out[out_len] != '\0') abort();
  if (idem_json_canonical(out, out_len, &again, &again_len) != 0) abort();
  if (again_len != out_len || memcmp(again, out, out_len) != 0) abort();
  if (idem_fingerprint("POST", "/", data, size, IDEM_FP_CANONICAL_JSON,
                       fp_canon) != 0 ||
      idem_fingerprint("POST", "/", out, out_len, 0, fp_plain) != 0 ||
      memcmp(fp_canon, fp_plain, sizeof fp_canon) != 0)
    abort();
  free(again);
  free(out);
  return 0;
}

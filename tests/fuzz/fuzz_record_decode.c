/* fuzz_record_decode.c - idem_record_decode on arbitrary stored bytes.
 * Properties: failure is IDEM_ECORRUPT or IDEM_EVERSION; a decoded record
 * points only into the input, re-encodes to exactly the input bytes, and
 * survives a deep copy. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idem/idem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int inside(const char *p, size_t len, const uint8_t *data, size_t size) {
  if (len == 0) return 1;
  const uint8_t *b = (const uint8_t *)p;
  return p != NULL && b >= data && len <= size && b - data <= (ptrdiff_t)(size - len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  idem_record rec, copy;
  int err = idem_record_decode(data, size, &rec);
  if (err != 0) {
    if (err != IDEM_ECORRUPT && err != IDEM_EVERSION) abort();
    return 0;
  }
  if (!inside(rec.response.headers, rec.response.headers_len, data, size) ||
      !inside(rec.response.body, rec.response.body_len, data, size))
    abort();
  size_t len = idem_record_encoded_len(&rec);
  if (len != size) abort();
  uint8_t *buf = malloc(len);
  if (!buf) abort();
  idem_record_encode(&rec, buf);
  if (memcmp(buf, data, size) != 0) abort();
  free(buf);
  if (idem_record_copy(&copy, &rec) != 0) abort();
  if (copy.state != rec.state || copy.fence != rec.fence ||
      copy.response.body_len != rec.response.body_len ||
      (rec.response.body_len &&
       memcmp(copy.response.body, rec.response.body, rec.response.body_len)))
    abort();
  idem_record_clear(&copy);
  return 0;
}

/* fuzz_key_parse.c - idem_key_parse on arbitrary header values.
 * Properties: success yields a valid NUL-terminated key of the returned
 * length; failure is IDEM_EKEY with a reason; a parsed key written back as a
 * Structured Field string parses to itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idem/idem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* "key" with '"' and '\' escaped; returns the length. */
static size_t sf_quote(const char *key, size_t len, char *dst) {
  size_t n = 0;
  dst[n++] = '"';
  for (size_t i = 0; i < len; i++) {
    if (key[i] == '"' || key[i] == '\\') dst[n++] = '\\';
    dst[n++] = key[i];
  }
  dst[n++] = '"';
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char key[IDEM_KEY_MAX + 1], again[IDEM_KEY_MAX + 1];
  char quoted[2 * IDEM_KEY_MAX + 2];
  const char *why = NULL;
  int n = idem_key_parse((const char *)data, size, key, &why);
  if (n < 0) {
    if (n != IDEM_EKEY || why == NULL || *why == '\0') abort();
    return 0;
  }
  if (n < 1 || n > IDEM_KEY_MAX || key[n] != '\0' || strlen(key) != (size_t)n)
    abort();
  if (!idem_key_valid(key, (size_t)n)) abort();
  size_t qlen = sf_quote(key, (size_t)n, quoted);
  int m = idem_key_parse(quoted, qlen, again, NULL);
  if (m != n || memcmp(again, key, (size_t)n + 1) != 0) abort();
  return 0;
}

/* fuzz_input.h - the fuzzer's bytes as a NUL-terminated string (malloc'd,
 * free it; NULL when out of memory), for the parsers that take text. */
#ifndef IDEM_FUZZ_INPUT_H
#define IDEM_FUZZ_INPUT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (s) {
    memcpy(s, data, size);
    s[size] = '\0';
  }
  return s;
}

#endif

/*
 * json_pointer.h - RFC 6901 JSON Pointers into a JSON text, for `idem
 * consume --key json:/pointer`. Pure: no I/O, no state. Internal to the idem
 * binary and its tests; not part of libidem's public API.
 */
#ifndef IDEM_CORE_JSON_POINTER_H
#define IDEM_CORE_JSON_POINTER_H

#include <stddef.h>

typedef enum {
  JSON_PTR_STRING = 1,
  JSON_PTR_NUMBER,
  JSON_PTR_LITERAL, /* true, false, null */
  JSON_PTR_OBJECT,
  JSON_PTR_ARRAY
} json_ptr_type;

/* Whether ptr[0..len) is a well-formed pointer: empty, or "/" tokens in
 * which every "~" is followed by "0" or "1". */
int json_pointer_valid(const char *ptr, size_t len);

/*
 * The value ptr points at in json (strict RFC 8259, as idem_json_canonical
 * reads it). On success returns 0, sets *type, and writes into *out a
 * malloc'd, NUL-terminated copy (the caller frees it) of: a string's decoded
 * bytes (escapes resolved, may hold NUL), or the raw text of any other value.
 * Errors: IDEM_EINVAL (ptr malformed), IDEM_EJSON (json is not JSON),
 * IDEM_ENOTFOUND (no such member or index; "-" never exists),
 * IDEM_ENOMEM. Array indexes are "0" or digits without a leading zero.
 */
int json_pointer_get(const char *json, size_t len, const char *ptr, size_t ptr_len,
                     char **out, size_t *out_len, json_ptr_type *type);

#endif

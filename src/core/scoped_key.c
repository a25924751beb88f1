/* scoped_key.c - see scoped_key.h */
#include "core/scoped_key.h"

#include <string.h>

#include "idem/idem.h"

size_t idem_scoped_key_encode(const char *scope, const char *key, unsigned char *buf) {
  size_t scope_len = scope ? strlen(scope) : 0, key_len = strlen(key);
  buf[0] = (unsigned char)scope_len;
  memcpy(buf + 1, scope ? scope : "", scope_len);
  memcpy(buf + 1 + scope_len, key, key_len);
  return 1 + scope_len + key_len;
}

int idem_scoped_key_decode(const unsigned char *buf, size_t len, char *scope, char *key) {
  if (len < 2 || (size_t)buf[0] + 1 >= len || len - 1 - buf[0] > 255)
    return -1;
  size_t scope_len = buf[0], key_len = len - 1 - scope_len;
  /* refuse what would not encode back to the same bytes */
  if (memchr(buf + 1, '\0', scope_len) || !idem_key_valid((const char *)buf + 1 + scope_len, key_len))
    return -1;
  memcpy(scope, buf + 1, scope_len);
  scope[scope_len] = '\0';
  memcpy(key, buf + 1 + scope_len, key_len);
  key[key_len] = '\0';
  return 0;
}

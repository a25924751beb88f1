/* key.c - the Idempotency-Key rules: a Structured Field string or a bare
 * token, 1..255 printable ASCII characters once unquoted. */
#include <string.h>

#include "idem/idem.h"

static int is_printable(unsigned char c) { return c >= 0x20 && c <= 0x7e; }
static int is_visible(unsigned char c) { return c > 0x20 && c <= 0x7e; }

int idem_key_valid(const char *key, size_t len) {
  if (!key || len == 0 || len > IDEM_KEY_MAX)
    return 0;
  for (size_t i = 0; i < len; i++)
    if (!is_printable((unsigned char)key[i]))
      return 0;
  return 1;
}

static int fail(const char **why, const char *reason) {
  if (why)
    *why = reason;
  return IDEM_EKEY;
}

/* RFC 8941 sf-string: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE */
static int parse_sf_string(const char *v, size_t len, char *out, const char **why) {
  size_t n = 0;
  for (size_t i = 1; i < len; i++) {
    unsigned char c = (unsigned char)v[i];
    if (c == '"') {
      if (i != len - 1)
        return fail(why, "characters after the closing quote");
      if (n == 0)
        return fail(why, "the key is empty");
      out[n] = '\0';
      return (int)n;
    }
    if (c == '\\') {
      if (++i == len || (v[i] != '"' && v[i] != '\\'))
        return fail(why, "a backslash may only escape '\"' or '\\'");
      c = (unsigned char)v[i];
    } else if (!is_printable(c)) {
      return fail(why, "the key holds a character that is not printable ASCII");
    }
    if (n == IDEM_KEY_MAX)
      return fail(why, "the key is longer than 255 characters");
    out[n++] = (char)c;
  }
  return fail(why, "the quoted key has no closing quote");
}

static int parse_token(const char *v, size_t len, char *out, const char **why) {
  if (len > IDEM_KEY_MAX)
    return fail(why, "the key is longer than 255 characters");
  for (size_t i = 0; i < len; i++) {
    if (v[i] == ' ' || v[i] == '\t')
      return fail(why, "an unquoted key may not hold spaces; quote it as a string");
    if (!is_visible((unsigned char)v[i]))
      return fail(why, "the key holds a character that is not printable ASCII");
  }
  memcpy(out, v, len);
  out[len] = '\0';
  return (int)len;
}

int idem_key_parse(const char *value, size_t len, char *out, const char **why) {
  if (!value || !out)
    return fail(why, "no key");
  while (len && (*value == ' ' || *value == '\t'))
    value++, len--;
  while (len && (value[len - 1] == ' ' || value[len - 1] == '\t'))
    len--;
  if (len == 0)
    return fail(why, "the key is empty");
  if (value[0] == '"')
    return parse_sf_string(value, len, out, why);
  return parse_token(value, len, out, why);
}

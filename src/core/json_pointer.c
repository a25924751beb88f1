/*
 * json_pointer.c - RFC 6901 pointers into JSON (json_pointer.h).
 *
 * The text is checked first by the strict parser of json.c (so a body that
 * fingerprints as JSON is what a pointer reads, duplicate member names
 * included: those are refused, since two readers could pick two different
 * members); the walk below may then assume well-formed input and stays
 * small: it skips values it does not enter, and decodes only member names
 * and the string it returns.
 */
#include "core/json_pointer.h"

#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "idem/idem.h"

int json_pointer_valid(const char *ptr, size_t len) {
  if (len == 0)
    return 1;
  if (ptr[0] != '/')
    return 0;
  for (size_t i = 0; i < len; i++)
    if (ptr[i] == '~' && (i + 1 == len || (ptr[i + 1] != '0' && ptr[i + 1] != '1')))
      return 0;
  return 1;
}

typedef struct {
  const char *s, *end;
} cursor;

static void skip_ws(cursor *c) {
  while (c->s < c->end && (*c->s == ' ' || *c->s == '\t' || *c->s == '\n' || *c->s == '\r'))
    c->s++;
}

/* c->s at the opening quote; leaves it past the closing one. */
static void skip_string(cursor *c) {
  for (c->s++; c->s < c->end && *c->s != '"'; c->s++)
    if (*c->s == '\\')
      c->s++;
  c->s++;
}

static void skip_value(cursor *c) {
  if (*c->s == '"') {
    skip_string(c);
    return;
  }
  if (*c->s == '{' || *c->s == '[') {
    int depth = 0;
    do {
      if (*c->s == '"') {
        skip_string(c);
        continue;
      }
      if (*c->s == '{' || *c->s == '[')
        depth++;
      else if (*c->s == '}' || *c->s == ']')
        depth--;
      c->s++;
    } while (depth > 0 && c->s < c->end);
    return;
  }
  while (c->s < c->end && !strchr(",]} \t\r\n", *c->s))
    c->s++;
}

static unsigned hex4(const char *s) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char h = s[i];
    v = v * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
  }
  return v;
}

/* Decode the (valid) string at c->s into d, which holds at least its raw
 * length; returns the decoded length and leaves c past the string. */
static size_t decode_string(cursor *c, char *d) {
  size_t n = 0;
  for (c->s++; *c->s != '"'; c->s++) {
    if (*c->s != '\\') {
      d[n++] = *c->s;
      continue;
    }
    char e = *++c->s;
    if (e != 'u') {
      static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
      d[n++] = to[strchr(from, e) - from];
      continue;
    }
    unsigned long cp = hex4(c->s + 1);
    c->s += 4;
    if (cp >= 0xd800 && cp < 0xdc00) { /* a high surrogate: its low half follows */
      cp = 0x10000 + ((cp - 0xd800) << 10) + (hex4(c->s + 3) - 0xdc00);
      c->s += 6;
    }
    n += idem_utf8_put(d + n, cp);
  }
  c->s++;
  return n;
}

/* Decode one pointer token (~1 is "/", ~0 is "~") into d. */
static size_t decode_token(const char *t, size_t len, char *d) {
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (t[i] == '~') {
      d[n++] = t[++i] == '1' ? '/' : '~';
      continue;
    }
    d[n++] = t[i];
  }
  return n;
}

/* Move c from an object's "{" to the value of member tok; -1 when none. */
static int enter_member(cursor *c, const char *tok, size_t tok_len, char *scratch) {
  c->s++;
  for (;;) {
    skip_ws(c);
    if (*c->s == '}')
      return -1;
    size_t n = decode_string(c, scratch);
    skip_ws(c);
    c->s++; /* ':' */
    skip_ws(c);
    if (n == tok_len && !memcmp(scratch, tok, n))
      return 0;
    skip_value(c);
    skip_ws(c);
    if (*c->s == ',')
      c->s++;
  }
}

static int enter_index(cursor *c, const char *tok, size_t len) {
  if (len == 0 || len > 9 || (len > 1 && tok[0] == '0'))
    return -1;
  long idx = 0;
  for (size_t i = 0; i < len; i++) {
    if (tok[i] < '0' || tok[i] > '9')
      return -1;
    idx = idx * 10 + (tok[i] - '0');
  }
  c->s++;
  for (long i = 0;; i++) {
    skip_ws(c);
    if (*c->s == ']')
      return -1;
    if (i == idx)
      return 0;
    skip_value(c);
    skip_ws(c);
    if (*c->s == ',')
      c->s++;
  }
}

static int copy_out(const char *p, size_t n, char **out, size_t *out_len) {
  *out = malloc(n + 1);
  if (!*out)
    return IDEM_ENOMEM;
  memcpy(*out, p, n);
  (*out)[n] = 0;
  *out_len = n;
  return 0;
}

static int value_out(cursor *c, char *scratch, char **out, size_t *out_len,
                     json_ptr_type *type) {
  char first = *c->s;
  if (first == '"') {
    *type = JSON_PTR_STRING;
    size_t n = decode_string(c, scratch);
    return copy_out(scratch, n, out, out_len);
  }
  *type = first == '{'   ? JSON_PTR_OBJECT
          : first == '[' ? JSON_PTR_ARRAY
          : (first == 't' || first == 'f' || first == 'n') ? JSON_PTR_LITERAL
                                                           : JSON_PTR_NUMBER;
  const char *start = c->s;
  skip_value(c);
  return copy_out(start, (size_t)(c->s - start), out, out_len);
}

int json_pointer_get(const char *json, size_t len, const char *ptr, size_t ptr_len,
                     char **out, size_t *out_len, json_ptr_type *type) {
  *out = NULL;
  *out_len = 0;
  if (!json_pointer_valid(ptr, ptr_len))
    return IDEM_EINVAL;
  char *canon = NULL;
  size_t canon_len;
  int rc = idem_json_canonical(json, len, &canon, &canon_len);
  free(canon);
  if (rc)
    return rc;
  /* decoded names and tokens are never longer than their raw text */
  char *scratch = malloc(len + ptr_len + 2);
  if (!scratch)
    return IDEM_ENOMEM;
  char *tok = scratch + len + 1;
  cursor c = {json, json + len};
  skip_ws(&c);
  const char *p = ptr, *end = ptr + ptr_len;
  rc = 0;
  while (p < end && !rc) {
    const char *t = p + 1, *te = memchr(t, '/', (size_t)(end - t));
    if (!te)
      te = end;
    size_t tl = decode_token(t, (size_t)(te - t), tok);
    if (*c.s == '{')
      rc = enter_member(&c, tok, tl, scratch) ? IDEM_ENOTFOUND : 0;
    else if (*c.s == '[')
      rc = enter_index(&c, tok, tl) ? IDEM_ENOTFOUND : 0;
    else
      rc = IDEM_ENOTFOUND;
    p = te;
  }
  if (!rc)
    rc = value_out(&c, scratch, out, out_len, type);
  free(scratch);
  return rc;
}

/* text.c - hex digits, percent-decoding, UTF-8, error sentences (text.h). */
#include "core/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int idem_hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void idem_hex_encode(const unsigned char *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = 0;
}

int idem_pct_decode(const char *s, size_t n, char *out, size_t cap, int flags) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    if (ch == '%') {
      int hi = i + 2 < n ? idem_hexval((unsigned char)s[i + 1]) : -1;
      int lo = i + 2 < n ? idem_hexval((unsigned char)s[i + 2]) : -1;
      if (hi < 0 || lo < 0 || ((flags & IDEM_PCT_NO_NUL) && hi == 0 && lo == 0))
        return -1;
      ch = (char)(hi * 16 + lo);
      i += 2;
    } else if (ch == '+' && (flags & IDEM_PCT_PLUS_SPACE)) {
      ch = ' ';
    }
    if (o + 1 >= cap)
      return -1;
    out[o++] = ch;
  }
  if (cap == 0)
    return -1;
  out[o] = 0;
  return (int)o;
}

char *idem_pct_decode_dup(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d && idem_pct_decode(s, n, d, n + 1, IDEM_PCT_NO_NUL) < 0) {
    free(d);
    d = NULL;
  }
  return d;
}

char *idem_join(const char *a, const char *sep, const char *b) {
  size_t n = strlen(a) + strlen(sep) + strlen(b) + 1;
  char *s = malloc(n);
  if (s)
    snprintf(s, n, "%s%s%s", a, sep, b);
  return s;
}

int idem_errf(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}

size_t idem_utf8_seq_len(const unsigned char *s, size_t avail) {
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf;
  if (s[0] >= 0xc2 && s[0] <= 0xdf) n = 2;
  else if (s[0] >= 0xe0 && s[0] <= 0xef) n = 3;
  else if (s[0] >= 0xf0 && s[0] <= 0xf4) n = 4;
  else return 0;
  if (s[0] == 0xe0) lo = 0xa0;      /* overlong */
  else if (s[0] == 0xed) hi = 0x9f; /* UTF-16 surrogates */
  else if (s[0] == 0xf0) lo = 0x90; /* overlong */
  else if (s[0] == 0xf4) hi = 0x8f; /* beyond U+10FFFF */
  if (avail < n || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return n;
}

int idem_utf8_text(const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  size_t avail = strlen(str);
  while (avail) {
    size_t n = s[0] < 0x80 ? (s[0] >= 0x20 && s[0] != 0x7f) : idem_utf8_seq_len(s, avail);
    if (!n)
      return 0;
    s += n;
    avail -= n;
  }
  return 1;
}

size_t idem_utf8_put(char *dst, unsigned long cp) {
  if (cp < 0x80) {
    dst[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    dst[0] = (char)(0xc0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    dst[0] = (char)(0xe0 | (cp >> 12));
    dst[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    dst[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  dst[0] = (char)(0xf0 | (cp >> 18));
  dst[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  dst[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  dst[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

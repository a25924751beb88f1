/*
 * text.h - small text helpers shared by the parsers of URIs, flags and
 * admin paths: hex digits, percent-decoding, UTF-8 and error sentences.
 */
#ifndef IDEM_CORE_TEXT_H
#define IDEM_CORE_TEXT_H

#include <stddef.h>

/* The value of hex digit c, or -1. */
int idem_hexval(int c);

/* in[0..n) as lowercase hex into out: 2n digits and a NUL. */
void idem_hex_encode(const unsigned char *in, size_t n, char *out);

enum {
  IDEM_PCT_PLUS_SPACE = 1, /* '+' is a space (a query string) */
  IDEM_PCT_NO_NUL = 2      /* %00 is refused (the result travels as a C string) */
};

/* Percent-decode s[0..n) into out (cap bytes, NUL-terminated): the length,
 * or -1 on a bad escape, a refused %00, or when it does not fit. */
int idem_pct_decode(const char *s, size_t n, char *out, size_t cap, int flags);

/* The same into a malloc'd string with %00 refused; NULL when malformed or
 * out of memory. */
char *idem_pct_decode_dup(const char *s, size_t n);

/* a, sep, b joined into a malloc'd string ("text: uri"); NULL when out of
 * memory. */
char *idem_join(const char *a, const char *sep, const char *b);

/* Write a sentence into err (len bytes) and return -1, for parsers that
 * answer "0, or -1 with a sentence". */
int idem_errf(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Length of the well-formed UTF-8 sequence at s (avail bytes there, lead
 * byte >= 0x80), or 0 when it is not well formed (RFC 3629, table 3-7 of
 * Unicode: no overlong forms, surrogates or code points past U+10FFFF). */
size_t idem_utf8_seq_len(const unsigned char *s, size_t avail);

/* Whether str is well-formed UTF-8 with no control character (C0, DEL). */
int idem_utf8_text(const char *str);

/* Code point cp as UTF-8 into dst (4 bytes of room): the bytes written. */
size_t idem_utf8_put(char *dst, unsigned long cp);

#endif

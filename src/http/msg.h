/*
 * msg.h - the bytes of one HTTP message as the gateway holds them: a growable
 * buffer and a header list that http_parser callbacks fill piece by piece.
 * Used for client requests (conn.c), upstream responses (upstream.c) and the
 * admin listener alike.
 */
#ifndef IDEM_HTTP_MSG_H
#define IDEM_HTTP_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

typedef struct {
  char *p;
  size_t len, cap;
} gw_buf;

/* Each returns 0 or -1 when out of memory (buffer unchanged). Reserve,
 * append and puts are inline where the room is already there (most calls:
 * a request's buffers are reused), so that a literal's length is known at
 * compile time; gw_buf_grow is the rest. */
int gw_buf_grow(gw_buf *b, size_t extra);
static inline int gw_buf_reserve(gw_buf *b, size_t extra) {
  return b->cap - b->len >= extra ? 0 : gw_buf_grow(b, extra);
}
static inline int gw_buf_append(gw_buf *b, const void *data, size_t len) {
  if (len == 0)
    return 0;
  if (gw_buf_reserve(b, len))
    return -1;
  memcpy(b->p + b->len, data, len);
  b->len += len;
  return 0;
}
static inline int gw_buf_puts(gw_buf *b, const char *s) { return gw_buf_append(b, s, strlen(s)); }
int gw_buf_printf(gw_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Append a decimal number (no printf on the request path). */
int gw_buf_u64(gw_buf *b, uint64_t v);
/* Append the header line "name: value\r\n". */
int gw_buf_header(gw_buf *b, const char *name, size_t name_len, const char *value,
                  size_t value_len);
void gw_buf_free(gw_buf *b);
/* Empty b; keep its memory unless it holds more than keep_max bytes. */
void gw_buf_recycle(gw_buf *b, size_t keep_max);
/* Give up ownership of the bytes: returns b->p and empties b. */
char *gw_buf_take(gw_buf *b, size_t *len);

typedef struct {
  uint32_t name_off, name_len, value_off, value_len;
} gw_header;

/* Header lines as (name, value) pairs, text in one buffer. Values have
 * leading and trailing spaces/tabs removed once the header ends. */
typedef struct {
  gw_buf text;
  gw_header *v;
  size_t n, cap;
  int in_value; /* the last piece was a value */
} gw_headers;

/* Append a piece of a header name or value as http_parser hands it over. */
int gw_headers_on_field(gw_headers *h, const char *at, size_t len);
int gw_headers_on_value(gw_headers *h, const char *at, size_t len);
/* Close the last header (trim its value); call at headers-complete. */
void gw_headers_done(gw_headers *h);
void gw_headers_reset(gw_headers *h);
void gw_headers_free(gw_headers *h);

static inline const char *gw_header_name(const gw_headers *h, size_t i) {
  return h->text.p + h->v[i].name_off;
}
static inline const char *gw_header_value(const gw_headers *h, size_t i) {
  return h->text.p + h->v[i].value_off;
}

/* The first header called name (case-insensitive): its value and length, or
 * NULL. *count, when not NULL, gets how many headers carry that name. */
const char *gw_headers_get(const gw_headers *h, const char *name, size_t *len,
                           int *count);

/* The framing h's Transfer-Encoding asks for: 0 none, 1 "chunked" alone,
 * -1 anything else (another coding, a list, the header more than once),
 * which the gateway cannot pass on: it takes a body out of its chunks and
 * drops Transfer-Encoding (hop-by-hop). Call after gw_headers_done. */
int gw_transfer_coding(const gw_headers *h);

/* "Date: <now, IMF-fixdate>\r\n" for an answer the gateway makes itself
 * (RFC 9110 8.6.1: an origin with a clock sends one); formatted at most
 * once a second per thread. */
const char *gw_date_header(void);

/* Give the first header called name this value, or add it when there is
 * none (the old value's bytes stay, unused). 0 or -1 when out of memory. */
int gw_headers_set(gw_headers *h, const char *name, const char *value, size_t len);

/* Case-insensitive equality of a (ptr, len) string with a C string. Inline,
 * so that the length of a literal is known at compile time and most
 * comparisons end at it: header names are compared many times a request. */
static inline int gw_ieq(const char *s, size_t len, const char *lit) {
  return strlen(lit) == len && strncasecmp(s, lit, len) == 0;
}

/* The last step of something closed asynchronously: free p, then tell its
 * owner (done may be NULL). */
void gw_free_then(void *p, void (*done)(void *arg), void *arg);
/* Whether every value in h is valid field content (RFC 9110 5.5): no
 * control character but HTAB, no DEL. http_parser (not built strict)
 * checks all of a value's bytes but its first: this checks that one. */
int gw_headers_values_ok(const gw_headers *h);
/* Whether s is an RFC 9110 token (a valid field name): 1+ tchars. */
int gw_is_token(const char *s, size_t len);
/* Whether a comma-separated header value holds token (tlen bytes, any
 * length; case-insensitive). */
int gw_has_token(const char *value, size_t len, const char *token, size_t tlen);
/* A list header of h (such as Connection) as gw_headers_get finds it: its
 * first line's value and how many lines carry it. */
typedef struct {
  const gw_headers *h;
  const char *name;
  const char *first;
  size_t first_len;
  int lines;
} gw_list;

static inline void gw_headers_list(const gw_headers *h, const char *name, gw_list *l) {
  l->h = h;
  l->name = name;
  l->first_len = 0;
  l->first = gw_headers_get(h, name, &l->first_len, &l->lines);
}

/* Whether the list l (from gw_headers_list) holds token: a list may come in
 * several field lines (RFC 9110 5.3), each counts. */
int gw_headers_list_has(const gw_list *l, const char *token, size_t tlen);

#endif

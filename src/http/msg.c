/* msg.c - growable buffers and header lists for HTTP messages. */
#include "http/msg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

int gw_buf_grow(gw_buf *b, size_t extra) {
  if (b->cap - b->len >= extra)
    return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap - b->len < extra) {
    if (cap > SIZE_MAX / 2)
      return -1;
    cap *= 2;
  }
  char *p = realloc(b->p, cap);
  if (!p)
    return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

int gw_buf_printf(gw_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0)
    return -1;
  if ((size_t)n < sizeof small)
    return gw_buf_append(b, small, (size_t)n);
  if (gw_buf_reserve(b, (size_t)n + 1))
    return -1;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return 0;
}

int gw_buf_u64(gw_buf *b, uint64_t v) {
  char tmp[24];
  size_t n = sizeof tmp;
  do {
    tmp[--n] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  return gw_buf_append(b, tmp + n, sizeof tmp - n);
}

int gw_buf_header(gw_buf *b, const char *name, size_t name_len, const char *value,
                  size_t value_len) {
  if (gw_buf_reserve(b, name_len + value_len + 4)) /* whole or not at all */
    return -1;
  gw_buf_append(b, name, name_len);
  gw_buf_append(b, ": ", 2);
  gw_buf_append(b, value, value_len);
  gw_buf_append(b, "\r\n", 2);
  return 0;
}

void gw_buf_free(gw_buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

void gw_buf_recycle(gw_buf *b, size_t keep_max) {
  if (b->cap > keep_max)
    gw_buf_free(b);
  b->len = 0;
}

char *gw_buf_take(gw_buf *b, size_t *len) {
  char *p = b->p;
  if (len)
    *len = b->len;
  b->p = NULL;
  b->len = b->cap = 0;
  return p;
}

/* Header text is kept NUL-free; names and values are found by offset. */
static void trim_last_value(gw_headers *h) {
  if (!h->n)
    return;
  gw_header *x = &h->v[h->n - 1];
  const char *v = h->text.p + x->value_off;
  while (x->value_len && (v[0] == ' ' || v[0] == '\t')) {
    v++;
    x->value_off++;
    x->value_len--;
  }
  while (x->value_len &&
         (v[x->value_len - 1] == ' ' || v[x->value_len - 1] == '\t'))
    x->value_len--;
}

int gw_headers_on_field(gw_headers *h, const char *at, size_t len) {
  if (h->n == 0 || h->in_value) {
    if (h->in_value)
      trim_last_value(h);
    if (h->n == h->cap) {
      size_t cap = h->cap ? h->cap * 2 : 16;
      gw_header *v = realloc(h->v, cap * sizeof *v);
      if (!v)
        return -1;
      h->v = v;
      h->cap = cap;
    }
    gw_header *x = &h->v[h->n++];
    x->name_off = (uint32_t)h->text.len;
    x->name_len = 0;
    x->value_off = (uint32_t)h->text.len;
    x->value_len = 0;
    h->in_value = 0;
  }
  if (gw_buf_append(&h->text, at, len))
    return -1;
  gw_header *x = &h->v[h->n - 1];
  x->name_len += (uint32_t)len;
  x->value_off = (uint32_t)h->text.len;
  return 0;
}

int gw_headers_on_value(gw_headers *h, const char *at, size_t len) {
  if (h->n == 0)
    return -1;
  h->in_value = 1;
  if (gw_buf_append(&h->text, at, len))
    return -1;
  h->v[h->n - 1].value_len += (uint32_t)len;
  return 0;
}

void gw_headers_done(gw_headers *h) {
  trim_last_value(h); /* idempotent */
  h->in_value = 1;    /* a later field starts a new header */
}

void gw_headers_reset(gw_headers *h) {
  h->text.len = 0;
  h->n = 0;
  h->in_value = 0;
}

void gw_headers_free(gw_headers *h) {
  gw_buf_free(&h->text);
  free(h->v);
  memset(h, 0, sizeof *h);
}

int gw_headers_set(gw_headers *h, const char *name, const char *value, size_t len) {
  for (size_t i = 0; i < h->n; i++) {
    if (!gw_ieq(gw_header_name(h, i), h->v[i].name_len, name))
      continue;
    size_t off = h->text.len;
    if (gw_buf_append(&h->text, value, len))
      return -1;
    h->v[i].value_off = (uint32_t)off;
    h->v[i].value_len = (uint32_t)len;
    return 0;
  }
  if (gw_headers_on_field(h, name, strlen(name)) || gw_headers_on_value(h, value, len))
    return -1;
  gw_headers_done(h);
  return 0;
}

const char *gw_headers_get(const gw_headers *h, const char *name, size_t *len,
                           int *count) {
  const char *found = NULL;
  int c = 0;
  size_t name_len = strlen(name); /* once, not per header (name is no literal here) */
  for (size_t i = 0; i < h->n; i++) {
    if (h->v[i].name_len != name_len || strncasecmp(gw_header_name(h, i), name, name_len))
      continue;
    if (!found) {
      found = gw_header_value(h, i);
      if (len)
        *len = h->v[i].value_len;
    }
    c++;
  }
  if (count)
    *count = c;
  return found;
}

int gw_transfer_coding(const gw_headers *h) {
  size_t len = 0;
  int n = 0;
  const char *te = gw_headers_get(h, "Transfer-Encoding", &len, &n);
  if (!te)
    return 0;
  return n == 1 && gw_ieq(te, len, "chunked") ? 1 : -1;
}

int gw_has_token(const char *value, size_t len, const char *token, size_t tlen) {
  size_t i = 0;
  while (i < len) {
    while (i < len && (value[i] == ' ' || value[i] == '\t' || value[i] == ','))
      i++;
    size_t start = i;
    while (i < len && value[i] != ',')
      i++;
    size_t end = i;
    while (end > start && (value[end - 1] == ' ' || value[end - 1] == '\t'))
      end--;
    if (end - start == tlen && tlen && strncasecmp(value + start, token, tlen) == 0)
      return 1;
  }
  return 0;
}

int gw_headers_list_has(const gw_list *l, const char *token, size_t tlen) {
  if (l->lines <= 1) /* the usual case: one line, read as it is */
    return l->lines && gw_has_token(l->first, l->first_len, token, tlen);
  const gw_headers *h = l->h;
  size_t name_len = strlen(l->name);
  for (size_t i = 0; i < h->n; i++)
    if (h->v[i].name_len == name_len && !strncasecmp(gw_header_name(h, i), l->name, name_len) &&
        gw_has_token(gw_header_value(h, i), h->v[i].value_len, token, tlen))
      return 1;
  return 0;
}

int gw_headers_values_ok(const gw_headers *h) {
  /* http_parser refuses such a byte anywhere else in a value (the unit
   * tests pin it): only the first is left to check */
  for (size_t i = 0; i < h->n; i++) {
    const unsigned char *v = (const unsigned char *)gw_header_value(h, i);
    if (h->v[i].value_len && ((v[0] < 0x20 && v[0] != '\t') || v[0] == 0x7f))
      return 0;
  }
  return 1;
}

/* RFC 9110 tchar: DIGIT, ALPHA and !#$%&'*+-.^_`|~ */
static const unsigned char tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

int gw_is_token(const char *s, size_t len) {
  if (!len)
    return 0;
  for (size_t i = 0; i < len; i++)
    if (!tchar[(unsigned char)s[i]])
      return 0;
  return 1;
}

void gw_free_then(void *p, void (*done)(void *arg), void *arg) {
  free(p);
  if (done)
    done(arg);
}

const char *gw_date_header(void) {
  static _Thread_local char line[48];
  static _Thread_local time_t formatted = -1;
  time_t now = time(NULL);
  if (now != formatted) {
    struct tm tm;
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    gmtime_r(&now, &tm);
    snprintf(line, sizeof line, "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n", days[tm.tm_wday],
             tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
    formatted = now;
  }
  return line;
}

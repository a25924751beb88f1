/*
 * json.c - strict RFC 8259 validation and canonical form for fingerprints.
 *
 * Canonical form: no insignificant whitespace, object members sorted by the
 * bytes of their decoded key (so "\u0041" and "A" name the same member),
 * strings and numbers copied byte for byte as written. Values are not
 * normalised: "1.0" and "1", "\u00e9" and "é" stay different, because
 * deciding that they mean the same is the application's business, and a
 * fingerprint that calls two different requests equal is worse than one that
 * calls two equal requests different.
 *
 * Refused (IDEM_EJSON): trailing garbage, an empty text, a byte order mark,
 * bad escapes, raw control characters in strings, leading zeros, lone
 * surrogates in \u escapes, invalid UTF-8 (overlong forms, encoded
 * surrogates, beyond U+10FFFF), nesting deeper than IDEM_JSON_MAX_DEPTH and
 * duplicate keys after decoding (two members with one name are read
 * differently by different parsers, so the request is ambiguous).
 *
 * The output is NUL-terminated (the NUL is not counted in *out_len) so that
 * callers may print it; it is never longer than the input.
 *
 * The parser recurses once per nesting level, bounded by the depth limit.
 * The canonical text is never longer than the input, so the output, the
 * decoded-key arena and the sort scratch are each sized by the input once.
 */
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "idem/idem.h"

#define IDEM_JSON_MAX_DEPTH 256

typedef struct {
  size_t key_off, key_len; /* decoded key in p->keys */
  const char *key;         /* set just before sorting */
  size_t span_off, span_len; /* "raw key":value in p->out */
} json_member;

typedef struct {
  const unsigned char *s, *end; /* input cursor */
  int depth;
  int err;
  char *out; /* canonical text */
  size_t out_len;
  char *keys; /* decoded keys of the objects being parsed, a stack */
  size_t keys_len;
  char *scratch; /* members of one object while they are reordered */
  json_member *members; /* members of the objects being parsed, a stack */
  size_t members_len, members_cap;
} json_parser;

static int parse_value(json_parser *p);

static int fail(json_parser *p, int err) {
  if (p->err == 0) p->err = err;
  return -1;
}

static void skip_ws(json_parser *p) {
  while (p->s < p->end &&
         (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
    p->s++;
}

/* out never outgrows the input, so emit needs no bounds check of its own. */
static void emit(json_parser *p, const void *bytes, size_t n) {
  memcpy(p->out + p->out_len, bytes, n);
  p->out_len += n;
}

static void emit_byte(json_parser *p, char c) { p->out[p->out_len++] = c; }

static int expect_literal(json_parser *p, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0)
    return fail(p, IDEM_EJSON);
  emit(p, p->s, n);
  p->s += n;
  return 0;
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

static void skip_digits(json_parser *p) {
  while (p->s < p->end && is_digit(*p->s)) p->s++;
}

/* -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int parse_number(json_parser *p) {
  const unsigned char *start = p->s;
  if (p->s < p->end && *p->s == '-') p->s++;
  if (p->s >= p->end || !is_digit(*p->s)) return fail(p, IDEM_EJSON);
  if (*p->s == '0') {
    p->s++;
    if (p->s < p->end && is_digit(*p->s)) return fail(p, IDEM_EJSON);
  } else {
    skip_digits(p);
  }
  if (p->s < p->end && *p->s == '.') {
    p->s++;
    if (p->s >= p->end || !is_digit(*p->s)) return fail(p, IDEM_EJSON);
    skip_digits(p);
  }
  if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
    p->s++;
    if (p->s < p->end && (*p->s == '+' || *p->s == '-')) p->s++;
    if (p->s >= p->end || !is_digit(*p->s)) return fail(p, IDEM_EJSON);
    skip_digits(p);
  }
  emit(p, start, (size_t)(p->s - start));
  return 0;
}

/* Four hex digits after "\u"; -1 when malformed. */
static long read_hex4(json_parser *p) {
  long v = 0;
  if (p->end - p->s < 4) return -1;
  for (int i = 0; i < 4; i++) {
    int h = idem_hexval((unsigned char)p->s[i]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  p->s += 4;
  return v;
}

/* After "\u": one code point, joining a surrogate pair; -1 when malformed
 * or a lone surrogate. */
static long parse_u_escape(json_parser *p) {
  long hi = read_hex4(p), lo;
  if (hi < 0 || (hi >= 0xdc00 && hi <= 0xdfff)) return -1;
  if (hi < 0xd800 || hi > 0xdbff) return hi;
  if (p->end - p->s < 2 || p->s[0] != '\\' || p->s[1] != 'u') return -1;
  p->s += 2;
  lo = read_hex4(p);
  if (lo < 0xdc00 || lo > 0xdfff) return -1;
  return 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
}

/* After the backslash. Appends the decoded bytes to dst when not NULL;
 * returns how many, or -1 when the escape is invalid. */
static int parse_escape(json_parser *p, char *dst) {
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  char tmp[4];
  const char *hit;
  long cp;
  if (p->s >= p->end) return -1;
  hit = *p->s ? strchr(from, *p->s) : NULL;
  p->s++;
  if (hit) {
    if (dst) *dst = to[hit - from];
    return 1;
  }
  if (p->s[-1] != 'u' || (cp = parse_u_escape(p)) < 0) return -1;
  size_t n = idem_utf8_put(tmp, (unsigned long)cp);
  if (dst) memcpy(dst, tmp, n);
  return (int)n;
}

/* The well-formed UTF-8 sequence at p->s: its length, or 0. */
static size_t utf8_len(const json_parser *p) {
  return idem_utf8_seq_len(p->s, (size_t)(p->end - p->s));
}

/* A string, copied as written. When key is not NULL its decoded bytes are
 * appended to p->keys and their count stored in *key. */
static int parse_string(json_parser *p, size_t *key) {
  const unsigned char *start = p->s++; /* the opening quote */
  char *dst = key ? p->keys + p->keys_len : NULL;
  size_t n = 0;
  for (;;) {
    if (p->s >= p->end) return fail(p, IDEM_EJSON);
    unsigned char c = *p->s;
    if (c == '"') break;
    if (c < 0x20) return fail(p, IDEM_EJSON);
    if (c == '\\') {
      p->s++;
      int k = parse_escape(p, dst ? dst + n : NULL);
      if (k < 0) return fail(p, IDEM_EJSON);
      n += (size_t)k;
      continue;
    }
    size_t len = c < 0x80 ? 1 : utf8_len(p);
    if (len == 0) return fail(p, IDEM_EJSON);
    if (dst) memcpy(dst + n, p->s, len);
    n += len;
    p->s += len;
  }
  p->s++;
  emit(p, start, (size_t)(p->s - start));
  if (key) {
    *key = n;
    p->keys_len += n;
  }
  return 0;
}

static int enter(json_parser *p) {
  if (++p->depth > IDEM_JSON_MAX_DEPTH) return fail(p, IDEM_EJSON);
  p->s++; /* the opening bracket */
  emit_byte(p, p->s[-1]);
  skip_ws(p);
  return 0;
}

/* After a value inside a container: 1 for a comma, 0 for the closer. */
static int next_or_close(json_parser *p, unsigned char closer) {
  skip_ws(p);
  if (p->s < p->end && *p->s == ',') {
    p->s++;
    return 1;
  }
  if (p->s < p->end && *p->s == closer) {
    p->s++;
    return 0;
  }
  return fail(p, IDEM_EJSON);
}

/* The items of an array (parse_value, commas copied) or an object
 * (parse_member, commas written by sort_members) up to closer. */
static int parse_items(json_parser *p, char closer, int (*item)(json_parser *), int commas) {
  int more;
  if (p->s < p->end && *p->s == closer) {
    p->s++;
    return 0;
  }
  do {
    if (item(p) < 0 || (more = next_or_close(p, closer)) < 0) return -1;
    if (more && commas) emit_byte(p, ',');
    skip_ws(p);
  } while (more);
  return 0;
}

static int parse_array(json_parser *p) {
  if (enter(p) < 0 || parse_items(p, ']', parse_value, 1) < 0) return -1;
  emit_byte(p, ']');
  p->depth--;
  return 0;
}

static int push_member(json_parser *p, const json_member *m) {
  if (p->members_len == p->members_cap) {
    size_t cap = p->members_cap ? p->members_cap * 2 : 16;
    json_member *grown = realloc(p->members, cap * sizeof *grown);
    if (!grown) return fail(p, IDEM_ENOMEM);
    p->members = grown;
    p->members_cap = cap;
  }
  p->members[p->members_len++] = *m;
  return 0;
}

/* "key": value, recorded as one member with its decoded key. */
static int parse_member(json_parser *p) {
  json_member m = {.key_off = p->keys_len, .span_off = p->out_len};
  if (p->s >= p->end || *p->s != '"') return fail(p, IDEM_EJSON);
  if (parse_string(p, &m.key_len) < 0) return -1;
  skip_ws(p);
  if (p->s >= p->end || *p->s != ':') return fail(p, IDEM_EJSON);
  p->s++;
  emit_byte(p, ':');
  skip_ws(p);
  if (parse_value(p) < 0) return -1;
  m.span_len = p->out_len - m.span_off;
  return push_member(p, &m);
}

static int member_cmp(const void *a, const void *b) {
  const json_member *x = a, *y = b;
  size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
  int c = memcmp(x->key, y->key, n);
  if (c != 0) return c;
  return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* Rewrite the n members at the top of the stack in key order, with commas. */
static int sort_members(json_parser *p, size_t first) {
  json_member *m = p->members + first;
  size_t n = p->members_len - first, base = m[0].span_off;
  size_t len = p->out_len - base;
  for (size_t i = 0; i < n; i++) m[i].key = p->keys + m[i].key_off;
  qsort(m, n, sizeof *m, member_cmp);
  for (size_t i = 1; i < n; i++)
    if (member_cmp(&m[i - 1], &m[i]) == 0) return fail(p, IDEM_EJSON);
  memcpy(p->scratch, p->out + base, len);
  p->out_len = base;
  for (size_t i = 0; i < n; i++) {
    if (i > 0) emit_byte(p, ',');
    emit(p, p->scratch + (m[i].span_off - base), m[i].span_len);
  }
  return 0;
}

static int parse_object(json_parser *p) {
  size_t first = p->members_len, keys_mark = p->keys_len;
  if (enter(p) < 0 || parse_items(p, '}', parse_member, 0) < 0) return -1;
  if (p->members_len - first > 1 && sort_members(p, first) < 0) return -1;
  emit_byte(p, '}');
  p->members_len = first;
  p->keys_len = keys_mark;
  p->depth--;
  return 0;
}

static int parse_value(json_parser *p) {
  skip_ws(p);
  if (p->s >= p->end) return fail(p, IDEM_EJSON);
  switch (*p->s) {
  case '{': return parse_object(p);
  case '[': return parse_array(p);
  case '"': return parse_string(p, NULL);
  case 't': return expect_literal(p, "true");
  case 'f': return expect_literal(p, "false");
  case 'n': return expect_literal(p, "null");
  default: return parse_number(p);
  }
}

static void parser_free(json_parser *p) {
  free(p->out);
  free(p->keys);
  free(p->scratch);
  free(p->members);
}

int idem_json_canonical(const char *json, size_t len, char **out,
                        size_t *out_len) {
  json_parser p = {.s = (const unsigned char *)json};
  if (!out || !out_len || (!json && len > 0)) return IDEM_EINVAL;
  if (!json) p.s = (const unsigned char *)"";
  p.end = p.s + len;
  /* +1: room for a closing NUL, and never malloc(0) */
  p.out = malloc(len + 1);
  p.keys = malloc(len + 1);
  p.scratch = malloc(len + 1);
  if (!p.out || !p.keys || !p.scratch) {
    parser_free(&p);
    return IDEM_ENOMEM;
  }
  if (parse_value(&p) == 0) {
    skip_ws(&p);
    if (p.s != p.end) fail(&p, IDEM_EJSON);
  }
  if (p.err != 0) {
    parser_free(&p);
    return p.err;
  }
  p.out[p.out_len] = '\0';
  free(p.keys);
  free(p.scratch);
  free(p.members);
  *out = p.out;
  *out_len = p.out_len;
  return 0;
}

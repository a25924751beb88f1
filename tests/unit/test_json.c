/* test_json.c - idem_json_canonical: strict parsing and canonical output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "idem/idem.h"

typedef struct {
  const char *in;
  size_t in_len; /* 0: strlen(in) */
  const char *want;
} canon_case;

static int canon(const char *in, size_t len, char **out, size_t *out_len) {
  return idem_json_canonical(in, len, out, out_len);
}

static void expect_canon(const char *in, size_t len, const char *want) {
  char *out = NULL;
  size_t out_len = 0;
  int err = canon(in, len, &out, &out_len);
  if (err != 0) fail_msg("rejected %s: %s", in, idem_errname(err));
  if (out_len != strlen(want) || memcmp(out, want, out_len) != 0)
    fail_msg("%s -> %.*s, want %s", in, (int)out_len, out, want);
  assert_int_equal(out[out_len], '\0');
  free(out);
}

static void expect_reject(const char *in, size_t len) {
  char *out = (char *)&out; /* must stay untouched on failure */
  size_t out_len = 12345;
  int err = canon(in, len, &out, &out_len);
  if (err != IDEM_EJSON)
    fail_msg("accepted or wrong error for \"%.*s\": %d", (int)len, in, err);
  assert_ptr_equal(out, (char *)&out);
  assert_int_equal(out_len, 12345);
}

static void test_valid(void **state) {
  static const canon_case cases[] = {
      {"0", 0, "0"},
      {"-0", 0, "-0"},
      {" 1 ", 0, "1"},
      {"1.0", 0, "1.0"},
      {"1", 0, "1"},
      {"-12.5e+10", 0, "-12.5e+10"},
      {"1E-2", 0, "1E-2"},
      {"0.001", 0, "0.001"},
      {"123456789012345678901234567890", 0, "123456789012345678901234567890"},
      {"true", 0, "true"},
      {"false", 0, "false"},
      {"null", 0, "null"},
      {"\"\"", 0, "\"\""},
      {"\"a b\"", 0, "\"a b\""},
      {"\"\\u0041\"", 0, "\"\\u0041\""},
      {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", 0, "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\""},
      {"\"\\ud83d\\ude00\"", 0, "\"\\ud83d\\ude00\""},
      {"\"\\uD83D\\uDE00\"", 0, "\"\\uD83D\\uDE00\""},
      {"\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", 0,
       "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""},
      {"\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\"", 0, "\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\""},
      {"\"\x7f\"", 0, "\"\x7f\""},
      {"[]", 0, "[]"},
      {"{}", 0, "{}"},
      {" [ ] ", 0, "[]"},
      {"{ }", 0, "{}"},
      {"[1, 2 ,3]", 0, "[1,2,3]"},
      {"\t\r\n[\n1\r,\t\"x\"\n]\n", 0, "[1,\"x\"]"},
      {"{\"b\":1,\"a\":2}", 0, "{\"a\":2,\"b\":1}"},
      {"{ \"b\" : 1 , \"a\" : [ 2 , { \"z\" : null , \"y\" : true } ] }", 0,
       "{\"a\":[2,{\"y\":true,\"z\":null}],\"b\":1}"},
      {"{\"a b\":1}", 0, "{\"a b\":1}"},
      /* sorted by decoded bytes: \u0042 is "B" (0x42) < "a" (0x61) */
      {"{\"a\":1,\"\\u0042\":2}", 0, "{\"\\u0042\":2,\"a\":1}"},
      /* prefix sorts first */
      {"{\"ab\":1,\"a\":2,\"\":3}", 0, "{\"\":3,\"a\":2,\"ab\":1}"},
      /* byte order, not code point order of UTF-16: U+FFFF < U+1F600 */
      {"{\"\\ud83d\\ude00\":1,\"\\uffff\":2}", 0,
       "{\"\\uffff\":2,\"\\ud83d\\ude00\":1}"},
      {"{\"\xc3\xa9\":1,\"z\":2}", 0, "{\"z\":2,\"\xc3\xa9\":1}"},
      /* NUL inside a key is data, not a terminator */
      {"{\"a\\u0000b\":1,\"a\":2}", 0, "{\"a\":2,\"a\\u0000b\":1}"},
      /* the same key in sibling objects is not a duplicate */
      {"[{\"a\":1},{\"a\":2}]", 0, "[{\"a\":1},{\"a\":2}]"},
      {"{\"a\":{\"a\":{\"a\":1}}}", 0, "{\"a\":{\"a\":{\"a\":1}}}"},
      {"{\"x\":{\"b\":1,\"a\":2},\"w\":{\"d\":3,\"c\":4}}", 0,
       "{\"w\":{\"c\":4,\"d\":3},\"x\":{\"a\":2,\"b\":1}}"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const canon_case *c = &cases[i];
    expect_canon(c->in, c->in_len ? c->in_len : strlen(c->in), c->want);
  }
}

static void test_invalid(void **state) {
  static const char *const cases[] = {
      "", " ", "\xef\xbb\xbf{}", /* empty, blank, byte order mark */
      "{} x", "1 2", "[] []", "nul", "nulll", "True", "NaN", "Infinity",
      "-", "+1", "01", "-01", "00", "1.", ".5", "1.e3", "1e", "1e+", "0x10",
      "1_000", "[", "]", "{", "}", "[1,]", "[,1]", "[1 2]", "{\"a\"}",
      "{\"a\":}", "{\"a\" 1}", "{\"a\":1,}", "{,}", "{1:2}", "{a:1}",
      "{'a':1}", "'a'", "\"abc", "\"\\\"", "\"\\x\"", "\"\\u12\"",
      "\"\\u12g4\"", "\"\\U0041\"", "\"\\ud800\"", "\"\\udc00\"",
      "\"\\ud800x\"", "\"\\ud800\\u0041\"", "\"\\ud800\\ud800\"",
      "\"\\ud800\\n\"", "\"a\tb\"", "\"a\nb\"", "\"\x01\"", "\"\x1f\"",
      "\"\x80\"", "\"\xc0\xaf\"", "\"\xc1\xbf\"", "\"\xe0\x80\xaf\"",
      "\"\xed\xa0\x80\"", "\"\xf0\x80\x80\xaf\"", "\"\xf4\x90\x80\x80\"",
      "\"\xf5\x80\x80\x80\"", "\"\xff\"", "\"\xc3\"", "\"\xe2\x82\"",
      "\"\xc3\x28\"", "[1]\x0b", "\x0c[1]", "[1]]", "{\"a\":1}}",
      /* duplicates, including ones that only decoding reveals */
      "{\"a\":1,\"a\":2}", "{\"a\":1,\"a\":1}", "{\"A\":1,\"\\u0041\":2}",
      "{\"\\u00e9\":1,\"\xc3\xa9\":2}", "{\"b\":1,\"a\":2,\"b\":3}",
      "{\"x\":{\"a\":1,\"a\":2}}", "[{\"k\":1,\"k\":2}]",
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    expect_reject(cases[i], strlen(cases[i]));
}

static void test_embedded_nul(void **state) {
  (void)state;
  expect_reject("1\0", 2);
  expect_reject("\"a\0b\"", 5);
  expect_reject("\0", 1);
  /* the length, not a NUL, ends the text */
  expect_canon("[1]garbage", 3, "[1]");
}

static void test_arguments(void **state) {
  char *out = NULL;
  size_t out_len = 0;
  (void)state;
  assert_int_equal(idem_json_canonical(NULL, 1, &out, &out_len), IDEM_EINVAL);
  assert_int_equal(idem_json_canonical("1", 1, NULL, &out_len), IDEM_EINVAL);
  assert_int_equal(idem_json_canonical("1", 1, &out, NULL), IDEM_EINVAL);
  assert_int_equal(idem_json_canonical(NULL, 0, &out, &out_len), IDEM_EJSON);
}

/* depth open brackets of kind open, then the closers */
static char *nested(size_t depth, char open, char close, size_t *len) {
  const char *inner = open == '{' ? "\"k\":" : "";
  size_t step = 1 + strlen(inner), n = depth * step + 1 + depth;
  char *s = malloc(n + 1), *p = s;
  assert_non_null(s);
  for (size_t i = 0; i < depth; i++) {
    *p++ = open;
    memcpy(p, inner, strlen(inner));
    p += strlen(inner);
  }
  *p++ = '0';
  for (size_t i = 0; i < depth; i++) *p++ = close;
  *p = '\0';
  *len = (size_t)(p - s);
  return s;
}

static void check_depth(char open, char close) {
  size_t len;
  char *at = nested(256, open, close, &len);
  expect_canon(at, len, at); /* already canonical */
  free(at);
  char *over = nested(257, open, close, &len);
  expect_reject(over, len);
  free(over);
}

static void test_depth_limit(void **state) {
  (void)state;
  check_depth('[', ']');
  check_depth('{', '}');
  /* a deep-but-unclosed text fails cleanly instead of recursing on */
  char *deep = malloc(100001);
  assert_non_null(deep);
  memset(deep, '[', 100000);
  expect_reject(deep, 100000);
  for (size_t i = 0; i + 5 <= 100000; i += 5) memcpy(deep + i, "{\"k\":", 5);
  expect_reject(deep, 100000);
  free(deep);
  /* depth is nesting, not count: many siblings at depth 1 are fine */
  enum { SIBLINGS = 10000 };
  size_t n = 3 * SIBLINGS + 1; /* "[" + "[]," * SIBLINGS, last ',' -> ']' */
  char *wide = malloc(n + 1), *out;
  size_t out_len;
  assert_non_null(wide);
  wide[0] = '[';
  for (size_t i = 0; i < SIBLINGS; i++) memcpy(wide + 1 + 3 * i, "[],", 3);
  wide[n - 1] = ']';
  wide[n] = '\0';
  assert_int_equal(idem_json_canonical(wide, n, &out, &out_len), 0);
  assert_int_equal(out_len, n);
  free(out);
  free(wide);
}

/* Many members in reverse order: sorted, and canonical twice is canonical. */
static void test_many_members(void **state) {
  enum { N = 2000 };
  char *in = malloc(N * 24 + 8), *p = in;
  char *out, *again;
  size_t out_len, again_len;
  (void)state;
  assert_non_null(in);
  *p++ = '{';
  for (int i = N - 1; i >= 0; i--)
    p += sprintf(p, "%s \"k%05d\" : %d", i == N - 1 ? "" : ",", i, i);
  *p++ = '}';
  assert_int_equal(idem_json_canonical(in, (size_t)(p - in), &out, &out_len),
                   0);
  assert_memory_equal(out, "{\"k00000\":0,\"k00001\":1,", 23);
  assert_int_equal(
      idem_json_canonical(out, out_len, &again, &again_len), 0);
  assert_int_equal(again_len, out_len);
  assert_memory_equal(again, out, out_len);
  free(again);
  free(out);
  free(in);
}

UNIT_TESTS(cmocka_unit_test(test_valid),
           cmocka_unit_test(test_invalid),
           cmocka_unit_test(test_embedded_nul),
           cmocka_unit_test(test_arguments),
           cmocka_unit_test(test_depth_limit),
           cmocka_unit_test(test_many_members))

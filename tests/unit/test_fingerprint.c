/* test_fingerprint.c - idem_fingerprint: known answers, field boundaries,
 * the canonical JSON option. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "idem/idem.h"

typedef uint8_t fp_t[IDEM_FINGERPRINT_LEN];

static void hex(const uint8_t *fp, char out[2 * IDEM_FINGERPRINT_LEN + 1]) {
  for (int i = 0; i < IDEM_FINGERPRINT_LEN; i++)
    snprintf(out + 2 * i, 3, "%02x", fp[i]);
}

static void expect_hex(const char *method, const char *target,
                       const char *body, unsigned flags, const char *want) {
  fp_t fp;
  char got[2 * IDEM_FINGERPRINT_LEN + 1];
  assert_int_equal(
      idem_fingerprint(method, target, body, body ? strlen(body) : 0, flags, fp),
      0);
  hex(fp, got);
  assert_string_equal(got, want);
}

static void print(const char *method, const char *target, const char *body,
                  unsigned flags, fp_t out) {
  assert_int_equal(
      idem_fingerprint(method, target, body, strlen(body), flags, out), 0);
}

/* Computed independently with Python:
 *   h = hashlib.sha256()
 *   for x in (method, target, body): h.update(struct.pack('>Q', len(x)) + x)
 */
static void test_known_answers(void **state) {
  (void)state;
  expect_hex("POST", "/orders", "{\"amount\":42,\"currency\":\"EUR\"}", 0,
             "b33fbe7af3462b9c90be3fa89baf1e7c1d2649fd4e94eabf22e1a3ad64a163ad");
  expect_hex("", "", "", 0,
             "9d908ecfb6b256def8b49a7c504e6c889c4b0e41fe6ce3e01863dd7b61a20aa0");
  /* NULL method, target and (empty) body count as empty */
  expect_hex(NULL, NULL, NULL, 0,
             "9d908ecfb6b256def8b49a7c504e6c889c4b0e41fe6ce3e01863dd7b61a20aa0");
  /* the canonical option hashes the canonical text */
  expect_hex("POST", "/a", "{\"a\":1,\"b\":[true,null]}", 0,
             "1a3703c38ea72f90fbd2dec3b05ac790707021bf8985f2e66d35d64ca739b8a4");
  expect_hex("POST", "/a", " {\n \"b\" : [ true , null ] ,\n \"a\" : 1 }\n",
             IDEM_FP_CANONICAL_JSON,
             "1a3703c38ea72f90fbd2dec3b05ac790707021bf8985f2e66d35d64ca739b8a4");
}

/* Moving bytes across a field boundary must change the print: that is what
 * the length prefixes are for. */
static void test_field_boundaries(void **state) {
  static const char *const triples[][3] = {
      {"POST", "/ab", "c"}, {"POST", "/a", "bc"}, {"POST/", "ab", "c"},
      {"POS", "T/abc", ""}, {"", "POST/abc", ""}, {"", "", "POST/abc"},
      {"POST/abc", "", ""}, {"POST", "/abc", ""},
  };
  enum { N = sizeof triples / sizeof triples[0] };
  fp_t fps[N];
  (void)state;
  for (size_t i = 0; i < N; i++)
    print(triples[i][0], triples[i][1], triples[i][2], 0, fps[i]);
  for (size_t i = 0; i < N; i++)
    for (size_t j = i + 1; j < N; j++)
      if (memcmp(fps[i], fps[j], sizeof fps[i]) == 0)
        fail_msg("triples %zu and %zu collide", i, j);
}

static void test_each_field_counts(void **state) {
  fp_t a, b;
  (void)state;
  print("POST", "/x", "body", 0, a);
  print("PATCH", "/x", "body", 0, b);
  assert_memory_not_equal(a, b, sizeof a);
  print("POST", "/y", "body", 0, b);
  assert_memory_not_equal(a, b, sizeof a);
  print("POST", "/x", "bodY", 0, b);
  assert_memory_not_equal(a, b, sizeof a);
  print("POST", "/x", "body", 0, b);
  assert_memory_equal(a, b, sizeof a);
}

/* The body is bytes, not a C string: a NUL inside it is hashed too. */
static void test_binary_body(void **state) {
  fp_t a, b;
  (void)state;
  assert_int_equal(idem_fingerprint("PUT", "/f", "a\0b", 3, 0, a), 0);
  assert_int_equal(idem_fingerprint("PUT", "/f", "a\0c", 3, 0, b), 0);
  assert_memory_not_equal(a, b, sizeof a);
  assert_int_equal(idem_fingerprint("PUT", "/f", "a", 1, 0, b), 0);
  assert_memory_not_equal(a, b, sizeof a);
}

static void test_canonical_ignores_layout(void **state) {
  static const char *const same[] = {
      "{\"id\":7,\"items\":[{\"sku\":\"A\",\"n\":2}],\"note\":null}",
      "{\"note\":null,\"items\":[{\"n\":2,\"sku\":\"A\"}],\"id\":7}",
      ("\r\n{ \"items\" : [ { \"n\" : 2 , \"sku\" : \"A\" } ] ,\t\"id\":7,"
       " \"note\" : null }\n"),
  };
  fp_t first, fp;
  (void)state;
  print("POST", "/o", same[0], IDEM_FP_CANONICAL_JSON, first);
  for (size_t i = 1; i < sizeof same / sizeof same[0]; i++) {
    print("POST", "/o", same[i], IDEM_FP_CANONICAL_JSON, fp);
    assert_memory_equal(first, fp, sizeof fp);
    /* without the option, layout counts */
    print("POST", "/o", same[i], 0, fp);
    assert_memory_not_equal(first, fp, sizeof fp);
  }
}

static void test_canonical_keeps_values(void **state) {
  static const char *const pairs[][2] = {
      {"{\"a\":1}", "{\"a\":2}"},
      {"{\"a\":1}", "{\"a\":1.0}"}, /* numbers are compared as written */
      {"{\"a\":1}", "{\"a\":\"1\"}"},
      {"{\"a\":\"x\"}", "{\"a\":\"x \"}"},
      {"{\"a\":\"\\u00e9\"}", "{\"a\":\"\xc3\xa9\"}"}, /* strings as written */
      {"[1,2]", "[2,1]"}, /* array order is meaning */
      {"{\"a\":1}", "{\"b\":1}"},
      {"{\"a\":null}", "{}"},
      {"{\"a\":[]}", "{\"a\":{}}"},
  };
  fp_t a, b;
  (void)state;
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    print("POST", "/v", pairs[i][0], IDEM_FP_CANONICAL_JSON, a);
    print("POST", "/v", pairs[i][1], IDEM_FP_CANONICAL_JSON, b);
    if (memcmp(a, b, sizeof a) == 0)
      fail_msg("%s and %s collide", pairs[i][0], pairs[i][1]);
  }
}

static void test_canonical_rejects_non_json(void **state) {
  static const char *const bad[] = {
      "", "hello", "{\"a\":1", "{\"a\":1,\"a\":2}", "{\"a\":01}", "[1]x",
  };
  fp_t fp;
  (void)state;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(idem_fingerprint("POST", "/", bad[i], strlen(bad[i]),
                                      IDEM_FP_CANONICAL_JSON, fp),
                     IDEM_EJSON);
    /* the same bytes are fine as an opaque body */
    assert_int_equal(
        idem_fingerprint("POST", "/", bad[i], strlen(bad[i]), 0, fp), 0);
  }
  assert_int_equal(
      idem_fingerprint("POST", "/", NULL, 0, IDEM_FP_CANONICAL_JSON, fp),
      IDEM_EJSON);
}

static void test_arguments(void **state) {
  fp_t fp;
  (void)state;
  assert_int_equal(idem_fingerprint("POST", "/", "x", 1, 0, NULL), IDEM_EINVAL);
  assert_int_equal(idem_fingerprint("POST", "/", NULL, 1, 0, fp), IDEM_EINVAL);
  assert_int_equal(
      idem_fingerprint("POST", "/", NULL, 1, IDEM_FP_CANONICAL_JSON, fp),
      IDEM_EINVAL);
  assert_int_equal(idem_fingerprint("POST", "/", NULL, 0, 0, fp), 0);
  /* a flag this version does not know is refused, not ignored: a caller
   * asking for a treatment it would not get must hear so */
  assert_int_equal(idem_fingerprint("POST", "/", "{}", 2, 2u, fp), IDEM_EINVAL);
  assert_int_equal(
      idem_fingerprint("POST", "/", "{}", 2, IDEM_FP_CANONICAL_JSON | 0x80000000u, fp),
      IDEM_EINVAL);
}

UNIT_TESTS(cmocka_unit_test(test_known_answers),
           cmocka_unit_test(test_field_boundaries),
           cmocka_unit_test(test_each_field_counts),
           cmocka_unit_test(test_binary_body),
           cmocka_unit_test(test_canonical_ignores_layout),
           cmocka_unit_test(test_canonical_keeps_values),
           cmocka_unit_test(test_canonical_rejects_non_json),
           cmocka_unit_test(test_arguments))

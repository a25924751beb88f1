/* test_json_pointer.c - RFC 6901 pointers into JSON (core/json_pointer.h):
 * the examples of RFC 6901 section 5, escapes in names and values, arrays,
 * and every refusal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "core/json_pointer.h"
#include "idem/idem.h"

static const char rfc_doc[] =
    "{\"foo\": [\"bar\", \"baz\"], \"\": 0, \"a/b\": 1, \"c%d\": 2, \"e^f\": 3,"
    " \"g|h\": 4, \"i\\\\j\": 5, \"k\\\"l\": 6, \" \": 7, \"m~n\": 8}";

/* A pointer into a document, and what it must give. */
struct case_ {
  const char *doc, *ptr;
  json_ptr_type type;
  const char *want;
  size_t len;
};

static void expect(const char *doc, const char *ptr, json_ptr_type want_type,
                   const char *want, size_t want_len) {
  char *out = NULL;
  size_t n = 0;
  json_ptr_type t = 0;
  int rc = json_pointer_get(doc, strlen(doc), ptr, strlen(ptr), &out, &n, &t);
  if (rc)
    fail_msg("%s in %s: %s", ptr, doc, idem_errname(rc));
  assert_int_equal(t, want_type);
  assert_int_equal(n, want_len);
  assert_memory_equal(out, want, n);
  assert_int_equal(out[n], 0);
  free(out);
}

static void expect_err(const char *doc, const char *ptr, int err) {
  char *out = (char *)1;
  size_t n = 1;
  json_ptr_type t;
  assert_int_equal(json_pointer_get(doc, strlen(doc), ptr, strlen(ptr), &out, &n, &t), err);
  assert_null(out);
}

static const char order_doc[] = " {\"order\": {\"id\": \"o-\\u00e9\\ud83d\\ude00\\n\", \"n\": -1.5e3,"
    " \"t\": true, \"z\": null, \"list\": [[1], {\"x\": \"y\"}, 10]},"
    " \"\\u0061\": \"A\"} ";

/* RFC 6901's examples, then values of every kind and escapes in names and
 * strings. */
static void pointers_find_their_values(void **state) {
  (void)state;
  const struct case_ cases[] = {
      {rfc_doc, "/foo/0", JSON_PTR_STRING, "bar", 3},
      {rfc_doc, "/foo/1", JSON_PTR_STRING, "baz", 3},
      {rfc_doc, "/foo", JSON_PTR_ARRAY, "[\"bar\", \"baz\"]", 14},
      {rfc_doc, "/", JSON_PTR_NUMBER, "0", 1},
      {rfc_doc, "/a~1b", JSON_PTR_NUMBER, "1", 1},
      {rfc_doc, "/c%d", JSON_PTR_NUMBER, "2", 1},
      {rfc_doc, "/i\\j", JSON_PTR_NUMBER, "5", 1},
      {rfc_doc, "/k\"l", JSON_PTR_NUMBER, "6", 1},
      {rfc_doc, "/ ", JSON_PTR_NUMBER, "7", 1},
      {rfc_doc, "/m~0n", JSON_PTR_NUMBER, "8", 1},
      {rfc_doc, "", JSON_PTR_OBJECT, rfc_doc, strlen(rfc_doc)},
      {order_doc, "/order/id", JSON_PTR_STRING, "o-\xc3\xa9\xf0\x9f\x98\x80\n", 9},
      {order_doc, "/order/n", JSON_PTR_NUMBER, "-1.5e3", 6},
      {order_doc, "/order/t", JSON_PTR_LITERAL, "true", 4},
      {order_doc, "/order/z", JSON_PTR_LITERAL, "null", 4},
      {order_doc, "/order/list/1/x", JSON_PTR_STRING, "y", 1},
      {order_doc, "/order/list/2", JSON_PTR_NUMBER, "10", 2},
      {order_doc, "/order/list/0", JSON_PTR_ARRAY, "[1]", 3},
      {order_doc, "/a", JSON_PTR_STRING, "A", 1},  /* names compare decoded */
      {"\"s\\u0000t\"", "", JSON_PTR_STRING, "s\0t", 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    expect(cases[i].doc, cases[i].ptr, cases[i].type, cases[i].want, cases[i].len);
}

static void refusals(void **state) {
  (void)state;
  expect_err(rfc_doc, "foo", IDEM_EINVAL);
  expect_err(rfc_doc, "/m~2n", IDEM_EINVAL);
  expect_err(rfc_doc, "/m~", IDEM_EINVAL);
  expect_err(rfc_doc, "/nope", IDEM_ENOTFOUND);
  expect_err(rfc_doc, "/foo/2", IDEM_ENOTFOUND);
  expect_err(rfc_doc, "/foo/-", IDEM_ENOTFOUND);
  expect_err(rfc_doc, "/foo/01", IDEM_ENOTFOUND);
  expect_err(rfc_doc, "/foo/0/x", IDEM_ENOTFOUND);
  expect_err(rfc_doc, "/foo/bar", IDEM_ENOTFOUND);
  expect_err("{\"a\":1,\"a\":2}", "/a", IDEM_EJSON);
  expect_err("{\"a\":1", "/a", IDEM_EJSON);
  expect_err("", "", IDEM_EJSON);
  expect_err("not json", "/a", IDEM_EJSON);
  assert_true(json_pointer_valid("", 0));
  assert_true(json_pointer_valid("/a~0~1", 6));
  assert_false(json_pointer_valid("a", 1));
}

UNIT_TESTS(cmocka_unit_test(pointers_find_their_values),
           cmocka_unit_test(refusals))

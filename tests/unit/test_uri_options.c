/* test_uri_options.c - the "?name=value&..." splitter every store URI goes
 * through (store/uri_options.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "store/uri_options.h"

typedef struct {
  const char *name, *value, *text; /* value NULL: no '=' */
} want;

/* query splits into exactly the n items of w, in order. */
static void check(const char *query, const want *w, size_t n) {
  idem_uri_options o;
  assert_int_equal(idem_uri_options_parse(query, &o), 0);
  assert_int_equal(o.n, n);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(o.items[i].name, w[i].name);
    if (w[i].value)
      assert_string_equal(o.items[i].value, w[i].value);
    else
      assert_null(o.items[i].value);
    assert_int_equal(o.items[i].text_len, strlen(w[i].text));
    assert_memory_equal(o.items[i].text, w[i].text, strlen(w[i].text));
  }
  idem_uri_options_free(&o);
}

static void splits_at_ampersands_in_order(void **state) {
  (void)state;
  const want w[] = {{"map_size", "1GiB", "map_size=1GiB"},
                    {"batch", "64", "batch=64"},
                    {"create", "no", "create=no"}};
  check("map_size=1GiB&batch=64&create=no", w, 3);
}

static void the_first_equals_sign_splits(void **state) {
  (void)state;
  const want w[] = {{"options", "-c%20a=b", "options=-c%20a=b"}, {"", "x", "=x"}, {"y", "", "y="}};
  check("options=-c%20a=b&=x&y=", w, 3);
}

static void an_item_without_equals_has_no_value(void **state) {
  (void)state;
  const want w[] = {{"migrate", NULL, "migrate"}, {"pool", "2", "pool=2"}};
  check("migrate&pool=2", w, 2);
}

static void empty_items_are_skipped(void **state) {
  (void)state;
  const want w[] = {{"a", "1", "a=1"}, {"b", "2", "b=2"}};
  check("&&a=1&&b=2&", w, 2);
  check("", NULL, 0);
  check("&", NULL, 0);
}

static void the_text_points_into_the_query(void **state) {
  (void)state;
  const char *query = "a=1&bb=22?x";
  idem_uri_options o;
  assert_int_equal(idem_uri_options_parse(query, &o), 0);
  assert_int_equal(o.n, 2);
  assert_ptr_equal(o.items[0].text, query);
  assert_ptr_equal(o.items[1].text, query + 4);
  assert_string_equal(o.items[1].value, "22?x"); /* a later '?' is just a byte */
  idem_uri_options_free(&o);
}

static void an_option_given_twice_is_named(void **state) {
  (void)state;
  idem_uri_options o;
  assert_int_equal(idem_uri_options_parse("a=1&b=2&c", &o), 0);
  assert_null(idem_uri_options_repeated(&o));
  idem_uri_options_free(&o);
  assert_int_equal(idem_uri_options_parse("a=1&b=2&a=1", &o), 0);
  assert_string_equal(idem_uri_options_repeated(&o), "a");
  idem_uri_options_free(&o);
  assert_int_equal(idem_uri_options_parse("b&ab=1&b=", &o), 0); /* with or without a value */
  assert_string_equal(idem_uri_options_repeated(&o), "b");
  idem_uri_options_free(&o);
}

UNIT_TESTS(cmocka_unit_test(an_option_given_twice_is_named),
           cmocka_unit_test(splits_at_ampersands_in_order),
           cmocka_unit_test(the_first_equals_sign_splits),
           cmocka_unit_test(an_item_without_equals_has_no_value),
           cmocka_unit_test(empty_items_are_skipped),
           cmocka_unit_test(the_text_points_into_the_query))

/* test_uri_options.c - the "?name=value&..." splitter every store URI goes
 * through (store/uri_options.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "store/uri_options.h"

static void assert_item(const idem_uri_options *o, size_t i, const char *name,
                        const char *value, const char *text) {
  assert_true(i < o->n);
  assert_string_equal(o->items[i].name, name);
  if (value)
    assert_string_equal(o->items[i].value, value);
  else
    assert_null(o->items[i].value);
  assert_int_equal(o->items[i].text_len, strlen(text));
  assert_memory_equal(o->items[i].text, text, strlen(text));
}

static void splits_at_ampersands_in_order(void **state) {
  (void)state;
  idem_uri_options o;
  assert_int_equal(idem_uri_options_parse("map_size=1GiB&batch=64&create=no", &o), 0);
  assert_int_equal(o.n, 3);
  assert_item(&o, 0, "map_size", "1GiB", "map_size=1GiB");
  assert_item(&o, 1, "batch", "64", "batch=64");
  assert_item(&o, 2, "create", "no", "create=no");
  idem_uri_options_free(&o);
}

static void the_first_equals_sign_splits(void **state) {
  (void)state;
  idem_uri_options o;
  assert_int_equal(idem_uri_options_parse("options=-c%20a=b&=x&y=", &o), 0);
  assert_int_equal(o.n, 3);
  assert_item(&o, 0, "options", "-c%20a=b", "options=-c%20a=b");
  assert_item(&o, 1, "", "x", "=x");
  assert_item(&o, 2, "y", "", "y=");
  idem_uri_options_free(&o);
}

static void an_item_without_equals_has_no_value(void **state) {
  (void)state;
  idem_uri_options o;
  assert_int_equal(idem_uri_options_parse("migrate&pool=2", &o), 0);
  assert_int_equal(o.n, 2);
  assert_item(&o, 0, "migrate", NULL, "migrate");
  assert_item(&o, 1, "pool", "2", "pool=2");
  idem_uri_options_free(&o);
}

static void empty_items_are_skipped(void **state) {
  (void)state;
  idem_uri_options o;
  assert_int_equal(idem_uri_options_parse("&&a=1&&b=2&", &o), 0);
  assert_int_equal(o.n, 2);
  assert_item(&o, 0, "a", "1", "a=1");
  assert_item(&o, 1, "b", "2", "b=2");
  idem_uri_options_free(&o);
  assert_int_equal(idem_uri_options_parse("", &o), 0);
  assert_int_equal(o.n, 0);
  idem_uri_options_free(&o);
  assert_int_equal(idem_uri_options_parse("&", &o), 0);
  assert_int_equal(o.n, 0);
  idem_uri_options_free(&o);
}

static void the_text_points_into_the_query(void **state) {
  (void)state;
  const char *query = "a=1&bb=22?x";
  idem_uri_options o;
  assert_int_equal(idem_uri_options_parse(query, &o), 0);
  assert_int_equal(o.n, 2);
  assert_ptr_equal(o.items[0].text, query);
  assert_ptr_equal(o.items[1].text, query + 4);
  assert_item(&o, 1, "bb", "22?x", "bb=22?x"); /* a later '?' is just a byte */
  idem_uri_options_free(&o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(splits_at_ampersands_in_order),
      cmocka_unit_test(the_first_equals_sign_splits),
      cmocka_unit_test(an_item_without_equals_has_no_value),
      cmocka_unit_test(empty_items_are_skipped),
      cmocka_unit_test(the_text_points_into_the_query),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

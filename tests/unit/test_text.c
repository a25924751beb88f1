/* test_text.c - core/text.c: hex digits both ways, and percent-decoding's
 * refusals (bad escapes, %00 where the result is a C string, no room). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "core/text.h"

static void hex_encode_is_lowercase_and_terminated(void **state) {
  (void)state;
  const unsigned char in[] = {0x00, 0x0f, 0xa5, 0xff};
  char out[2 * sizeof in + 2];
  memset(out, 'x', sizeof out);
  idem_hex_encode(in, sizeof in, out);
  assert_string_equal(out, "000fa5ff");
  assert_int_equal(out[sizeof out - 1], 'x'); /* nothing past the NUL */
  idem_hex_encode(in, 0, out);
  assert_string_equal(out, "");
  /* every byte comes back through idem_hexval */
  for (int b = 0; b < 256; b++) {
    unsigned char one = (unsigned char)b;
    char two[3];
    idem_hex_encode(&one, 1, two);
    assert_int_equal(idem_hexval(two[0]) * 16 + idem_hexval(two[1]), b);
  }
}

static void hexval_takes_both_cases_and_nothing_else(void **state) {
  (void)state;
  assert_int_equal(idem_hexval('0'), 0);
  assert_int_equal(idem_hexval('F'), 15);
  assert_int_equal(idem_hexval('f'), 15);
  assert_int_equal(idem_hexval('g'), -1);
  assert_int_equal(idem_hexval('/'), -1);
  assert_int_equal(idem_hexval(0), -1);
}

static void pct_decode_refuses_what_it_must(void **state) {
  (void)state;
  char out[16];
  assert_int_equal(idem_pct_decode("a%2Fb+c", 7, out, sizeof out, IDEM_PCT_PLUS_SPACE), 5);
  assert_string_equal(out, "a/b c");
  assert_int_equal(idem_pct_decode("a+c", 3, out, sizeof out, 0), 3);
  assert_string_equal(out, "a+c");
  assert_int_equal(idem_pct_decode("%2", 2, out, sizeof out, 0), -1);
  assert_int_equal(idem_pct_decode("%zz", 3, out, sizeof out, 0), -1);
  assert_int_equal(idem_pct_decode("a%00", 4, out, sizeof out, IDEM_PCT_NO_NUL), -1);
  assert_int_equal(idem_pct_decode("abcd", 4, out, 4, 0), -1); /* no room for the NUL */
}

static void utf8_text_is_well_formed_with_no_control(void **state) {
  (void)state;
  assert_true(idem_utf8_text(""));
  assert_true(idem_utf8_text("tenant-a"));
  assert_true(idem_utf8_text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80")); /* é € 😀 */
  assert_false(idem_utf8_text("a\tb"));             /* a control character */
  assert_false(idem_utf8_text("a\x7f"));            /* DEL */
  assert_false(idem_utf8_text("\xff"));             /* never in UTF-8 */
  assert_false(idem_utf8_text("\xc3"));             /* cut short */
  assert_false(idem_utf8_text("\xc0\xaf"));         /* overlong '/' */
  assert_false(idem_utf8_text("\xed\xa0\x80"));     /* a UTF-16 surrogate */
  assert_false(idem_utf8_text("\xf4\x90\x80\x80")); /* past U+10FFFF */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hex_encode_is_lowercase_and_terminated),
      cmocka_unit_test(hexval_takes_both_cases_and_nothing_else),
      cmocka_unit_test(pct_decode_refuses_what_it_must),
      cmocka_unit_test(utf8_text_is_well_formed_with_no_control),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

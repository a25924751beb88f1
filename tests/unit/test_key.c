/* test_key.c - Idempotency-Key parsing and validation, and the duration and
 * size syntax of flags. */
#include <stdio.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "idem/idem.h"

static int parse(const char *value, char *out) {
  const char *why = NULL;
  int n = idem_key_parse(value, strlen(value), out, &why);
  if (n < 0)
    assert_non_null(why); /* every refusal says why */
  return n;
}

static void accepted_keys(void **state) {
  (void)state;
  char out[IDEM_KEY_MAX + 1];
  assert_int_equal(parse("abc-123", out), 7);
  assert_string_equal(out, "abc-123");
  assert_int_equal(parse("  tok  ", out), 3);
  assert_string_equal(out, "tok");
  assert_int_equal(parse("\"with spaces inside\"", out), 18);
  assert_string_equal(out, "with spaces inside");
  assert_int_equal(parse("\"esc \\\" and \\\\\"", out), 11);
  assert_string_equal(out, "esc \" and \\");
  assert_int_equal(parse("8e6f4d2a-1b0c-4f5e-9a7d-3c2b1a0f9e8d", out), 36);
  assert_int_equal(parse("a", out), 1);
  char longest[IDEM_KEY_MAX + 1];
  memset(longest, 'x', IDEM_KEY_MAX);
  longest[IDEM_KEY_MAX] = '\0';
  assert_int_equal(parse(longest, out), IDEM_KEY_MAX);
  char quoted[IDEM_KEY_MAX + 3];
  snprintf(quoted, sizeof quoted, "\"%s\"", longest);
  assert_int_equal(parse(quoted, out), IDEM_KEY_MAX);
}

static void refused_keys(void **state) {
  (void)state;
  char out[IDEM_KEY_MAX + 1];
  const char *bad[] = {"", "   ", "\"\"", "two words", "tab\there", "\"unterminated",
                       "\"trailing\"x", "\"bad \\n escape\"", "ctl\x01", "\"ctl\x7f\"",
                       "caf\xc3\xa9", "\"\\\""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (parse(bad[i], out) != IDEM_EKEY)
      fail_msg("accepted bad key #%zu '%s'", i, bad[i]);
  char too_long[IDEM_KEY_MAX + 2];
  memset(too_long, 'x', IDEM_KEY_MAX + 1);
  too_long[IDEM_KEY_MAX + 1] = '\0';
  assert_int_equal(parse(too_long, out), IDEM_EKEY);
  char quoted[IDEM_KEY_MAX + 4];
  snprintf(quoted, sizeof quoted, "\"%s\"", too_long);
  assert_int_equal(parse(quoted, out), IDEM_EKEY);
  assert_int_equal(idem_key_parse(NULL, 0, out, NULL), IDEM_EKEY);
}

static void stored_key_validity(void **state) {
  (void)state;
  assert_true(idem_key_valid("a b", 3));
  assert_false(idem_key_valid("", 0));
  assert_false(idem_key_valid("a\nb", 3));
  assert_false(idem_key_valid(NULL, 1));
}

static void durations(void **state) {
  (void)state;
  static const char *const good[] = {"500ms", "30s", "5m", "24h", "7d"};
  static const int64_t good_ms[] = {500, 30000, 300000, 86400000, 604800000};
  int64_t ms;
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    assert_int_equal(idem_parse_duration(good[i], &ms), 0);
    assert_int_equal(ms, good_ms[i]);
  }
  const char *bad[] = {"", "s", "10", "0s", "-5s", "1.5s", "10 s", "10sec", "99999999999999d",
                       "18446744073709551616ms"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (idem_parse_duration(bad[i], &ms) != IDEM_EINVAL)
      fail_msg("accepted bad duration '%s'", bad[i]);
  assert_int_equal(idem_parse_duration(NULL, &ms), IDEM_EINVAL);
}

static void sizes(void **state) {
  (void)state;
  static const struct {
    const char *text;
    uint64_t bytes;
  } good[] = {{"512", 512}, {"64KiB", 65536}, {"1MiB", 1048576}, {"1MB", 1000000},
              {"2G", 2147483648u}};
  uint64_t b;
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    assert_int_equal(idem_parse_size(good[i].text, &b), 0);
    assert_int_equal(b, good[i].bytes);
  }
  const char *bad[] = {"", "KiB", "1.5MiB", "-1", "1 MiB", "1mib", "1XB", "99999999999TiB"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (idem_parse_size(bad[i], &b) != IDEM_EINVAL)
      fail_msg("accepted bad size '%s'", bad[i]);
  /* nowhere to put it: refused, as a NULL text is */
  assert_int_equal(idem_parse_size("1", NULL), IDEM_EINVAL);
  assert_int_equal(idem_parse_size(NULL, &b), IDEM_EINVAL);
  assert_int_equal(idem_parse_duration("1s", NULL), IDEM_EINVAL);
}

static void errors_have_names(void **state) {
  (void)state;
  assert_string_equal(idem_errname(IDEM_ESTALE), "IDEM_ESTALE");
  assert_non_null(strstr(idem_strerror(IDEM_ESTALE), "stale"));
  assert_string_equal(idem_errname(-999), "IDEM_EUNKNOWN");
  assert_string_equal(idem_strerror(0), "success");
  for (int e = -1; e >= IDEM_ESCOPE; e--)
    assert_string_not_equal(idem_strerror(e), "unknown error");
}

UNIT_TESTS(cmocka_unit_test(accepted_keys),
           cmocka_unit_test(refused_keys),
           cmocka_unit_test(stored_key_validity),
           cmocka_unit_test(durations),
           cmocka_unit_test(sizes),
           cmocka_unit_test(errors_have_names))

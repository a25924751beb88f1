/* test_settings.c - the settings table (src/core/settings.c): defaults,
 * every value kind and its refusal, flag forms, positional words, --help. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "core/settings.h"

typedef struct {
  int on;
  const char *name;
  int64_t wait_ms;
  uint64_t size;
  int count;
  char custom[16];
  settings_words words;
} cfg_t;

static int parse_upper(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  if (strlen(v) >= sizeof ((cfg_t *)cfg)->custom || (v[0] && (v[0] < 'A' || v[0] > 'Z'))) {
    snprintf(err, len, "--%s: '%s' is not upper case", s->name, v);
    return -1;
  }
  snprintf(((cfg_t *)cfg)->custom, sizeof ((cfg_t *)cfg)->custom, "%s", v);
  return 0;
}

static const setting rows[] = {
    {"on", NULL, SETTING_SWITCH, offsetof(cfg_t, on), NULL, 0, 0, NULL, "a switch"},
    {"name", "TEXT", SETTING_STRING, offsetof(cfg_t, name), "anon", 0, 0, NULL, "a name"},
    {"wait", "DUR", SETTING_DURATION, offsetof(cfg_t, wait_ms), "0", 0, 60000, NULL,
     "a wait\nover two lines"},
    {"size", "SIZE", SETTING_SIZE, offsetof(cfg_t, size), "64KiB", 1024, 1 << 20, NULL, "a size"},
    {"count", "N", SETTING_COUNT, offsetof(cfg_t, count), "3", 1, 10, NULL, "a count"},
    {"upper", "WORD", SETTING_CUSTOM, 0, "ABC", 0, 0, parse_upper, "custom"},
};
static const setting_table table = {"test", rows, sizeof rows / sizeof rows[0]};

static char err[256];

static int parse(cfg_t *c, int argc, char **argv) {
  memset(c, 0, sizeof *c);
  assert_int_equal(settings_defaults(&table, c, err, sizeof err), 0);
  c->words.max = 4;
  return settings_parse_argv(&table, c, argc, argv, settings_take_word, &c->words, err,
                             sizeof err);
}
#define PARSE(c, ...)                                                                         \
  parse(c, (int)(sizeof((char *[]){"cmd", __VA_ARGS__}) / sizeof(char *)),                   \
        (char *[]){"cmd", __VA_ARGS__})

/* Every setting of c, as the test table's rows hold them. */
static void expect_values(const cfg_t *c, int on, const char *name, int64_t wait_ms, uint64_t size,
                          int count, const char *custom) {
  assert_int_equal(c->on, on);
  assert_string_equal(c->name, name);
  assert_int_equal(c->wait_ms, wait_ms);
  assert_int_equal(c->size, size);
  assert_int_equal(c->count, count);
  assert_string_equal(c->custom, custom);
}

static void test_defaults(void **state) {
  (void)state;
  cfg_t c;
  assert_int_equal(parse(&c, 1, (char *[]){"cmd"}), 0);
  expect_values(&c, 0, "anon", 0, 65536, 3, "ABC");
}

static void test_every_kind_and_form(void **state) {
  (void)state;
  cfg_t c;
  assert_int_equal(PARSE(&c, "--on", "--name", "x", "--wait=2s", "--size", "1MiB", "--count=10",
                         "--upper", "Q", "w1", "--", "--w2"),
                   0);
  expect_values(&c, 1, "x", 2000, 1 << 20, 10, "Q");
  assert_int_equal(c.words.n, 2);
  assert_string_equal(c.words.words[0], "w1");
  assert_string_equal(c.words.words[1], "--w2"); /* after "--", a word */
  assert_int_equal(PARSE(&c, "--name="), 0); /* an empty string is a value */
  assert_string_equal(c.name, "");
  assert_int_equal(PARSE(&c, "--name=--x"), 0); /* =VALUE takes anything */
  assert_string_equal(c.name, "--x");
}

static void expect(cfg_t *c, int rc, const char *needle) {
  assert_int_equal(rc, -1);
  if (!strstr(err, needle))
    fail_msg("'%s' lacks '%s'", err, needle);
  (void)c;
}

static void test_refusals_name_the_flag_and_form(void **state) {
  (void)state;
  cfg_t c;
  expect(&c, PARSE(&c, "--on=1"), "--on takes no value");
  expect(&c, PARSE(&c, "--wait", "soon"), "(e.g. 500ms, 30s, 24h), or 0");
  expect(&c, PARSE(&c, "--wait", "2m"), "--wait: '2m' is out of range; use a duration from 0 to 1m");
  expect(&c, PARSE(&c, "--size", "lots"), "(e.g. 64KiB, 1MiB), at most 1MiB");
  /* well-formed, but zero or past what the parser takes: out of range, not
   * "not a size" (nor "not a duration") */
  expect(&c, PARSE(&c, "--size", "0"), "--size: '0' is out of range; use a size from 1KiB to 1MiB");
  expect(&c, PARSE(&c, "--size", "0KiB"), "'0KiB' is out of range");
  expect(&c, PARSE(&c, "--size", "99999999999999999999"), "is out of range");
  expect(&c, PARSE(&c, "--size", "99999999TiB"), "is out of range");
  expect(&c, PARSE(&c, "--size", "1.5MiB"), "is not a size");
  expect(&c, PARSE(&c, "--size", "1kib"), "is not a size");
  expect(&c, PARSE(&c, "--wait", "99999999d"), "'99999999d' is out of range; use a duration from 0 to 1m");
  expect(&c, PARSE(&c, "--wait", "99999999999999999999ms"), "is out of range");
  expect(&c, PARSE(&c, "--wait", "-1s"), "is not a duration");
  expect(&c, PARSE(&c, "--wait", "1.5s"), "is not a duration");
  expect(&c, PARSE(&c, "--wait", "10S"), "is not a duration");
  expect(&c, PARSE(&c, "--size", "512"), "from 1KiB to 1MiB (e.g. 64KiB)");
  expect(&c, PARSE(&c, "--count", "11"), "--count: '11' is not a number from 1 to 10");
  expect(&c, PARSE(&c, "--count", "2x"), "from 1 to 10");
  /* digits only, as durations and sizes take them: strtoll's leading
   * blanks and sign are not a number's form ("5 " was refused, " 5" not) */
  expect(&c, PARSE(&c, "--count", " 5"), "--count: ' 5' is not a number from 1 to 10");
  expect(&c, PARSE(&c, "--count", "+5"), "--count: '+5' is not a number from 1 to 10");
  expect(&c, PARSE(&c, "--count", "\t5"), "is not a number from 1 to 10");
  expect(&c, PARSE(&c, "--count", "-0"), "is not a number from 1 to 10");
  expect(&c, PARSE(&c, "--upper", "q"), "--upper: 'q' is not upper case");
  expect(&c, PARSE(&c, "--nope"), "unknown option '--nope'");
  expect(&c, PARSE(&c, "--nope=1"), "unknown option '--nope'");
  expect(&c, PARSE(&c, "-x"), "unknown option '-x'");
  expect(&c, PARSE(&c, "--name"), "--name needs a value");
  /* a flag is never the value of the flag before it */
  expect(&c, PARSE(&c, "--name", "--on"), "--name needs a value; got the flag '--on'");
  expect(&c, PARSE(&c, "a", "b", "c", "d", "e"), "too many");
  assert_int_equal(settings_parse_argv(&table, &c, 2, (char *[]){"cmd", "word"}, NULL, NULL, err,
                                       sizeof err),
                   -1);
  assert_non_null(strstr(err, "unexpected argument 'word'"));
}

static void test_help_and_set(void **state) {
  (void)state;
  cfg_t c;
  assert_int_equal(PARSE(&c, "--count", "2", "--help"), 1);
  assert_int_equal(PARSE(&c, "-h"), 1);
  assert_int_equal(settings_set(&table, &c, "count", "7", err, sizeof err), 0);
  assert_int_equal(c.count, 7);
  assert_int_equal(settings_set(&table, &c, "on", NULL, err, sizeof err), 0);
  assert_int_equal(c.on, 1);
  assert_int_equal(settings_set(&table, &c, "on", "false", err, sizeof err), 0);
  assert_int_equal(c.on, 0);
  assert_int_equal(settings_set(&table, &c, "missing", "1", err, sizeof err), -1);
}

static void test_usage_text(void **state) {
  (void)state;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  settings_usage(&table, f);
  fclose(f);
  /* every flag, its form, help aligned at one column, defaults at the end */
  assert_non_null(strstr(text, "  --on                      a switch\n"));
  assert_non_null(strstr(text, "  --wait DUR                a wait\n"
                               "                            over two lines (default 0)\n"));
  assert_non_null(strstr(text, "  --size SIZE               a size (default 64KiB)\n"));
  free(text);
}

UNIT_TESTS(cmocka_unit_test(test_defaults),
           cmocka_unit_test(test_every_kind_and_form),
           cmocka_unit_test(test_refusals_name_the_flag_and_form),
           cmocka_unit_test(test_help_and_set),
           cmocka_unit_test(test_usage_text))

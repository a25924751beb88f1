/* test_http_config.c - `idem serve` flags (src/http/config.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http/config.c"

#define UP "--upstream", "http://127.0.0.1:9000"

/* The route tables successful parses built, released at the end. */
static gw_routes *built[256];
static int nbuilt;

static int release_built(void **state) {
  (void)state;
  while (nbuilt)
    gw_routes_release(built[--nbuilt]);
  return 0;
}

static int parse(gw_config *cfg, char *err, int argc, char **argv) {
  gw_config_init(cfg);
  int rc = gw_config_parse(cfg, argc, argv, err, 512);
  if (cfg->routes && nbuilt < 256)
    built[nbuilt++] = cfg->routes;
  return rc;
}
#define PARSE(cfg, err, ...)                                                  \
  parse(cfg, err, (int)(sizeof((char *[]){"serve", __VA_ARGS__}) / sizeof(char *)), \
        (char *[]){"serve", __VA_ARGS__})

static void test_defaults(void **state) {
  (void)state;
  gw_config c;
  char err[512];
  assert_int_equal(PARSE(&c, err, UP), 0);
  assert_string_equal(c.listen.host, "127.0.0.1");
  assert_int_equal(c.listen.port, 8081);
  assert_string_equal(c.upstream_host, "127.0.0.1");
  assert_int_equal(c.upstream_port, 9000);
  assert_string_equal(c.upstream_authority, "127.0.0.1:9000");
  assert_string_equal(c.store_uri, "lmdb:./idem-data");
  assert_int_equal(c.policy.ttl_ms, 24 * 3600 * 1000);
  assert_int_equal(c.policy.lock_ttl_ms, 30000);
  assert_int_equal(c.policy.nmethods, 2);
  assert_string_equal(c.policy.methods[0], "POST");
  assert_string_equal(c.policy.methods[1], "PATCH");
  assert_false(c.policy.require_key);
  assert_string_equal(c.scope_header, "");
  assert_int_equal(c.policy.wait_ms, 0);
  assert_false(c.fail_open);
  assert_int_equal(c.max_body, 1024 * 1024);
  assert_int_equal(c.upstream_timeout_ms, 30000);
  assert_false(c.has_admin);
  assert_true(c.workers >= 1);
  assert_int_equal(c.send_timeout_ms, 60000);
  assert_int_equal(c.drain_timeout_ms, 30000);
  assert_int_equal(c.max_conns, 4096);
  assert_string_equal(c.spool_dir, "./idem-spool");
}

static void test_every_flag(void **state) {
  (void)state;
  gw_config c;
  char err[512];
  int rc = PARSE(&c, err, "--listen", "0.0.0.0:9999", "--upstream=http://localhost:81/",
                 "--store", "memory:x", "--ttl", "7d", "--lock-ttl", "500ms",
                 "--methods", "POST,PUT", "--require-key", "--scope-header",
                 "Authorization", "--wait", "2s", "--on-store-error", "open",
                 "--max-body", "64KiB", "--upstream-timeout", "5s",
                 "--admin-listen", "[::1]:9100", "--workers", "3",
                 "--max-response", "2MiB", "--max-header", "16KiB",
                 "--client-timeout", "3s", "--idle-timeout", "1m",
                 "--send-timeout", "2s", "--drain-timeout", "5s", "--max-conns", "100",
                 "--spool", "/var/lib/idem/spool");
  if (rc)
    fail_msg("%s", err);
  assert_string_equal(c.listen.host, "0.0.0.0");
  assert_int_equal(c.listen.port, 9999);
  assert_string_equal(c.upstream_host, "localhost");
  assert_int_equal(c.upstream_port, 81);
  assert_string_equal(c.store_uri, "memory:x");
  assert_int_equal(c.policy.ttl_ms, 7LL * 24 * 3600 * 1000);
  assert_int_equal(c.policy.lock_ttl_ms, 500);
  assert_int_equal(c.policy.nmethods, 2);
  assert_string_equal(c.policy.methods[1], "PUT");
  assert_true(c.policy.require_key);
  assert_string_equal(c.scope_header, "Authorization");
  assert_int_equal(c.policy.wait_ms, 2000);
  assert_true(c.fail_open);
  assert_int_equal(c.max_body, 65536);
  assert_int_equal(c.upstream_timeout_ms, 5000);
  assert_true(c.has_admin);
  assert_string_equal(c.admin.host, "::1");
  assert_int_equal(c.admin.port, 9100);
  assert_int_equal(c.workers, 3);
  assert_int_equal(c.max_response, 2 * 1024 * 1024);
  assert_int_equal(c.max_header, 16384);
  assert_int_equal(c.client_timeout_ms, 3000);
  assert_int_equal(c.idle_timeout_ms, 60000);
  assert_int_equal(c.send_timeout_ms, 2000);
  assert_int_equal(c.drain_timeout_ms, 5000);
  assert_int_equal(c.max_conns, 100);
  assert_string_equal(c.spool_dir, "/var/lib/idem/spool");
  assert_int_equal(PARSE(&c, err, UP, "--spool", "off"), 0);
  assert_null(c.spool_dir);
}

static void test_addresses(void **state) {
  (void)state;
  gw_config c;
  char err[512];
  assert_int_equal(PARSE(&c, err, UP, "--listen", ":8000"), 0);
  assert_string_equal(c.listen.host, "0.0.0.0");
  assert_int_equal(PARSE(&c, err, UP, "--listen", "127.0.0.1:0"), 0);
  assert_int_equal(c.listen.port, 0);
  assert_int_equal(PARSE(&c, err, "--upstream", "http://[::1]:8080"), 0);
  assert_string_equal(c.upstream_host, "::1");
  assert_string_equal(c.upstream_authority, "[::1]:8080");
  assert_int_equal(PARSE(&c, err, "--upstream", "http://api.internal"), 0);
  assert_int_equal(c.upstream_port, 80);
}

/* Every refusal names the flag and shows the accepted form. */
static void expect_refused(const char *flag, const char *value, const char *form) {
  gw_config c;
  char err[512];
  char *argv[] = {"serve", "--upstream", "http://127.0.0.1:9000", (char *)flag,
                  (char *)value};
  gw_config_init(&c);
  if (gw_config_parse(&c, 5, argv, err, sizeof err) != -1)
    fail_msg("%s %s accepted", flag, value);
  if (!strstr(err, flag) || !strstr(err, form))
    fail_msg("%s %s: message '%s' lacks the flag or '%s'", flag, value, err, form);
}

static void test_bad_values(void **state) {
  (void)state;
  expect_refused("--ttl", "5x", "24h");
  expect_refused("--ttl", "0", "30s");
  expect_refused("--lock-ttl", "-1s", "30s");
  expect_refused("--wait", "soon", "500ms");
  expect_refused("--upstream-timeout", "", "30s");
  expect_refused("--max-body", "1XB", "1MiB");
  expect_refused("--max-body", "0", "'0' is out of range; use a size from 1B to 4GiB");
  /* zero or too large, with a unit: out of range, naming the range */
  expect_refused("--ttl", "0s", "'0s' is out of range; use a duration from 1ms to 36500d");
  expect_refused("--lock-ttl", "40000d", "'40000d' is out of range; use a duration from 1ms");
  expect_refused("--client-timeout", "99999999999999999999ms", "is out of range");
  expect_refused("--max-header", "0KiB", "'0KiB' is out of range; use a size from 1KiB to 1MiB");
  expect_refused("--max-response", "99999999999999999999", "is out of range");
  /* no store keeps an answer body over 1 GiB: one bigger must stream */
  expect_refused("--max-response", "2GiB", "'2GiB' is out of range; use a size from 1B to 1GiB");
  expect_refused("--listen", "8081", "IP:PORT");
  expect_refused("--listen", "127.0.0.1:70000", "IP:PORT");
  expect_refused("--admin-listen", "nohost:1", "IP:PORT");
  expect_refused("--upstream", "https://127.0.0.1:9000", "http://HOST:PORT");
  expect_refused("--upstream", "http://127.0.0.1:9000/v1", "http://HOST:PORT");
  expect_refused("--upstream", "127.0.0.1:9000", "http://HOST:PORT");
  expect_refused("--on-store-error", "maybe", "closed or open");
  expect_refused("--methods", "POST,,PUT", "POST,PATCH");
  expect_refused("--methods", "POST,connect", "POST,PATCH"); /* always a 400 */
  expect_refused("--scope-header", "Bad Header", "Authorization");
  expect_refused("--workers", "0", "1 to 64");
  expect_refused("--max-conns", "0", "1 to 1000000");
  expect_refused("--send-timeout", "never", "30s");
  expect_refused("--drain-timeout", "0", "30s");
  expect_refused("--spool", "", "off");
}

static void test_usage_errors(void **state) {
  (void)state;
  gw_config c;
  char err[512];
  assert_int_equal(PARSE(&c, err, "--listen", "127.0.0.1:1"), -1);
  assert_non_null(strstr(err, "--upstream"));
  assert_int_equal(PARSE(&c, err, UP, "--bogus"), -1);
  assert_non_null(strstr(err, "--bogus"));
  assert_int_equal(PARSE(&c, err, UP, "--ttl"), -1);
  assert_non_null(strstr(err, "--ttl needs a value"));
  /* a flag is never taken as the value of the one before it */
  assert_int_equal(PARSE(&c, err, UP, "--store", "--ttl", "1s"), -1);
  assert_non_null(strstr(err, "--store needs a value"));
  assert_non_null(strstr(err, "'--ttl'"));
  assert_int_equal(PARSE(&c, err, UP, "--scope-header=--x"), 0); /* =VALUE takes anything */
  assert_int_equal(PARSE(&c, err, UP, "stray"), -1);
  assert_int_equal(PARSE(&c, err, "--help"), 1);
  assert_int_equal(PARSE(&c, err, UP, "--wait", "0"), 0);
  assert_int_equal(c.policy.wait_ms, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),  cmocka_unit_test(test_every_flag),
      cmocka_unit_test(test_addresses), cmocka_unit_test(test_bad_values),
      cmocka_unit_test(test_usage_errors),
  };
  return cmocka_run_group_tests(tests, NULL, release_built);
}

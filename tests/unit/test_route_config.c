/* test_route_config.c - the YAML config file (src/http/config_file.c) and
 * serve's parse over it (src/http/config.c): the file's values as flag
 * text, errors with FILE:LINE, flags over the file, routes over the
 * defaults, and what a reload says cannot change. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit.h"

#include "http/config.c"

static char *write_file(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/idem-route-config-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

static int load_text(const char *text, gw_config *cfg, char *err, int extra, char **more) {
  char *path = write_file(text);
  char *argv[16] = {"serve", "--config", path, "--upstream", "http://127.0.0.1:9"};
  int argc = 5;
  for (int i = 0; i < extra; i++)
    argv[argc++] = more[i];
  static char *keep[16]; /* argv outlives cfg (reload reads it again) */
  memcpy(keep, argv, sizeof argv);
  gw_config_init(cfg);
  int rc = gw_config_parse(cfg, argc, keep, err, 512);
  return rc;
}

static void test_values_as_flag_text(void **state) {
  (void)state;
  cf_doc *d = NULL;
  char err[512];
  const char *text = "listen: 127.0.0.1:1\n"
                     "admin_listen: 127.0.0.1:2\n"
                     "defaults:\n"
                     "  methods: [POST, PUT]\n"
                     "  fingerprint: {json: [/a, /b]}\n"
                     "  replay_headers: {drop: [Set-Cookie]}\n"
                     "routes:\n"
                     "  - match: {methods: [post], path: /x/*}\n"
                     "    store_statuses: [2xx, 500]\n"
                     "  - ttl: 1s\n";
  assert_int_equal(cf_parse(text, strlen(text), "f.yaml", &(setting_table){"serve", serve_settings,
                            sizeof serve_settings / sizeof serve_settings[0]},
                            &gw_policy_table, &d, err, sizeof err), 0);
  assert_int_equal(d->ntop, 5);
  assert_string_equal(cf_top(d, "admin-listen")->value, "127.0.0.1:2");
  assert_string_equal(cf_top(d, "admin-listen")->key, "admin_listen");
  assert_int_equal(cf_top(d, "admin-listen")->line, 2);
  assert_string_equal(cf_top(d, "methods")->value, "POST,PUT");
  assert_string_equal(cf_top(d, "fingerprint")->value, "json:/a,/b");
  assert_string_equal(cf_top(d, "replay-headers")->value, "drop:Set-Cookie");
  assert_int_equal(d->nroutes, 2);
  assert_string_equal(d->routes[0].path, "/x/*");
  assert_string_equal(d->routes[0].methods, "post");
  assert_int_equal(d->routes[0].line, 8);
  assert_string_equal(d->routes[0].items[0].value, "2xx,500");
  assert_null(d->routes[1].path);
  assert_int_equal(d->routes[1].line, 10);
  cf_free(d);
}

/* The file is refused at line with words in the reason. */
static void bad(const char *text, int line, const char *words) {
  gw_config c;
  char err[512] = "", at[32];
  if (load_text(text, &c, err, 0, NULL) != -1)
    fail_msg("accepted:\n%s", text);
  snprintf(at, sizeof at, ":%d: ", line);
  if (!strstr(err, at) || !strstr(err, words))
    fail_msg("file:\n%s\nerror '%s' lacks '%s' or '%s'", text, err, at, words);
  gw_config_free(&c);
  unlink(c.argv[2]);
}

static void test_errors_name_the_line(void **state) {
  (void)state;
  bad("listen: 127.0.0.1:1\nnope: 1\n", 2, "unknown key nope");
  bad("config: other.yaml\n", 1, "unknown key config");
  bad("ttl: [1s, 2s]\n", 1, "ttl takes one value, not a list");
  bad("routes:\n  - match: {path: /a}\n    require_key: [true]\n", 3,
      "require_key takes one value, not a list");
  bad("ttl:\n", 1, "ttl must be a value");
  bad("defaults: [1]\n", 1, "defaults must be a map");
  bad("defaults:\n  scope_header: X\n", 2, "scope_header is not a route setting");
  bad("routes: {a: 1}\n", 1, "routes must be a list");
  bad("routes:\n  - 1\n", 2, "a route must be a map");
  bad("routes:\n  - match: [a]\n", 2, "match must be a map");
  bad("routes:\n  - match: {path: /a, path: /b}\n", 2, "path is set twice");
  bad("routes:\n  - match: {methods: [P O]}\n", 2, "is not a method list");
  bad("routes:\n  - match: {path: /a}\n    ttl: 1s\n    ttl: 2s\n", 4, "ttl is set twice");
  bad("routes:\n  - match: {path: /a}\n    fingerprint: {json: [/a], raw: x}\n", 3,
      "a map here holds one key");
  bad("routes:\n  - match: {path: /a}\n    methods: [\"A,B\"]\n", 3, "holds a comma");
  bad("routes:\n  - match: {path: /a}\n    mode: {x: {y: z}}\n", 3, "mode must be a value");
  bad("a: b: c\n", 1, "mapping values are not allowed");
  bad("", 1, "the file is empty");
  bad("key: \"a\\0b\"\n", 1, "holds a NUL byte");
  bad("defaults: &d {ttl: 1s}\nroutes:\n  - match: *d\n", 1, "match takes methods and path");
  /* an encoding error at the line of its byte; lone CRs end lines too */
  bad("ttl: 1h\nwait: 1s\nkey: \"\xff\"\n", 3, "invalid leading UTF-8 octet");
  bad("ttl: 1h\rwait: 1s\r\nmode: off\rkey: \xe2\x28\n", 4, "invalid trailing UTF-8 octet");
  /* values in the reason on one line; a duplicate named as its line has it */
  bad("ttl: |\n  2h\n", 1, "ttl: '2h\\n' is not a duration");
  bad("wait: \"1s\\x01\\u0085\"\n", 1, "wait: '1s\\x01\\u0085' is not");
  bad("lock_ttl: 1s\nlock-ttl: 2s\n", 2, "lock-ttl is set twice (first at line 1, as lock_ttl)");
}

/* A file nesting n lists deep under routes:, through cf_parse: its error. */
static void nested(int n, char *err, size_t errlen) {
  char text[4096] = "routes: ";
  size_t len = strlen(text);
  for (int i = 0; i < n; i++)
    text[len++] = '[';
  for (int i = 0; i < n; i++)
    text[len++] = ']';
  text[len] = 0;
  cf_doc *d = NULL;
  setting_table serve = {"serve", serve_settings, sizeof serve_settings / sizeof serve_settings[0]};
  err[0] = 0;
  assert_int_equal(cf_parse(text, len, "f.yaml", &serve, &gw_policy_table, &d, err, errlen), -1);
}

static void test_nesting_is_bounded(void **state) {
  (void)state;
  char err[512];
  nested(CF_MAX_DEPTH - 1, err, sizeof err); /* with the top map: 64 deep */
  assert_null(strstr(err, "nested"));
  assert_non_null(strstr(err, "f.yaml:1: a route must be a map"));
  nested(CF_MAX_DEPTH, err, sizeof err);
  assert_string_equal(err, "f.yaml:1: lists and maps nested deeper than 64 levels; a setting "
                           "needs 5 at most");
  nested(2000, err, sizeof err);
  assert_non_null(strstr(err, "nested deeper than 64"));
}

static void test_flags_over_file_routes_over_defaults(void **state) {
  (void)state;
  gw_config c;
  char err[512];
  char *flags[] = {"--ttl", "2h", "--methods=PUT"};
  const char *text = "ttl: 1h\n"
                     "wait: 5s\n"
                     "routes:\n"
                     "  - match: {path: /a}\n"
                     "    ttl: 3h\n"
                     "  - match: {path: /b}\n"
                     "    key: json:/id\n";
  assert_int_equal(load_text(text, &c, err, 3, flags), 0);
  assert_int_equal(c.policy.ttl_ms, 2 * 3600000);  /* the flag */
  assert_int_equal(c.policy.wait_ms, 5000);        /* the file */
  assert_string_equal(c.policy.methods[0], "PUT"); /* the flag */
  const gw_routes *t = c.routes;
  assert_int_equal(t->n, 2);
  assert_int_equal(t->routes[0].policy.ttl_ms, 3 * 3600000); /* its own */
  assert_int_equal(t->routes[1].policy.ttl_ms, 2 * 3600000); /* the defaults */
  assert_int_equal(t->routes[1].policy.wait_ms, 5000);
  assert_int_equal(t->routes[1].policy.key_kind, GW_KEY_JSON);
  assert_int_equal(t->defaults.policy.ttl_ms, 2 * 3600000);
  assert_string_equal(t->source, c.config_file);

  /* a reload of the same file: nothing changed; then one that changes a
   * setting that cannot change live (and a route, which can) */
  gw_routes *next = NULL;
  char changed[128];
  assert_int_equal(gw_config_reload(&c, &next, changed, sizeof changed, err, sizeof err), 0);
  assert_string_equal(changed, "");
  gw_routes_release(next);
  FILE *f = fopen(c.config_file, "w");
  fputs("ttl: 1h\nwait: 5s\nmax_conns: 7\nroutes:\n  - match: {path: /a}\n    ttl: 4h\n", f);
  fclose(f);
  assert_int_equal(gw_config_reload(&c, &next, changed, sizeof changed, err, sizeof err), 0);
  assert_string_equal(changed, "max_conns");
  assert_int_equal(next->n, 1);
  assert_int_equal(next->routes[0].policy.ttl_ms, 4 * 3600000);
  gw_routes_release(next);
  f = fopen(c.config_file, "w");
  fputs("routes:\n  - match: {path: /a}\n    ttl: 4x\n", f);
  fclose(f);
  assert_int_equal(gw_config_reload(&c, &next, changed, sizeof changed, err, sizeof err), -1);
  assert_non_null(strstr(err, ":3: ttl: '4x'"));
  /* a reload says an encoding error's line too */
  f = fopen(c.config_file, "w");
  fputs("ttl: 1h\nwait: 5s\nmode: \"\xc3\x28\"\n", f);
  fclose(f);
  assert_int_equal(gw_config_reload(&c, &next, changed, sizeof changed, err, sizeof err), -1);
  assert_non_null(strstr(err, ":3: invalid trailing UTF-8 octet"));
  unlink(c.config_file);
  gw_config_free(&c);
}

static void test_file_alone(void **state) {
  (void)state;
  gw_config c;
  char err[512];
  char path[64];
  snprintf(path, sizeof path, "%s", write_file("upstream: http://127.0.0.1:7\n"));
  char *argv[] = {"serve", "--config", path};
  gw_config_init(&c);
  assert_int_equal(gw_config_parse(&c, 3, argv, err, sizeof err), 0);
  assert_int_equal(c.upstream_port, 7);
  gw_config_free(&c);
  /* a missing file */
  char *missing[] = {"serve", "--config=/nonexistent/x.yaml", "--upstream", "http://a:1"};
  gw_config_init(&c);
  assert_int_equal(gw_config_parse(&c, 4, missing, err, sizeof err), -1);
  assert_non_null(strstr(err, "/nonexistent/x.yaml: No such file"));
  gw_config_free(&c);
  /* without an upstream anywhere */
  char *empty = write_file("ttl: 1h\n");
  char *argv2[] = {"serve", "--config", empty};
  gw_config_init(&c);
  assert_int_equal(gw_config_parse(&c, 3, argv2, err, sizeof err), -1);
  assert_non_null(strstr(err, "upstream: in the config file"));
  gw_config_free(&c);
  gw_config_init(&c);
  assert_int_equal(gw_config_parse_file_only(&c, 3, argv2, err, sizeof err), 0);
  gw_config_free(&c);
  unlink(path);
  unlink(empty);
}

UNIT_TESTS(cmocka_unit_test(test_values_as_flag_text),
           cmocka_unit_test(test_errors_name_the_line),
           cmocka_unit_test(test_nesting_is_bounded),
           cmocka_unit_test(test_flags_over_file_routes_over_defaults),
           cmocka_unit_test(test_file_alone))

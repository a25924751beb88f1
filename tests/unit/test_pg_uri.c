/* test_pg_uri.c - the postgres:// store URI: idem's own options are taken
 * out, libpq's pass through, a connect timeout is added unless given. No
 * server needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "store/postgres.h"

static void parse_ok(const char *uri, const char *conninfo, int migrate, int pool, int batch,
                     int64_t timeout_ms) {
  idem_pg_uri u;
  char *msg = NULL;
  assert_int_equal(idem_pg_uri_parse(uri, &u, &msg), 0);
  assert_null(msg);
  assert_string_equal(u.conninfo, conninfo);
  assert_int_equal(u.migrate, migrate);
  assert_int_equal(u.pool, pool);
  assert_int_equal(u.batch, batch);
  assert_int_equal(u.timeout_ms, timeout_ms);
  free(u.conninfo);
}

static void parse_bad(const char *uri, const char *words) {
  idem_pg_uri u;
  char *msg = NULL;
  assert_int_equal(idem_pg_uri_parse(uri, &u, &msg), IDEM_EURI);
  assert_non_null(msg);
  assert_non_null(strstr(msg, words));
  free(msg);
}

static void options_are_taken_out(void **state) {
  (void)state;
  parse_ok("postgres://u@h/db", "postgres://u@h/db?connect_timeout=10", 0, 2, 64, 10000);
  parse_ok("postgresql://u:p@h:5433/db?migrate=1",
           "postgresql://u:p@h:5433/db?connect_timeout=10", 1, 2, 64, 10000);
  parse_ok("postgres://h/db?sslmode=disable&pool=8&batch=1&timeout=2s&application_name=x",
           "postgres://h/db?sslmode=disable&application_name=x&connect_timeout=10", 0, 8, 1,
           2000);
  parse_ok("postgres://h/db?pool=3&connect_timeout=3&migrate=true",
           "postgres://h/db?connect_timeout=3", 1, 3, 64, 10000);
  parse_ok("postgres:///db?host=/run/postgresql&migrate=0",
           "postgres:///db?host=/run/postgresql&connect_timeout=10", 0, 2, 64, 10000);
}

static int64_t sweep_interval_of(const char *uri) {
  idem_pg_uri u;
  assert_int_equal(idem_pg_uri_parse(uri, &u, NULL), 0);
  free(u.conninfo);
  return u.sweep_interval_ms;
}

static void sweep_interval_is_taken_out(void **state) {
  (void)state;
  assert_int_equal(sweep_interval_of("postgres://h/db"), 5000);
  assert_int_equal(sweep_interval_of("postgres://h/db?sweep_interval=1m"), 60000);
  assert_int_equal(sweep_interval_of("postgres://h/db?sweep_interval=off"), 0);
  parse_ok("postgres://h/db?sweep_interval=30s", "postgres://h/db?connect_timeout=10", 0, 2, 64,
           10000);
  parse_bad("postgres://h/db?sweep_interval=soon", "sweep_interval=");
}

static void bad_options_are_refused(void **state) {
  (void)state;
  parse_bad("redis://h", "postgres://");
  parse_bad("postgres://h/db?pool=0", "pool=");
  parse_bad("postgres://h/db?pool=2&pool=3", "pool= given twice");
  parse_bad("postgres://h/db?sslmode=disable&sslmode=require", "sslmode= given twice");
  parse_bad("postgres://h/db?pool=65", "pool=");
  parse_bad("postgres://h/db?pool=", "pool=");
  parse_bad("postgres://h/db?batch=2000", "batch=");
  parse_bad("postgres://h/db?migrate=2", "migrate=");
  parse_bad("postgres://h/db?timeout=10", "timeout=");
}

/* What libpq would refuse only when connecting is a malformed URI here. */
static void what_libpq_refuses_is_refused(void **state) {
  (void)state;
  parse_bad("postgres://u@h/app%zz", "percent-encoded");
  parse_bad("postgres://u@[::1/db", "]");
  parse_bad("postgres://h/db?bogus=1", "bogus");
  parse_bad("postgres://h/db?=1", "postgres:");
  parse_bad("postgres://h:abc/db", "port");
  parse_bad("postgres://h:0/db", "port");
  parse_bad("postgres://h:65536/db", "port");
  parse_bad("postgres://h1:5432,h2:x/db", "port");
  parse_bad("postgres://h/db?port=54a", "port");
  parse_bad("postgres://h/db?sslmode=bogus", "sslmode=");
  /* what libpq refuses only when it connects: a malformed URI, not an outage */
  parse_bad("postgres://h/db?connect_timeout=abc", "connect_timeout= takes a whole number");
  parse_bad("postgres://h/db?connect_timeout=", "connect_timeout=");
  parse_bad("postgres://h/db?keepalives_idle=10s", "keepalives_idle=");
  parse_bad("postgres://h/db?tcp_user_timeout=99999999999", "tcp_user_timeout=");
  parse_bad("postgres://h/db?target_session_attrs=primaryy", "target_session_attrs=");
  parse_bad("postgres://h/db?gssencmode=on", "gssencmode=");
  parse_ok("postgres://h/db?connect_timeout=3&keepalives=1&target_session_attrs=read-write",
           "postgres://h/db?connect_timeout=3&keepalives=1&target_session_attrs=read-write", 0, 2,
           64, 10000);
  parse_ok("postgres://h1:5432,h2:5433/db?sslmode=verify-full",
           "postgres://h1:5432,h2:5433/db?sslmode=verify-full&connect_timeout=10", 0, 2, 64,
           10000);
  parse_ok("postgres://h1,h2:5433/db", "postgres://h1,h2:5433/db?connect_timeout=10", 0, 2, 64,
           10000);
}

static void messages_are_one_line(void **state) {
  (void)state;
  char *m = idem_pg_message("postgres", "connection failed: refused\n\tIs the server running?\n");
  assert_string_equal(m, "postgres: connection failed: refused Is the server running?");
  free(m);
}

UNIT_TESTS(cmocka_unit_test(options_are_taken_out),
           cmocka_unit_test(sweep_interval_is_taken_out),
           cmocka_unit_test(bad_options_are_refused),
           cmocka_unit_test(what_libpq_refuses_is_refused),
           cmocka_unit_test(messages_are_one_line))

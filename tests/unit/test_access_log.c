/* test_access_log.c - the access log's line (src/http/access_log.c): every
 * field, nulls, and bytes that must not break the JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

/* The gateway's sources are part of the idem binary, not of libidem: compile
 * the pieces under test into this test. */
#include "http/access_log.c"
#include "http/msg.c"
#include "http/policy.c"

static char *line_of(const gw_access_entry *e) {
  gw_buf b = {0};
  assert_int_equal(gw_access_line(&b, e), 0);
  assert_non_null(b.p);
  char *s = strndup(b.p, b.len);
  gw_buf_free(&b);
  return s;
}

static void test_every_field(void **state) {
  (void)state;
  gw_access_entry e = {.time_ms = 1795833600123, /* 2026-11-28T02:40:00.123Z */
                       .method = "POST",
                       .target = "/v1/pay?x=1",
                       .target_len = 11,
                       .route = 2,
                       .key = "k1",
                       .scope = "ab12",
                       .outcome = "executed",
                       .fence = 7,
                       .status = 201,
                       .upstream_us = 1500,
                       .total_us = 2042};
  char *s = line_of(&e);
  assert_string_equal(s, "{\"time\":\"2026-11-28T02:40:00.123Z\",\"method\":\"POST\","
                         "\"target\":\"/v1/pay?x=1\",\"route\":2,\"key\":\"k1\",\"scope\":\"ab12\","
                         "\"outcome\":\"executed\",\"fence\":7,\"status\":201,"
                         "\"upstream_ms\":1.500,\"total_ms\":2.042}\n");
  free(s);
}

static void test_nulls(void **state) {
  (void)state;
  gw_access_entry e = {.time_ms = 0, .route = -1, .upstream_us = -1, .total_us = 5};
  char *s = line_of(&e);
  assert_string_equal(s, "{\"time\":\"1970-01-01T00:00:00.000Z\",\"method\":null,\"target\":null,"
                         "\"route\":null,\"key\":null,\"scope\":null,\"outcome\":\"none\","
                         "\"fence\":null,\"status\":0,\"upstream_ms\":null,\"total_ms\":0.005}\n");
  free(s);
}

static void test_hostile_bytes_stay_json(void **state) {
  (void)state;
  static const char target[] = "/a\"b\\c\n\x01\xc3\xa9\xff}";
  gw_access_entry e = {.method = "GET", .target = target, .target_len = sizeof target - 1,
                       .key = "k\"}", .outcome = "passthrough", .upstream_us = -1};
  char *s = line_of(&e);
  assert_non_null(strstr(s, "\"target\":\"/a\\\"b\\\\c\\n\\u0001\\u00c3\\u00a9\\u00ff}\""));
  assert_non_null(strstr(s, "\"key\":\"k\\\"}\""));
  for (const char *p = s; *p; p++) /* ASCII only, one line */
    assert_true((unsigned char)*p < 0x80 && (*p != '\n' || p[1] == 0));
  free(s);
}

UNIT_TESTS(cmocka_unit_test(test_every_field),
           cmocka_unit_test(test_nulls),
           cmocka_unit_test(test_hostile_bytes_stay_json))

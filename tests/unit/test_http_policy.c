/* test_http_policy.c - the gateway's pure decisions (src/http/policy.c). */
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
#include "http/config.c"
#include "http/msg.c"
#include "http/policy.c"
#include "http/metrics.c"

static void add_header(gw_headers *h, const char *name, const char *value) {
  assert_int_equal(gw_headers_on_field(h, name, strlen(name)), 0);
  assert_int_equal(gw_headers_on_value(h, value, strlen(value)), 0);
  gw_headers_done(h);
}

static void test_methods(void **state) {
  (void)state;
  gw_config cfg;
  gw_config_init(&cfg);
  assert_true(policy_method_has_semantics(&cfg.policy, "POST"));
  assert_true(policy_method_has_semantics(&cfg.policy, "PATCH"));
  assert_false(policy_method_has_semantics(&cfg.policy, "GET"));
  assert_false(policy_method_has_semantics(&cfg.policy, "PUT"));
  assert_false(policy_method_has_semantics(&cfg.policy, "post")); /* methods are case-sensitive */
  char err[256];
  char *argv[] = {"serve", "--upstream", "http://127.0.0.1:9", "--methods", "put, Delete"};
  assert_int_equal(gw_config_parse(&cfg, 5, argv, err, sizeof err), 0);
  assert_true(policy_method_has_semantics(&cfg.policy, "PUT"));
  assert_true(policy_method_has_semantics(&cfg.policy, "DELETE"));
  assert_false(policy_method_has_semantics(&cfg.policy, "POST"));
  gw_config_free(&cfg);
}

static void test_key(void **state) {
  (void)state;
  char key[IDEM_KEY_MAX + 1];
  const char *why = NULL;
  gw_headers h = {0};
  add_header(&h, "Content-Type", "text/plain");
  assert_int_equal(policy_key(&h, key, &why), POLICY_KEY_NONE);

  add_header(&h, "idempotency-key", "  order-42  ");
  assert_int_equal(policy_key(&h, key, &why), POLICY_KEY_OK);
  assert_string_equal(key, "order-42");
  gw_headers_free(&h);

  add_header(&h, "Idempotency-Key", "\"with space\"");
  assert_int_equal(policy_key(&h, key, &why), POLICY_KEY_OK);
  assert_string_equal(key, "with space");
  gw_headers_free(&h);

  add_header(&h, "Idempotency-Key", "");
  why = NULL;
  assert_int_equal(policy_key(&h, key, &why), POLICY_KEY_BAD);
  assert_non_null(why);
  gw_headers_free(&h);

  char long_key[300];
  memset(long_key, 'a', 256);
  long_key[256] = 0;
  add_header(&h, "Idempotency-Key", long_key);
  assert_int_equal(policy_key(&h, key, &why), POLICY_KEY_BAD);
  gw_headers_free(&h);
  long_key[255] = 0;
  add_header(&h, "Idempotency-Key", long_key);
  assert_int_equal(policy_key(&h, key, &why), POLICY_KEY_OK);
  assert_int_equal(strlen(key), 255);
  gw_headers_free(&h);

  add_header(&h, "Idempotency-Key", "a b"); /* bare token with a space */
  assert_int_equal(policy_key(&h, key, &why), POLICY_KEY_BAD);
  gw_headers_free(&h);

  add_header(&h, "Idempotency-Key", "one");
  add_header(&h, "Idempotency-Key", "two");
  why = NULL;
  assert_int_equal(policy_key(&h, key, &why), POLICY_KEY_BAD);
  assert_non_null(strstr(why, "once"));
  gw_headers_free(&h);
}

static void test_scope(void **state) {
  (void)state;
  gw_config cfg;
  gw_config_init(&cfg);
  char scope[65];
  gw_headers h = {0};
  add_header(&h, "Authorization", "Bearer secret-token");
  assert_int_equal(policy_scope(&cfg, &h, scope), 0);
  assert_string_equal(scope, ""); /* no --scope-header */
  snprintf(cfg.scope_header, sizeof cfg.scope_header, "authorization");
  assert_int_equal(policy_scope(&cfg, &h, scope), 0);
  /* sha256("Bearer secret-token"): the secret never reaches the store */
  assert_string_equal(scope, "86e774bff90b0fe5f8ec00ffd9e579c653705ca16285d09d992ae2bfb58bc308");
  assert_null(strstr(scope, "secret"));
  snprintf(cfg.scope_header, sizeof cfg.scope_header, "X-Tenant");
  assert_int_equal(policy_scope(&cfg, &h, scope), 0);
  assert_string_equal(scope, ""); /* header absent: no scope */
  add_header(&h, "X-Tenant", "victim");
  add_header(&h, "x-tenant", "attacker");
  assert_int_equal(policy_scope(&cfg, &h, scope), IDEM_EINVAL); /* which one? refused */
  gw_headers_free(&h);
}

static void test_status(void **state) {
  (void)state;
  static const int stored[] = {200, 201, 202, 204, 301, 302, 304, 400, 401,
                               403, 404, 405, 410, 412, 413, 415, 422, 499};
  static const int released[] = {100, 101, 199, 408, 409, 425, 429, 500,
                                 502, 503, 504, 599, 0, 600};
  for (size_t i = 0; i < sizeof stored / sizeof stored[0]; i++)
    if (!policy_status_stored(stored[i]))
      fail_msg("%d should be stored", stored[i]);
  for (size_t i = 0; i < sizeof released / sizeof released[0]; i++)
    if (policy_status_stored(released[i]))
      fail_msg("%d should release the key", released[i]);
  /* the default store-statuses (2xx,3xx,4xx) keep the same statuses */
  gw_config cfg;
  gw_config_init(&cfg);
  for (int st = 0; st < 700; st++)
    if (gw_policy_stores(&cfg.policy, st) != policy_status_stored(st))
      fail_msg("store-statuses default differs from the built-in rule at %d", st);
}

static void test_hop_headers(void **state) {
  (void)state;
  static const char *const hop[] = {"Connection", "keep-alive", "TRANSFER-ENCODING",
                                    "TE", "Trailer", "Upgrade", "Proxy-Authorization",
                                    "Proxy-Connection", "Content-Length"};
  for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
    assert_true(policy_hop_header(hop[i], strlen(hop[i])));
  static const char *const end[] = {"Content-Type", "Location", "Set-Cookie",
                                    "X-Request-Id", "Trailers", "Tea"};
  for (size_t i = 0; i < sizeof end / sizeof end[0]; i++)
    assert_false(policy_hop_header(end[i], strlen(end[i])));
  assert_true(policy_request_header_dropped("Idempotency-Fence", 17));
  assert_true(policy_request_header_dropped("expect", 6));
  assert_false(policy_request_header_dropped("Idempotency-Key", 15));
}

static void test_problem(void **state) {
  (void)state;
  gw_buf b = {0};
  assert_int_equal(policy_problem(&b, 409, "request-in-progress", "Request in progress",
                                  "say \"hi\"\n\x01"),
                   0);
  assert_int_equal(gw_buf_append(&b, "", 1), 0);
  assert_string_equal(b.p,
                      "{\"type\":\"urn:idem:problem:request-in-progress\","
                      "\"title\":\"Request in progress\",\"status\":409,"
                      "\"detail\":\"say \\\"hi\\\"\\n\\u0001\"}\n");
  gw_buf_free(&b);
  assert_string_equal(policy_reason(422), "Unprocessable Content");
  assert_string_equal(policy_reason(599), "Unknown");
  /* registered statuses an upstream answers with keep their phrase */
  assert_string_equal(policy_reason(407), "Proxy Authentication Required");
  assert_string_equal(policy_reason(416), "Range Not Satisfiable");
  assert_string_equal(policy_reason(451), "Unavailable For Legal Reasons");
  assert_string_equal(policy_reason(507), "Insufficient Storage");
}

static void test_tokens(void **state) {
  (void)state;
  const char *v = "keep-alive, X-Secret ,close";
  assert_true(gw_has_token(v, strlen(v), "x-secret", 8));
  assert_true(gw_has_token(v, strlen(v), "close", 5));
  assert_false(gw_has_token(v, strlen(v), "X-Sec", 5));
  assert_false(gw_has_token(v, strlen(v), "", 0));
  /* a name of any length is compared, not only short ones */
  char longname[300];
  memset(longname, 'a', sizeof longname);
  char list[320];
  snprintf(list, sizeof list, "close, %.*s", (int)sizeof longname, longname);
  assert_true(gw_has_token(list, strlen(list), longname, sizeof longname));
  assert_false(gw_has_token(list, strlen(list), longname, sizeof longname - 1));
  size_t len = 0;
  int count = 0;
  gw_headers h = {0};
  /* a header handed over in pieces, as http_parser does across reads */
  gw_headers_on_field(&h, "X-Sp", 4);
  gw_headers_on_field(&h, "lit", 3);
  gw_headers_on_value(&h, " a", 2);
  gw_headers_on_value(&h, "b \t", 3);
  gw_headers_on_field(&h, "x-split", 7);
  gw_headers_on_value(&h, "c", 1);
  gw_headers_done(&h);
  const char *got = gw_headers_get(&h, "X-SPLIT", &len, &count);
  assert_int_equal(count, 2);
  assert_int_equal(len, 2);
  assert_memory_equal(got, "ab", 2);
  gw_headers_free(&h);
}

/* Connection in two lines: both name hop-by-hop fields (RFC 9110 5.3, 7.6.1) */
static void test_connection_lines(void **state) {
  (void)state;
  gw_headers h = {0};
  static const char *const lines[][2] = {{"Connection", "keep-alive"}, {"X-A", "1"},
                                         {"connection", "X-A , x-b"}, {"X-B", "2"},
                                         {"X-C", "3"}};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    gw_headers_on_field(&h, lines[i][0], strlen(lines[i][0]));
    gw_headers_on_value(&h, lines[i][1], strlen(lines[i][1]));
  }
  gw_headers_done(&h);
  gw_list conn;
  gw_headers_list(&h, "Connection", &conn);
  assert_int_equal(conn.lines, 2);
  assert_true(gw_headers_list_has(&conn, "x-b", 3));
  assert_true(gw_headers_list_has(&conn, "Keep-Alive", 10));
  assert_false(gw_headers_list_has(&conn, "X-C", 3));
  /* one line: read as it is */
  gw_headers one = {0};
  gw_headers_on_field(&one, "Connection", 10);
  gw_headers_on_value(&one, "close, X-D", 10);
  gw_headers_done(&one);
  gw_headers_list(&one, "Connection", &conn);
  assert_true(gw_headers_list_has(&conn, "x-d", 3));
  assert_false(gw_headers_list_has(&conn, "X-C", 3));
  gw_headers_free(&one);
  gw_buf out = {0};
  assert_int_equal(policy_replayable_headers(&h, &out), 0);
  assert_int_equal(gw_buf_append(&out, "", 1), 0);
  assert_string_equal(out.p, "X-C: 3\r\n");
  gw_buf_free(&out);
  gw_headers_free(&h);
}

static void test_metrics(void **state) {
  (void)state;
  gw_metrics_outcome(GW_OUT_REPLAYED);
  gw_metrics_outcome(GW_OUT_REPLAYED);
  gw_metrics_observe(GW_HIST_CLAIM, 700);      /* 0.7 ms */
  gw_metrics_observe(GW_HIST_UPSTREAM, 20000000); /* 20 s */
  gw_metrics_leases(2);
  gw_metrics_leases(-1);
  gw_buf b = {0};
  assert_int_equal(gw_metrics_render(&b), 0);
  assert_int_equal(gw_buf_append(&b, "", 1), 0);
  const char *t = b.p;
  assert_non_null(strstr(t, "# TYPE idem_requests_total counter\n"));
  assert_non_null(strstr(t, "idem_requests_total{outcome=\"replayed\"} 2\n"));
  assert_non_null(strstr(t, "idem_requests_total{outcome=\"executed\"} 0\n"));
  /* cumulative buckets: 0.7 ms is not <= 0.5 ms, is <= 1 ms */
  assert_non_null(strstr(t, "idem_store_latency_seconds_bucket{op=\"claim\",le=\"0.0005\"} 0\n"));
  assert_non_null(strstr(t, "idem_store_latency_seconds_bucket{op=\"claim\",le=\"0.001\"} 1\n"));
  assert_non_null(strstr(t, "idem_store_latency_seconds_bucket{op=\"claim\",le=\"+Inf\"} 1\n"));
  assert_non_null(strstr(t, "idem_store_latency_seconds_count{op=\"claim\"} 1\n"));
  assert_non_null(strstr(t, "idem_upstream_latency_seconds_bucket{le=\"10\"} 0\n"));
  assert_non_null(strstr(t, "idem_upstream_latency_seconds_bucket{le=\"30\"} 1\n"));
  assert_non_null(strstr(t, "idem_upstream_latency_seconds_sum 20.000000\n"));
  assert_non_null(strstr(t, "idem_inflight_leases 1\n"));
  gw_buf_free(&b);
}

UNIT_TESTS(cmocka_unit_test(test_methods),
           cmocka_unit_test(test_key),
           cmocka_unit_test(test_scope),
           cmocka_unit_test(test_status),
           cmocka_unit_test(test_hop_headers),
           cmocka_unit_test(test_problem),
           cmocka_unit_test(test_tokens),
           cmocka_unit_test(test_connection_lines),
           cmocka_unit_test(test_metrics))

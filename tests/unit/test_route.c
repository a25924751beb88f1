/* test_route.c - route tables and per-route policy (src/http/route.c and
 * the route-aware decisions of src/http/policy.c): path globs, first match
 * wins, the route settings' parsers, stored statuses, kept headers, keys
 * from JSON pointers and query parameters, fingerprints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

/* The gateway's pieces are part of the idem binary, not of libidem:
 * route.c and config_file.c are linked in (tests/cmake/http.cmake). */
#include "http/msg.c"
#include "http/policy.c"

static void test_globs(void **state) {
  (void)state;
  static const struct {
    const char *glob, *path;
    int match;
  } cases[] = {
      {"/v1/orders", "/v1/orders", 1},
      {"/v1/orders", "/v1/orders/", 0},
      {"/v1/orders", "/v1/order", 0},
      {"/v1/payments/*", "/v1/payments/p1", 1},
      {"/v1/payments/*", "/v1/payments/", 1}, /* * may be empty */
      {"/v1/payments/*", "/v1/payments", 0},
      {"/v1/payments/*", "/v1/payments/p1/refunds", 0}, /* * stays in its segment */
      {"/v1/payments/**", "/v1/payments/p1/refunds", 1},
      {"/v1/payments/**", "/v1/payments/", 1},
      {"/v1/*/refunds", "/v1/p1/refunds", 1},
      {"/v1/*/refunds", "/v1/p1/p2/refunds", 0},
      {"/v1/**/refunds", "/v1/p1/p2/refunds", 1},
      {"/v1/**/refunds", "/v1/refunds", 0},
      {"/v1/**/x/*", "/v1/a/x/b/x/c", 1}, /* ** takes the first x/ */
      {"/v1/**/x/*", "/v1/a/x/b/c", 0},
      {"/v?/orders", "/v2/orders", 1},
      {"/v?/orders", "/v/orders", 0},
      {"/a?", "/a/", 0}, /* ? is not / */
      {"/files/*.json", "/files/a.json", 1},
      {"/files/*.json", "/files/a/b.json", 0},
      {"/files/*.json", "/files/a.json.bak", 0},
      {"/*/*", "/a/b", 1},
      {"/*/*", "/a", 0},
      {"**", "/anything/at/all", 1},
      {"*", "/a", 0},
      {"/a/***", "/a/b/c", 1},
      {"/a*b*c", "/aXbYc", 1},
      {"/a*b*c", "/aXbY/c", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (gw_glob_match(cases[i].glob, cases[i].path, strlen(cases[i].path)) != cases[i].match)
      fail_msg("glob %s on %s: expected %d", cases[i].glob, cases[i].path, cases[i].match);
}

/* A policy with every default (the route table's rows). */
static gw_policy defaults(void) {
  gw_policy p;
  char err[256];
  memset(&p, 0, sizeof p);
  assert_int_equal(settings_defaults(&gw_policy_table, &p, err, sizeof err), 0);
  return p;
}

static void set(gw_policy *p, const char *name, const char *v) {
  char err[256];
  if (settings_set(&gw_policy_table, p, name, v, err, sizeof err))
    fail_msg("%s %s: %s", name, v, err);
}

static void refused(const char *name, const char *v, const char *words) {
  gw_policy p = defaults();
  char err[256] = "";
  if (!settings_set(&gw_policy_table, &p, name, v, err, sizeof err))
    fail_msg("%s '%s' accepted", name, v);
  if (!strstr(err, words))
    fail_msg("%s '%s': '%s' lacks '%s'", name, v, err, words);
}

static void test_first_match_wins(void **state) {
  (void)state;
  gw_routes *t = gw_routes_new(3);
  t->defaults.policy = defaults();
  snprintf(t->routes[0].path, sizeof t->routes[0].path, "/v1/payments/*");
  snprintf(t->routes[0].methods[0], 16, "POST");
  t->routes[0].nmethods = 1;
  snprintf(t->routes[1].path, sizeof t->routes[1].path, "/v1/**");
  /* routes[2]: no path, no methods: everything left */
  for (int i = 0; i < 3; i++)
    t->routes[i].index = i + 1;
  const char *target = "/v1/payments/p1?x=/v1/payments/p1/deep";
  assert_int_equal(gw_routes_match(t, "POST", target, strlen(target))->index, 1);
  assert_int_equal(gw_routes_match(t, "PUT", target, strlen(target))->index, 2);
  assert_int_equal(gw_routes_match(t, "POST", "/v1/payments/p1/r", 17)->index, 2);
  assert_int_equal(gw_routes_match(t, "POST", "/other", 6)->index, 3);
  /* the target's length counts, not a NUL */
  assert_int_equal(gw_routes_match(t, "POST", "/v1/payments/p1XYZ", 15)->index, 1);
  /* matched as the upstream reads the path: %XX of unreserved characters
   * decoded, dot-segments removed, a fragment cut */
  static const struct {
    const char *target;
    int route;
  } normal[] = {
      {"/v1/%70ayments/p1", 1},
      {"/v1/%70%41yments/p1", 2}, /* %41 is 'A': another path */
      {"/x/../v1/payments/p1", 1},
      {"/v1/./payments/p1", 1},
      {"/v1/payments/p1/..", 1}, /* "/v1/payments/": "*" matches an empty run */
      {"/v1/payments/refunds/../p1", 1},
      {"/../../v1/payments/p1", 1},
      {"/v1/%2E%2E/other", 3}, /* %2E is '.': "/other" */
      {"/v1/payments%2Fp1", 2}, /* an encoded '/' stays: one segment */
      {"/v1/payments%2fp1", 2},
      {"/v1/payments/p1#frag", 1},
      {"/v1/payments/p1/#/x", 1}, /* a trailing slash: also "/v1/payments/p1" */
      {"/v1/payments/p1/", 1},
      {"/v1/payments/p1//", 1},
      {"/v1/payments/p1/r/", 2},
      {"/x\\..\\v1/payments/p1", 1}, /* a backslash is a slash */
      {"/v1\\payments\\p1", 1},
      {"/v1/payments/p1%", 1},
      {"/v1/payments/p1%4", 1},
      {"/v1/payments/%zz", 1},
      {"/v1//payments/p1", 1},
      {"//v1///payments/p1", 1},
      {"/v1/payments;jsessionid=x/p1", 1},
      {"/v1;a=b/payments/p1;c", 1},
      {"/v1/payments/p1/;/..", 1}, /* "/v1/payments/p1/" then ".." */
  };
  for (size_t i = 0; i < sizeof normal / sizeof normal[0]; i++) {
    const char *n = normal[i].target;
    if (gw_routes_match(t, "POST", n, strlen(n))->index != normal[i].route)
      fail_msg("%s: route %d, not %d", n, gw_routes_match(t, "POST", n, strlen(n))->index,
               normal[i].route);
  }
  char m[64];
  gw_route_match_text(&t->routes[0], m, sizeof m);
  assert_string_equal(m, "POST /v1/payments/*");
  gw_route_match_text(&t->routes[2], m, sizeof m);
  assert_string_equal(m, "* *");
  gw_routes *none = gw_routes_new(0);
  assert_ptr_equal(gw_routes_match(none, "POST", "/a", 2), &none->defaults);
  gw_routes_release(none);
  /* held twice: freed on the last release (ASan tells) */
  gw_routes_hold(t);
  gw_routes_release(t);
  gw_routes_release(t);
}

/* The hex digits of a %XX are case-insensitive (RFC 3986 6.2.2.1), to an
 * upstream as to the route match: a client's "%2f" cannot slip past a
 * route written with "%2F", nor a route written with "%2f" miss "%2F". */
static void test_escapes_match_in_either_case(void **state) {
  (void)state;
  gw_routes *t = gw_routes_new(2);
  t->defaults.policy = defaults();
  snprintf(t->routes[0].path, sizeof t->routes[0].path, "/files/a%%2Fb/*");
  snprintf(t->routes[1].path, sizeof t->routes[1].path, "/low/a%%2fb%%zz%%4");
  gw_glob_upper_escapes(t->routes[0].path);
  gw_glob_upper_escapes(t->routes[1].path);
  assert_string_equal(t->routes[0].path, "/files/a%2Fb/*");
  assert_string_equal(t->routes[1].path, "/low/a%2Fb%zz%4"); /* not an escape: as it is */
  for (int i = 0; i < 2; i++)
    t->routes[i].index = i + 1;
  static const struct {
    const char *target;
    int route;
  } cases[] = {
      {"/files/a%2Fb/x", 1}, {"/files/a%2fb/x", 1}, {"/files/a%2f%62/x", 1}, /* %62 is 'b' */
      {"/files/a/b/x", 0},   {"/low/a%2Fb%zz%4", 2}, {"/low/a%2fb%zz%4", 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *n = cases[i].target;
    const gw_route *r = gw_routes_match(t, "POST", n, strlen(n));
    int got = r == &t->defaults ? 0 : r->index;
    if (got != cases[i].route)
      fail_msg("%s: route %d, not %d", n, got, cases[i].route);
  }
  gw_routes_release(t);
}

/* A glob that reading a request's path would change matches no request:
 * said, with the form that would. One it leaves alone is reachable. */
static void test_globs_no_request_can_match(void **state) {
  (void)state;
  static const struct {
    const char *glob, *normal; /* normal NULL: reachable */
  } cases[] = {
      {"/v1//payments/*", "/v1/payments/*"}, {"/v1/%70ayments", "/v1/payments"},
      {"/x/../v1/*", "/v1/*"},               {"/a/./b", "/a/b"},
      {"/a;v=1/b", "/a/b"},                  {"/a\\b", "/a/b"},
      {"/v1/a%2Fb/*", NULL},                 {"/v1/**", NULL},
      {"/files/.well-known/*", NULL},        {"/a/..b", NULL},
      {"/v1/orders/", NULL},                 {"*", NULL},
      {"/a/%zz", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char out[256] = "";
    int rc = gw_glob_reachable(cases[i].glob, out, sizeof out);
    if (!cases[i].normal && rc)
      fail_msg("%s: said unreachable (as %s)", cases[i].glob, out);
    if (cases[i].normal && (!rc || strcmp(out, cases[i].normal)))
      fail_msg("%s: rc %d, '%s', not '%s'", cases[i].glob, rc, out, cases[i].normal);
  }
}

static void test_current_table(void **state) {
  (void)state;
  unsigned g = gw_routes_generation();
  assert_null(gw_routes_current());
  gw_routes *a = gw_routes_new(0), *b = gw_routes_new(1);
  gw_routes_publish(a);
  assert_int_equal(gw_routes_generation(), g + 1);
  gw_routes *held = gw_routes_current();
  assert_ptr_equal(held, a);
  gw_routes_publish(b); /* a lives on while held */
  assert_int_equal(held->n, 0);
  gw_routes_release(held);
  held = gw_routes_current();
  assert_ptr_equal(held, b);
  gw_routes_release(held);
  gw_routes_publish(NULL);
  assert_null(gw_routes_current());
}

static void test_values(void **state) {
  (void)state;
  gw_policy p = defaults();
  char v[256];
  static const char *const names[] = {"methods", "ttl", "lock-ttl", "require-key", "wait", "key",
                                      "fingerprint", "store-statuses", "replay-headers", "mode"};
  static const char *const expect[] = {"POST,PATCH", "24h", "30s", "false", "0",
                                       "header:Idempotency-Key", "raw", "2xx,3xx,4xx", "all",
                                       "enforce"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    gw_policy_value(&p, names[i], v, sizeof v);
    assert_string_equal(v, expect[i]);
  }
  set(&p, "methods", " post , Put,POST");
  gw_policy_value(&p, "methods", v, sizeof v);
  assert_string_equal(v, "POST,PUT");
  set(&p, "key", "json:/order/id");
  assert_int_equal(p.key_kind, GW_KEY_JSON);
  set(&p, "key", "query:request_id");
  assert_int_equal(p.key_kind, GW_KEY_QUERY);
  set(&p, "fingerprint", "json:/amount, /currency");
  gw_policy_value(&p, "fingerprint", v, sizeof v);
  assert_string_equal(v, "json:/amount,/currency");
  set(&p, "store-statuses", "2XX,500");
  gw_policy_value(&p, "store-statuses", v, sizeof v);
  assert_string_equal(v, "2xx,500");
  set(&p, "replay-headers", "drop:Set-Cookie,X-Internal-*");
  gw_policy_value(&p, "replay-headers", v, sizeof v);
  assert_string_equal(v, "drop:Set-Cookie,X-Internal-*");
  set(&p, "mode", "shadow");
  set(&p, "wait", "0s");
  assert_int_equal(p.wait_ms, 0);
  set(&p, "require-key", "true");
  assert_true(p.require_key);
  /* the largest unit, but one day reads as the default is written: 24h */
  static const char *const ttls[][2] = {{"1d", "24h"}, {"48h", "2d"}, {"7d", "7d"},
                                        {"90m", "90m"}, {"1500ms", "1500ms"}};
  for (size_t i = 0; i < sizeof ttls / sizeof ttls[0]; i++) {
    set(&p, "ttl", ttls[i][0]);
    gw_policy_value(&p, "ttl", v, sizeof v);
    assert_string_equal(v, ttls[i][1]);
  }
}

static void test_refusals(void **state) {
  (void)state;
  refused("methods", "", "not a method list");
  refused("methods", "PO ST", "not a method list");
  refused("key", "header:", "not a key source");
  refused("key", "header:Bad Name", "not a key source");
  refused("key", "json:order_id", "not a key source");
  refused("key", "json:/a~2", "not a key source");
  refused("key", "query:a&b", "not a key source");
  refused("key", "cookie:x", "header:NAME, json:/POINTER");
  refused("fingerprint", "sha256", "raw, json");
  refused("fingerprint", "json:", "not a fingerprint");
  refused("fingerprint", "json:/a,,/b", "not a fingerprint");
  refused("fingerprint", "json:/a,/a", "names /a twice");
  refused("store-statuses", "", "not a status list");
  refused("store-statuses", "1xx", "not a status list");
  refused("store-statuses", "600", "not a status list");
  refused("store-statuses", "2xx,409", "409 is never stored");
  refused("store-statuses", "429", "never stored");
  refused("store-statuses", "20x", "not a status list");
  refused("replay-headers", "drop", "not a replay rule");
  refused("replay-headers", "keep:X", "not a replay rule");
  refused("replay-headers", "drop:X*Y", "not a replay rule");
  refused("mode", "Enforce", "enforce, shadow or off");
  refused("ttl", "0", "not a duration");
  refused("require-key", "yes", "not true or false");
}

static void test_stored_statuses(void **state) {
  (void)state;
  gw_policy p = defaults();
  set(&p, "store-statuses", "2xx,500");
  assert_true(gw_policy_stores(&p, 200));
  assert_true(gw_policy_stores(&p, 299));
  assert_true(gw_policy_stores(&p, 500));
  assert_false(gw_policy_stores(&p, 501));
  assert_false(gw_policy_stores(&p, 302));
  assert_false(gw_policy_stores(&p, 404));
  set(&p, "store-statuses", "4xx,5xx");
  for (int st = 400; st < 600; st++)
    assert_int_equal(gw_policy_stores(&p, st), st != 408 && st != 409 && st != 425 && st != 429);
  assert_false(gw_policy_stores(&p, 600));
  assert_false(gw_policy_stores(&p, 199));
  assert_false(gw_policy_stores(&p, -1));
}

static void test_kept_headers(void **state) {
  (void)state;
  gw_policy p = defaults();
  set(&p, "replay-headers", "drop:set-cookie,X-Internal-*");
  gw_buf in = {0}, out = {0};
  gw_buf_puts(&in, "Content-Type: text/plain\r\nSet-Cookie: a=1\r\nX-Internal-Id: 7\r\n"
                   "Set-Cookie2: b\r\nX-Internal: whole\r\nSET-COOKIE: c=3\r\n");
  assert_int_equal(policy_kept_headers(&p, &in, &out), 0);
  assert_int_equal(strncmp(out.p, "Content-Type: text/plain\r\nSet-Cookie2: b\r\nX-Internal: whole\r\n",
                           out.len), 0);
  assert_int_equal(out.len, strlen("Content-Type: text/plain\r\nSet-Cookie2: b\r\nX-Internal: whole\r\n"));
  gw_buf_free(&in);
  gw_buf_free(&out);
}

/* A request as the parser leaves it. */
static gw_request *request(const char *method, const char *target, const char *body) {
  gw_request *r = calloc(1, sizeof *r);
  snprintf(r->method, sizeof r->method, "%s", method);
  gw_buf_append(&r->target, target, strlen(target) + 1); /* NUL-terminated, as parsed */
  r->target.len--;
  gw_buf_append(&r->body, body, strlen(body));
  return r;
}

static void free_request(gw_request *r) {
  gw_buf_free(&r->target);
  gw_buf_free(&r->body);
  gw_headers_free(&r->headers);
  free(r);
}

static policy_key_result key_of(const char *source, const char *target, const char *body,
                                char *out) {
  gw_policy p = defaults();
  set(&p, "key", source);
  gw_request *r = request("POST", target, body);
  char why[300];
  policy_key_result k = policy_route_key(&p, r, out, why, sizeof why);
  free_request(r);
  return k;
}

static void test_keys(void **state) {
  (void)state;
  char key[IDEM_KEY_MAX + 1];
  assert_int_equal(key_of("json:/order_id", "/o", "{\"order_id\":\"o-7\"}", key), POLICY_KEY_OK);
  assert_string_equal(key, "o-7");
  assert_int_equal(key_of("json:/order/id", "/o", "{\"order\":{\"id\":12}}", key), POLICY_KEY_OK);
  assert_string_equal(key, "12");
  assert_int_equal(key_of("json:/order_id", "/o", "{\"x\":1}", key), POLICY_KEY_NONE);
  /* not JSON, also to a parser stricter than the client's: refused */
  assert_int_equal(key_of("json:/order_id", "/o", "order_id=1", key), POLICY_KEY_NOT_JSON);
  assert_int_equal(key_of("json:/order_id", "/o", "{\"order_id\":1,\"order_id\":1}", key),
                   POLICY_KEY_NOT_JSON);
  assert_int_equal(key_of("json:/order_id", "/o", "", key), POLICY_KEY_NONE);
  assert_int_equal(key_of("json:/order_id", "/o", "{\"order_id\":null}", key), POLICY_KEY_BAD);
  assert_int_equal(key_of("json:/order_id", "/o", "{\"order_id\":\"\"}", key), POLICY_KEY_BAD);
  assert_int_equal(key_of("json:/order_id", "/o", "{\"order_id\":\"\\u00e9\"}", key),
                   POLICY_KEY_BAD);
  assert_int_equal(key_of("query:rid", "/s?a=1&rid=x%2Fy+z", "", key), POLICY_KEY_OK);
  assert_string_equal(key, "x/y z");
  assert_int_equal(key_of("query:rid", "/s?ridx=1&xrid=2", "", key), POLICY_KEY_NONE);
  assert_int_equal(key_of("query:rid", "/s?rid=1&rid=1", "", key), POLICY_KEY_BAD);
  assert_int_equal(key_of("query:rid", "/s?rid=", "", key), POLICY_KEY_BAD);
  assert_int_equal(key_of("query:rid", "/s?rid", "", key), POLICY_KEY_BAD);
  assert_int_equal(key_of("query:rid", "/s", "", key), POLICY_KEY_NONE);
}

static void fingerprint(const char *fp, const char *body, uint8_t out[IDEM_FINGERPRINT_LEN],
                        int expect_rc) {
  gw_policy p = defaults();
  set(&p, "fingerprint", fp);
  gw_request *r = request("POST", "/pay", body);
  assert_int_equal(policy_fingerprint(&p, r, out), expect_rc);
  free_request(r);
}

static void test_fingerprints(void **state) {
  (void)state;
  uint8_t a[32], b[32], c[32];
  fingerprint("raw", "{\"a\":1,\"b\":2}", a, 0);
  fingerprint("raw", "{\"b\":2,\"a\":1}", b, 0);
  assert_memory_not_equal(a, b, 32);
  fingerprint("json", "{\"a\":1,\"b\":2}", a, 0);
  fingerprint("json", " {\"b\": 2, \"a\": 1} ", b, 0);
  assert_memory_equal(a, b, 32);
  fingerprint("json", "{\"a\":1,\"b\":3}", c, 0);
  assert_memory_not_equal(a, c, 32);
  fingerprint("json", "not json", c, IDEM_EJSON);
  fingerprint("json", "", c, 0); /* no body: nothing to canonicalise */
  fingerprint("json:/amount,/currency", "{\"amount\":5,\"currency\":\"EUR\",\"note\":1}", a, 0);
  fingerprint("json:/amount,/currency", "{\"note\":2,\"currency\":\"E\\u0055R\",\"amount\":5}", b,
              0);
  assert_memory_equal(a, b, 32); /* other members, and escapes, do not count */
  fingerprint("json:/amount,/currency", "{\"amount\":5}", c, 0);
  assert_memory_not_equal(a, c, 32);
  fingerprint("json:/amount,/currency", "{\"amount\":5,\"currency\":null}", b, 0);
  assert_memory_not_equal(b, c, 32); /* null is not absent */
  fingerprint("json:/amount", "{\"amount\":{\"v\":1,\"u\":2}}", a, 0);
  fingerprint("json:/amount", "{\"amount\":{\"u\":2,\"v\":1}}", b, 0);
  assert_memory_equal(a, b, 32);
  fingerprint("json:/amount", "[1", c, IDEM_EJSON);
}

UNIT_TESTS(cmocka_unit_test(test_globs),
           cmocka_unit_test(test_first_match_wins),
           cmocka_unit_test(test_escapes_match_in_either_case),
           cmocka_unit_test(test_globs_no_request_can_match),
           cmocka_unit_test(test_current_table),
           cmocka_unit_test(test_values),
           cmocka_unit_test(test_refusals),
           cmocka_unit_test(test_stored_statuses),
           cmocka_unit_test(test_kept_headers),
           cmocka_unit_test(test_keys),
           cmocka_unit_test(test_fingerprints))

/* test_redis_uri.c - redis:// and redis+cluster:// URIs, and the names
 * records get in Redis: every part of the URI, every malformed one refused
 * with a sentence, record names that split back into the same (scope, key),
 * and the Cluster slot of a name. */
#include <stdio.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "idem/idem.h"
#include "store/redis.h"

static idem_redis_uri parse_ok(const char *uri) {
  idem_redis_uri u;
  char *why = NULL;
  int err = idem_redis_uri_parse(uri, &u, &why);
  if (err)
    print_error("%s: %s\n", uri, why ? why : "(no reason)");
  assert_int_equal(err, 0);
  assert_null(why);
  return u;
}

static void parse_bad(const char *uri) {
  idem_redis_uri u;
  char *why = NULL;
  int err = idem_redis_uri_parse(uri, &u, &why);
  if (err != IDEM_EURI)
    print_error("accepted: %s\n", uri);
  assert_int_equal(err, IDEM_EURI);
  assert_non_null(why); /* every refusal says why */
  assert_true(strlen(why) > 5);
  free(why);
}

/* uri gives this host, port and database. */
static void expect_where(const char *uri, const char *host, int port, int db) {
  idem_redis_uri u = parse_ok(uri);
  assert_string_equal(u.host, host);
  assert_int_equal(u.port, port);
  assert_int_equal(u.db, db);
  idem_redis_uri_clear(&u);
}

/* uri gives this user and password (NULL: none), at host h. */
static void expect_auth(const char *uri, const char *user, const char *password) {
  idem_redis_uri u = parse_ok(uri);
  if (user)
    assert_string_equal(u.user, user);
  else
    assert_null(u.user);
  if (password)
    assert_string_equal(u.password, password);
  else
    assert_null(u.password);
  assert_string_equal(u.host, "h");
  idem_redis_uri_clear(&u);
}

static void host_and_port(void **state) {
  (void)state;
  idem_redis_uri u = parse_ok("redis://127.0.0.1:6380");
  assert_string_equal(u.host, "127.0.0.1");
  assert_int_equal(u.port, 6380);
  assert_int_equal(u.db, 0);
  assert_null(u.user);
  assert_null(u.password);
  assert_string_equal(u.prefix, "idem");
  assert_int_equal(u.timeout_ms, IDEM_REDIS_COMMAND_TIMEOUT_MS);
  assert_int_equal(u.connect_timeout_ms, IDEM_REDIS_CONNECT_TIMEOUT_MS);
  idem_redis_uri_clear(&u);

  expect_where("redis://cache.internal", "cache.internal", 6379, 0);
  expect_where("redis://[::1]:7000/3", "::1", 7000, 3);
  expect_where("redis://h/", "h", 6379, 0);
}

static void user_and_password(void **state) {
  (void)state;
  expect_auth("redis://app:s3cret@h:1/2", "app", "s3cret");
  expect_where("redis://app:s3cret@h:1/2", "h", 1, 2);
  expect_auth("redis://:only-pass@h", NULL, "only-pass"); /* AUTH with one argument */
  expect_auth("redis://bare@h", NULL, "bare"); /* as redis-cli: a bare word is the password */
  expect_auth("redis://us%40er:p%3Aa%2Fss%20word@h", "us@er", "p:a/ss word"); /* decoded */
  expect_auth("redis://u:p@ss@h", "u", "p@ss"); /* the last '@' ends the user info */
  expect_auth("redis://:@h", NULL, NULL); /* an empty password is none */
}

static void options(void **state) {
  (void)state;
  idem_redis_uri u = parse_ok("redis://h:1/0?timeout=250ms&connect_timeout=3s&prefix=shop");
  assert_int_equal(u.timeout_ms, 250);
  assert_int_equal(u.connect_timeout_ms, 3000);
  assert_string_equal(u.prefix, "shop");
  idem_redis_uri_clear(&u);

  u = parse_ok("redis://h?timeout=1m&&");
  assert_int_equal(u.timeout_ms, 60000);
  assert_int_equal(u.wait_replicas, 0); /* the primary's word is enough */
  assert_int_equal(u.wait_timeout_ms, IDEM_REDIS_WAIT_TIMEOUT_MS);
  idem_redis_uri_clear(&u);

  u = parse_ok("redis://h?wait_replicas=2&wait_timeout=250ms");
  assert_int_equal(u.wait_replicas, 2);
  assert_int_equal(u.wait_timeout_ms, 250);
  idem_redis_uri_clear(&u);
}

static void malformed_uris_are_refused(void **state) {
  (void)state;
  parse_bad("memory:");
  parse_bad("redis:/h");
  parse_bad("rediss://h:6379");   /* TLS: said so, not silently plain */
  parse_bad("redis://");
  parse_bad("redis://:6379");
  parse_bad("redis://h:");
  parse_bad("redis://h:0");
  parse_bad("redis://h:65536");
  parse_bad("redis://h:12ab");
  parse_bad("redis://h:1/x");
  parse_bad("redis://h:1/-1");
  parse_bad("redis://h:1/1/2");
  parse_bad("redis://[::1");
  parse_bad("redis://[]:1");
  parse_bad("redis://[::1]x");
  parse_bad("redis://u:p%zz@h");
  parse_bad("redis://u:p%4@h");
  parse_bad("redis://u:p%00@h");
  parse_bad("redis://h?timeout=fast");
  parse_bad("redis://h?timeout=1s&timeout=2s"); /* which one? refused */
  parse_bad("redis://h?wait_replicas=one");
  parse_bad("redis://h?wait_replicas=-1");
  parse_bad("redis://h?wait_replicas=101");
  parse_bad("redis://h?wait_replicas=1&wait_timeout=5s"); /* not under timeout (5s) */
  parse_bad("redis://h?wait_replicas=1&wait_timeout=soon");
  parse_bad("redis://h?timeout=0s");
  parse_bad("redis://h?timeout");
  parse_bad("redis://h?colour=red");
  parse_bad("redis://h?prefix=");
  parse_bad("redis://h?prefix=a{b}");

  idem_redis_uri u;
  assert_int_equal(idem_redis_uri_parse("redis://h:0", &u, NULL), IDEM_EURI);
  assert_int_equal(idem_redis_uri_parse(NULL, &u, NULL), IDEM_EURI);
}

static void cluster_seeds_and_options(void **state) {
  (void)state;
  idem_redis_uri u;
  char *why = NULL;
  assert_int_equal(idem_redis_cluster_uri_parse(
                       "redis+cluster://app:pw@10.0.0.1:7000,[::1]:7001,node-c?wait_replicas=1&prefix=p",
                       &u, &why), 0);
  assert_null(why);
  assert_int_equal(u.nseeds, 3);
  assert_string_equal(u.seeds[0].host, "10.0.0.1");
  assert_int_equal(u.seeds[0].port, 7000);
  assert_string_equal(u.seeds[1].host, "::1");
  assert_int_equal(u.seeds[1].port, 7001);
  assert_string_equal(u.seeds[2].host, "node-c");
  assert_int_equal(u.seeds[2].port, IDEM_REDIS_DEFAULT_PORT);
  assert_string_equal(u.host, "10.0.0.1"); /* the first seed's */
  assert_string_equal(u.user, "app");
  assert_string_equal(u.password, "pw");
  assert_int_equal(u.wait_replicas, 1);

  /* a node's URI: the same credentials and options, no seeds */
  idem_redis_uri node;
  assert_int_equal(idem_redis_uri_for_node(&u, "10.0.0.9", 7009, &node), 0);
  assert_string_equal(node.host, "10.0.0.9");
  assert_int_equal(node.port, 7009);
  assert_string_equal(node.password, "pw");
  assert_string_equal(node.prefix, "p");
  assert_int_equal(node.wait_replicas, 1);
  assert_int_equal(node.nseeds, 0);
  idem_redis_uri_clear(&node);
  idem_redis_uri_clear(&u);

  assert_int_equal(idem_redis_cluster_uri_parse("redis+cluster://h:1/0", &u, NULL), 0);
  assert_int_equal(u.nseeds, 1);
  idem_redis_uri_clear(&u);

  const char *bad[] = {
      "redis://h:1",                /* the other scheme */
      "redis+cluster://",           /* no seed */
      "redis+cluster://h:1,",       /* an empty seed */
      "redis+cluster://h:1,,h:2",
      "redis+cluster://h:1,h:0",    /* a bad port in any seed */
      "redis+cluster://h:1/3",      /* a Cluster has database 0 only */
      "redis+cluster://h:1?colour=red",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    why = NULL;
    if (idem_redis_cluster_uri_parse(bad[i], &u, &why) != IDEM_EURI)
      print_error("accepted: %s\n", bad[i]);
    assert_non_null(why);
    free(why);
  }
  /* and redis:// does not take several hosts */
  parse_bad("redis://h:1,h:2");
}

static unsigned slot_of(const char *name) { return idem_redis_slot(name, strlen(name)); }

static void cluster_slots_follow_the_hash_tag(void **state) {
  (void)state;
  /* the values Redis gives (CLUSTER KEYSLOT) */
  assert_int_equal(slot_of("foo"), 12182);
  assert_int_equal(slot_of("123456789"), 12739); /* CRC16-XMODEM's check value 0x31C3 */
  assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
  assert_int_equal(slot_of("foo{}{bar}"), slot_of("foo{}{bar}")); /* empty tag: the whole name */
  assert_int_not_equal(slot_of("foo{}{bar}"), slot_of("bar"));
  assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
  assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
  /* a record's name: the whole of (scope, key) is the tag */
  size_t len;
  char *name = idem_redis_key("idem", "s", "order-7", &len);
  assert_int_equal(idem_redis_slot(name, len), slot_of("1:s:order-7"));
  free(name);
  for (int i = 0; i < 1000; i++) {
    char k[16];
    snprintf(k, sizeof k, "k%d", i);
    assert_true(slot_of(k) < IDEM_REDIS_SLOTS);
  }
}

static void cluster_redirections_parse(void **state) {
  (void)state;
  unsigned slot;
  char host[64];
  int port;
  assert_int_equal(idem_redis_redirect_parse("MOVED 3999 127.0.0.1:6381", &slot, host, sizeof host, &port), 0);
  assert_int_equal(slot, 3999);
  assert_string_equal(host, "127.0.0.1");
  assert_int_equal(port, 6381);
  assert_int_equal(idem_redis_redirect_parse("ASK 0 ::1:7000", &slot, host, sizeof host, &port), 0);
  assert_string_equal(host, "::1"); /* an IPv6 address: the port after the last ':' */
  assert_int_equal(idem_redis_redirect_parse("MOVED 16383 :7001", &slot, host, sizeof host, &port), 0);
  assert_string_equal(host, ""); /* the answering node's own */
  assert_int_equal(slot, 16383);
  const char *bad[] = {"MOVED", "MOVED 16384 h:1", "MOVED -1 h:1", "MOVED 1 h", "MOVED 1 h:0",
                       "MOVED 1 h:65536", "MOVED 1 h:1x", "ASK 1", "MOVEDX 1 h:1",
                       "ERR 1 h:1", "MOVED x h:1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (idem_redis_redirect_parse(bad[i], &slot, host, sizeof host, &port) == 0)
      fail_msg("accepted: %s", bad[i]);
  char small[4]; /* a host longer than the buffer is refused, not cut */
  assert_int_equal(idem_redis_redirect_parse("MOVED 1 abcdef:1", &slot, small, sizeof small, &port), -1);
}

static void split_back(const char *scope, const char *key) {
  size_t len;
  char *name = idem_redis_key("idem", scope, key, &len);
  assert_non_null(name);
  assert_int_equal(strlen(name), len);
  /* the whole record name is the Cluster hash tag */
  assert_memory_equal(name, "idem:{", 6);
  assert_int_equal(name[len - 1], '}');
  const char *s, *k;
  assert_int_equal(idem_redis_key_split("idem", name, len, &s, &k), 0);
  assert_string_equal(s, scope ? scope : "");
  assert_string_equal(k, key);
  free(name);
}

static void record_names_round_trip(void **state) {
  (void)state;
  split_back("", "k");
  split_back(NULL, "order-1");
  split_back("tenant", "a key with spaces");
  split_back("t:1", "x:y}{z}"); /* separators and braces inside are fine */
  split_back("12:ab", "3:c");
  char scope[256], key[256];
  memset(scope, 's', 255);
  scope[255] = '\0';
  memset(key, 'k', 255);
  key[255] = '\0';
  split_back(scope, key);

  size_t len;
  char *name = idem_redis_key("idem", "ab", "c", &len);
  assert_string_equal(name, "idem:{2:ab:c}");
  free(name);
  /* a scope that looks like the start of another cannot collide */
  char *a = idem_redis_key("idem", "a:1", "b", &len);
  char *b = idem_redis_key("idem", "a", "1:b", &len);
  assert_string_not_equal(a, b);
  free(a);
  free(b);
}

static void foreign_names_are_not_split(void **state) {
  (void)state;
  const char *bad[] = {"idem:{2:ab:c",  "idem:2:ab:c}",  "other:{2:ab:c}", "idem:{x:ab:c}",
                       "idem:{9:ab:c}", "idem:{2:ab:}",  "idem:{2:abc}",   "idem:{}",
                       "idem:{256:a:b}", "idem", "idem:{2:ab:c\x01}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char buf[64];
    const char *s, *k;
    snprintf(buf, sizeof buf, "%s", bad[i]);
    if (idem_redis_key_split("idem", buf, strlen(buf), &s, &k) != -1)
      print_error("split: %s\n", bad[i]);
    assert_int_equal(idem_redis_key_split("idem", buf, strlen(buf), &s, &k), -1);
  }
}

static void match_patterns_escape_globs(void **state) {
  (void)state;
  char *m = idem_redis_match("idem", NULL);
  assert_string_equal(m, "idem:{*");
  free(m);
  m = idem_redis_match("idem", "t1");
  assert_string_equal(m, "idem:{2:t1:*");
  free(m);
  m = idem_redis_match("idem", "a*b?[c]\\");
  assert_string_equal(m, "idem:{8:a\\*b\\?\\[c\\]\\\\:*");
  free(m);
  m = idem_redis_match("idem", "");
  assert_string_equal(m, "idem:{0::*");
  free(m);
}

static void script_sha_is_stable(void **state) {
  (void)state;
  const char *sha = idem_redis_script_sha();
  assert_int_equal(strlen(sha), 40);
  assert_ptr_equal(sha, idem_redis_script_sha());
  assert_int_equal(strlen(idem_redis_script), idem_redis_script_len);
}

UNIT_TESTS(cmocka_unit_test(host_and_port),
           cmocka_unit_test(user_and_password),
           cmocka_unit_test(options),
           cmocka_unit_test(malformed_uris_are_refused),
           cmocka_unit_test(cluster_seeds_and_options),
           cmocka_unit_test(cluster_slots_follow_the_hash_tag),
           cmocka_unit_test(cluster_redirections_parse),
           cmocka_unit_test(record_names_round_trip),
           cmocka_unit_test(foreign_names_are_not_split),
           cmocka_unit_test(match_patterns_escape_globs),
           cmocka_unit_test(script_sha_is_stable))

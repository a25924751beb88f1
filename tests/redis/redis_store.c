/*
 * redis_store.c - what the contract suite cannot show about the Redis store,
 * against a real redis-server (`redis_store redis://127.0.0.1:PORT`, run by
 * with-redis.sh): how records sit in Redis (one hash, expiring at
 * expires_at, never while processing), AUTH and database selection, the
 * script cache flushed under us, a killed connection, a server that stops
 * answering, a port where nothing listens, and LIST order and resumption
 * over released records. Waits are conditions with deadlines.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include <uv.h>

#include "idem/idem.h"
#include "store/redis.h"
#include "support/slow_dns.h"
#include "../support/store_test.h"

#define DEADLINE_MS 10000
#define TTL_LONG_MS (3600 * 1000)

static const char *base_uri;
static idem_redis_uri where;
static char run_id[48];
static redisContext *admin;

/* ---- helpers ----------------------------------------------------------- */

static redisReply *cmd(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(admin, fmt, ap);
  va_end(ap);
  assert_non_null(r);
  return r;
}

static long long cmd_int(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(admin, fmt, ap);
  va_end(ap);
  assert_non_null(r);
  if (r->type != REDIS_REPLY_INTEGER)
    print_error("reply type %d: %s\n", r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
  assert_int_equal(r->type, REDIS_REPLY_INTEGER);
  long long v = r->integer;
  freeReplyObject(r);
  return v;
}

static void cmd_ok(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(admin, fmt, ap);
  va_end(ap);
  assert_non_null(r);
  if (r->type == REDIS_REPLY_ERROR)
    print_error("%s\n", r->str);
  assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
  freeReplyObject(r);
}

static const char *key_of(const char *name) { return run_key(run_id, name); }

static idem_op claim_op(const char *scope, const char *key, int64_t lease, int64_t ttl) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = scope, .key = key, .lease_ms = lease,
                .ttl_ms = ttl};
  idem_fingerprint("POST", "/redis", "a", 1, 0, op.fingerprint);
  return op;
}

static int run(idem_sync *db, idem_op op, idem_result *res) {
  int err = idem_sync_run(db, &op, res);
  return err;
}

static idem_sync *open_uri(const char *uri) {
  idem_sync *db;
  char *msg = NULL;
  int err = idem_sync_open(uri, &db, &msg);
  if (err)
    print_error("open %s: %s\n", uri, msg ? msg : idem_strerror(err));
  free(msg);
  assert_int_equal(err, 0);
  return db;
}

/* redis://USERINFO127.0.0.1:PORT/TAIL */
static const char *uri_with(const char *userinfo, const char *tail) {
  static char buf[4][256];
  static int next;
  char *u = buf[next++ % 4];
  snprintf(u, 256, "redis://%s127.0.0.1:%d%s", userinfo, where.port, tail);
  return u;
}

/* Claim until it succeeds (the store reconnected), or fail at the deadline. */
static void claim_until_ok(idem_sync *db, const char *key) {
  int64_t deadline = idem_now_ms() + DEADLINE_MS;
  idem_result res;
  for (;;) {
    int err = run(db, claim_op("", key, 60000, TTL_LONG_MS), &res);
    if (err == 0) {
      assert_int_equal(res.outcome, IDEM_CLAIMED);
      idem_result_clear(&res);
      return;
    }
    assert_true(err == IDEM_ESTORE || err == IDEM_ETIMEDOUT);
    assert_true(idem_now_ms() < deadline);
    usleep(20 * 1000);
  }
}

typedef struct {
  int *done, *ok, *lost;
} tally;

static void cb(idem_store *s, const idem_result *res, void *arg) {
  (void)s;
  tally *t = arg;
  (*t->done)++;
  if (res->err == 0 && (res->outcome == IDEM_CLAIMED || res->outcome == 0)) /* 0: release */
    (*t->ok)++;
  else if (res->err == IDEM_ESTORE || res->err == IDEM_ETIMEDOUT)
    (*t->lost)++;
  else
    print_error("unexpected: %s outcome %d\n", idem_errname(res->err), res->outcome);
}

static void closed_cb(idem_store *s, void *arg) {
  (void)s;
  *(int *)arg = 1;
}

/* ---- how records sit in Redis ------------------------------------------ */

static void record_is_one_hash_expiring_at_expires_at(void **state) {
  (void)state;
  idem_sync *db = open_uri(base_uri);
  const char *key = key_of("layout");
  size_t nlen;
  char *name = idem_redis_key("idem", "tenant", key, &nlen);
  idem_result res;

  /* a lease longer than the retention: the record outlives the lease by
   * one more lease, so a takeover still finds its fence */
  assert_int_equal(run(db, claim_op("tenant", key, 60000, 100), &res), 0);
  idem_result_clear(&res);
  assert_int_equal(cmd_int("EXISTS %s", name), 1);
  redisReply *t = cmd("TYPE %s", name);
  assert_string_equal(t->str, "hash");
  freeReplyObject(t);
  long long pttl = cmd_int("PTTL %s", name);
  assert_true(pttl > 115000 && pttl <= 120000);

  idem_op fin = {.kind = IDEM_OP_COMPLETE, .scope = "tenant", .key = key, .fence = 1,
                 .ttl_ms = 5000, .response = {.status = 200}};
  assert_int_equal(idem_sync_run(db, &fin, &res), 0);
  idem_result_clear(&res);
  pttl = cmd_int("PTTL %s", name);
  assert_true(pttl > 3000 && pttl <= 5000);

  /* a release keeps the record (and its fence) until retention ends */
  const char *rkey = key_of("layout-release");
  char *rname = idem_redis_key("idem", "", rkey, &nlen);
  assert_int_equal(run(db, claim_op("", rkey, 1000, 60000), &res), 0);
  idem_result_clear(&res);
  idem_op rel = {.kind = IDEM_OP_RELEASE, .scope = "", .key = rkey, .fence = 1};
  assert_int_equal(idem_sync_run(db, &rel, &res), 0);
  idem_result_clear(&res);
  redisReply *st = cmd("HGET %s state", rname);
  assert_string_equal(st->str, "0");
  freeReplyObject(st);
  st = cmd("HGET %s fence", rname);
  assert_string_equal(st->str, "1");
  freeReplyObject(st);
  pttl = cmd_int("PTTL %s", rname);
  assert_true(pttl > 50000 && pttl <= 60000);

  /* gc has nothing to do: Redis expires records itself */
  idem_op gc = {.kind = IDEM_OP_GC};
  assert_int_equal(idem_sync_run(db, &gc, &res), 0);
  assert_int_equal(res.count, 0);
  idem_result_clear(&res);
  free(name);
  free(rname);
  idem_sync_close(db);
}

/* ---- connection settings ----------------------------------------------- */

/* Open uri and claim key there (a first claim): the store handle. */
static idem_sync *open_and_claim(const char *uri, const char *key) {
  idem_result res;
  idem_sync *db = open_uri(uri);
  assert_int_equal(run(db, claim_op("", key, 60000, TTL_LONG_MS), &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  idem_result_clear(&res);
  return db;
}

static void auth_and_database_from_the_uri(void **state) {
  (void)state;
  cmd_ok("ACL SETUSER idemtest on >p@ss:w/rd ~* &* +@all");
  const char *key = key_of("auth");
  size_t nlen;
  char *name = idem_redis_key("idem", "", key, &nlen);
  idem_result res;
  idem_sync_close(open_and_claim(uri_with("idemtest:p%40ss%3Aw%2Frd@", "/5"), key));
  assert_int_equal(cmd_int("EXISTS %s", name), 0); /* not in db 0 */
  cmd_ok("SELECT 5");
  assert_int_equal(cmd_int("EXISTS %s", name), 1);
  cmd_ok("SELECT 0");

  /* a wrong password: the operation fails, it does not hang */
  idem_sync *db = open_uri(uri_with("idemtest:wrong@", "/5"));
  assert_int_equal(run(db, claim_op("", key, 60000, TTL_LONG_MS), &res), IDEM_ESTORE);
  idem_sync_close(db);
  cmd_ok("ACL DELUSER idemtest");
  free(name);
}

static void prefix_option_names_the_keys(void **state) {
  (void)state;
  const char *key = key_of("prefix");
  size_t nlen;
  char *name = idem_redis_key("shop", "", key, &nlen);
  idem_result res;
  idem_sync *db = open_and_claim(uri_with("", "?prefix=shop&timeout=2s"), key);
  assert_int_equal(cmd_int("EXISTS %s", name), 1);
  idem_op list = {.kind = IDEM_OP_LIST, .scope = "", .limit = 100};
  assert_int_equal(idem_sync_run(db, &list, &res), 0);
  assert_int_equal(res.count, 1); /* only the shop: records */
  assert_string_equal(res.records[0].key, key);
  idem_result_clear(&res);
  idem_sync_close(db);
  free(name);
}

/* ---- failures ------------------------------------------------------------ */

static void flushed_script_cache_is_reloaded(void **state) {
  (void)state;
  idem_sync *db = open_uri(base_uri);
  idem_result res;
  cmd_ok("SCRIPT FLUSH");
  /* NOSCRIPT means it did not run: sent again with EVAL, transparently */
  assert_int_equal(run(db, claim_op("", key_of("noscript"), 60000, TTL_LONG_MS), &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  idem_result_clear(&res);
  idem_op op = {.kind = IDEM_OP_COMPLETE, .scope = "", .key = key_of("noscript"), .fence = 1,
                .ttl_ms = TTL_LONG_MS, .response = {.status = 200}};
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  idem_result_clear(&res);
  idem_sync_close(db);
}

static void nothing_listening_fails_fast(void **state) {
  (void)state;
  /* port 1 on loopback: nothing listens there */
  int64_t t0 = idem_now_ms();
  idem_sync *db = open_uri("redis://127.0.0.1:1?connect_timeout=5s");
  idem_result res;
  assert_int_equal(run(db, claim_op("", key_of("nobody"), 60000, TTL_LONG_MS), &res),
                   IDEM_ESTORE);
  assert_int_equal(run(db, claim_op("", key_of("nobody"), 60000, TTL_LONG_MS), &res),
                   IDEM_ESTORE);
  idem_sync_close(db);
  /* refused at once, not after the connect timeout */
  assert_true(idem_now_ms() - t0 < 2000);
}

/* ---- host names -------------------------------------------------------- */

/* A slow DNS server (support/slow_dns.c) must not stall the loop (every request on it, replays
 * and pass-through included): the name is resolved on the thread pool, and
 * what is submitted meanwhile waits for the connection. */
static void host_name_is_resolved_off_the_loop(void **state) {
  (void)state;
  char uri[128];
  snprintf(uri, sizeof uri, "redis://localhost:%d", where.port);
  slow_dns_watch(pthread_self());
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, uri, &store, NULL), 0);
  int done = 0, ok = 0, lost = 0;
  tally t = {&done, &ok, &lost};
  idem_op op = claim_op("", key_of("by-name"), 60000, TTL_LONG_MS);
  assert_int_equal(idem_store_submit(store, &op, cb, &t), 0);
  while (!done)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(ok, 1);
  assert_true(slow_dns_lookups() >= 1);
  assert_int_equal(slow_dns_lookups_on_loop(), 0);
  int closed = 0;
  idem_store_close(store, closed_cb, &closed);
  while (!closed)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(uv_loop_close(&loop), 0);

  /* a name with two addresses, the first refusing: the second answers */
  char two[128];
  snprintf(two, sizeof two, "redis://idem-test-two-addrs:%d?connect_timeout=5s", where.port);
  idem_sync *db2 = open_uri(two);
  idem_result res2;
  assert_int_equal(run(db2, claim_op("", key_of("second-address"), 60000, TTL_LONG_MS), &res2), 0);
  assert_int_equal(res2.outcome, IDEM_CLAIMED);
  idem_result_clear(&res2);
  idem_sync_close(db2);

  /* a name that does not resolve: a store error per operation, not a hang */
  idem_sync *db = open_uri("redis://idem-test-unresolvable:6379?connect_timeout=5s");
  idem_result res;
  int64_t t0 = idem_now_ms();
  assert_int_equal(run(db, claim_op("", key_of("nowhere"), 60000, TTL_LONG_MS), &res),
                   IDEM_ESTORE);
  assert_true(idem_now_ms() - t0 < 2000); /* failed at once, not at the connect timeout */
  idem_sync_close(db);
  slow_dns_stop();
}

/* The name's first address (127.0.0.2) takes the connection and never
 * answers: that attempt times out, and the next one starts with the
 * second address, where Redis is. Before, every attempt began with the
 * silent one, so the store never came up. */
static void address_that_timed_out_is_tried_last(void **state) {
  (void)state;
  int silent = slow_dns_silent_first(where.port);
  assert_true(silent >= 0);
  char uri[128];
  snprintf(uri, sizeof uri, "redis://idem-test-two-addrs:%d?connect_timeout=300ms", where.port);
  idem_sync *db = open_uri(uri);
  idem_result res;
  int err = run(db, claim_op("", key_of("silent-first"), 60000, TTL_LONG_MS), &res);
  assert_true(err == IDEM_ESTORE || err == IDEM_ETIMEDOUT); /* waited on 127.0.0.2 */
  claim_until_ok(db, key_of("silent-first"));
  idem_sync_close(db);
  close(silent);
}

/* Closing while the name's lookup is still out (slow_dns: 300 ms): the
 * close waits for it, and an operation submitted before the close is
 * answered once, by the connection made for it. ASan sees any use of the
 * freed store by the late lookup. */
static void closing_while_the_name_is_looked_up(void **state) {
  (void)state;
  char uri[128];
  snprintf(uri, sizeof uri, "redis://localhost:%d", where.port);
  slow_dns_watch(pthread_self());
  for (int with_op = 0; with_op < 2; with_op++) {
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    idem_store *store;
    assert_int_equal(idem_store_open(&loop, uri, &store, NULL), 0);
    int done = 0, ok = 0, lost = 0, closed = 0;
    tally t = {&done, &ok, &lost};
    idem_op op = claim_op("", key_of(with_op ? "closing-1" : "closing-0"), 60000, TTL_LONG_MS);
    if (with_op)
      assert_int_equal(idem_store_submit(store, &op, cb, &t), 0);
    idem_store_close(store, closed_cb, &closed);
    while (!closed)
      uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(done, with_op);
    assert_int_equal(ok, with_op);
    assert_int_equal(uv_loop_close(&loop), 0);
  }
  assert_int_equal(slow_dns_lookups(), 2);
  slow_dns_stop();
}

/* A DNS server slower (1.5 s) than connect_timeout (0.5 s): the lookup of
 * an attempt that timed out answers the next one, so the store connects,
 * and lookups never pile up on the thread pool. */
static void lookup_slower_than_the_connect_timeout(void **state) {
  (void)state;
  char uri[128];
  snprintf(uri, sizeof uri, "redis://localhost:%d?connect_timeout=500ms", where.port);
  slow_dns_watch(pthread_self());
  slow_dns_delay(1500);
  idem_sync *db = open_uri(uri);
  int64_t deadline = idem_now_ms() + 15000;
  idem_result res;
  int err;
  while ((err = run(db, claim_op("", key_of("slow-dns"), 60000, TTL_LONG_MS), &res)) != 0) {
    assert_true(err == IDEM_ESTORE || err == IDEM_ETIMEDOUT);
    assert_true(idem_now_ms() < deadline);
    usleep(50 * 1000);
  }
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  idem_result_clear(&res);
  idem_sync_close(db);
  assert_int_equal(slow_dns_most_at_once(), 1);
  slow_dns_stop();
}

static void killed_connection_fails_in_flight_then_recovers(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, base_uri, &store, NULL), 0);
  enum { N = 50 };
  int done = 0, ok = 0, lost = 0;
  tally t = {&done, &ok, &lost};
  /* first make sure the connection is up */
  idem_op first = claim_op("", key_of("kill-first"), 60000, TTL_LONG_MS);
  assert_int_equal(idem_store_submit(store, &first, cb, &t), 0);
  while (done < 1)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(ok, 1);
  done = ok = 0;

  char keys[N][64];
  for (int i = 0; i < N; i++) {
    snprintf(keys[i], sizeof keys[i], "%s-kill-%d", run_id, i);
    idem_op op = claim_op("", keys[i], 60000, TTL_LONG_MS);
    assert_int_equal(idem_store_submit(store, &op, cb, &t), 0);
  }
  /* kill our connection while (some of) those are in flight */
  cmd_int("CLIENT KILL TYPE normal SKIPME yes");
  while (done < N)
    uv_run(&loop, UV_RUN_ONCE);
  /* every operation was answered once: applied, or failed as unknown */
  assert_int_equal(ok + lost, N);

  /* while down, new operations fail fast; then it reconnects by itself */
  int64_t deadline = idem_now_ms() + DEADLINE_MS;
  for (;;) {
    done = ok = lost = 0;
    idem_op op = claim_op("", key_of("kill-after"), 60000, TTL_LONG_MS);
    assert_int_equal(idem_store_submit(store, &op, cb, &t), 0);
    while (done < 1)
      uv_run(&loop, UV_RUN_ONCE);
    if (ok == 1)
      break;
    assert_true(idem_now_ms() < deadline);
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(10 * 1000);
  }
  assert_int_equal(close_store_and_loop(&loop, store), 0);
}

static void server_that_stops_answering_times_out(void **state) {
  (void)state;
  /* the pause outlasts the timeout by seconds: a stalled test still sends
   * its claim inside it */
  idem_sync *db = open_uri(uri_with("", "?timeout=500ms&connect_timeout=3s"));
  idem_result res;
  assert_int_equal(run(db, claim_op("", key_of("pause-warm"), 60000, TTL_LONG_MS), &res), 0);
  idem_result_clear(&res);
  cmd_ok("CLIENT PAUSE 3000 ALL");
  int64_t t0 = idem_now_ms();
  assert_int_equal(run(db, claim_op("", key_of("pause"), 60000, TTL_LONG_MS), &res),
                   IDEM_ETIMEDOUT);
  int64_t took = idem_now_ms() - t0;
  assert_true(took >= 450 && took < 2500);
  /* the claim may still run when the pause ends: a later claim of the same
   * key is then busy, never a second CLAIMED. The store comes back alone. */
  claim_until_ok(db, key_of("pause-after"));
  assert_int_equal(run(db, claim_op("", key_of("pause"), 60000, TTL_LONG_MS), &res), 0);
  assert_true(res.outcome == IDEM_BUSY || (res.outcome == IDEM_CLAIMED && res.fence == 1));
  idem_result_clear(&res);
  idem_sync_close(db);
}

static void idle_blocking_caller_does_not_time_out(void **state) {
  (void)state;
  /* idem_sync runs its loop only during an operation: after an idle spell
   * longer than the command timeout, the loop's clock is that far behind */
  idem_sync *db = open_uri(uri_with("", "?timeout=1s"));
  idem_result res;
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "idle-%d", i);
    assert_int_equal(run(db, claim_op("", key_of(name), 60000, TTL_LONG_MS), &res), 0);
    idem_result_clear(&res);
    usleep(1500 * 1000); /* the idle spell under test, not a wait for a condition */
  }
  idem_sync_close(db);
}

static void replica_after_failover_is_left_for_a_new_connection(void **state) {
  (void)state;
  idem_sync *db = open_uri(base_uri);
  idem_result res;
  assert_int_equal(run(db, claim_op("", key_of("ro-warm"), 60000, TTL_LONG_MS), &res), 0);
  idem_result_clear(&res);
  /* the server becomes a replica (of nobody that answers): writes refused */
  cmd_ok("REPLICAOF 127.0.0.1 1");
  assert_int_equal(run(db, claim_op("", key_of("ro"), 60000, TTL_LONG_MS), &res), IDEM_ESTORE);
  /* a new handle does not take a replica for its server (ROLE) */
  idem_sync *db2 = open_uri(base_uri);
  assert_int_equal(run(db2, claim_op("", key_of("ro2"), 60000, TTL_LONG_MS), &res), IDEM_ESTORE);
  cmd_ok("REPLICAOF NO ONE");
  /* both find the writable server again by themselves */
  claim_until_ok(db, key_of("ro"));
  claim_until_ok(db2, key_of("ro2"));
  idem_sync_close(db);
  idem_sync_close(db2);
}

static void least_privilege_acl_user_is_enough(void **state) {
  (void)state;
  /* only the commands idem sends, only its keys: no ROLE, no SCRIPT LOAD */
  cmd_ok("ACL SETUSER idemmin on >pw ~idem:* resetchannels -@all +evalsha +eval +time +hmget +hset +pexpireat +del +scan");
  cmd_ok("SCRIPT FLUSH");
  idem_sync *db = open_uri(uri_with("idemmin:pw@", ""));
  idem_result res;
  const char *key = key_of("acl");
  assert_int_equal(run(db, claim_op("", key, 60000, TTL_LONG_MS), &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  idem_result_clear(&res);
  idem_op fin = {.kind = IDEM_OP_COMPLETE, .scope = "", .key = key, .fence = 1,
                 .ttl_ms = TTL_LONG_MS, .response = {.status = 201}};
  assert_int_equal(idem_sync_run(db, &fin, &res), 0);
  idem_result_clear(&res);
  idem_op list = {.kind = IDEM_OP_LIST, .scope = "", .limit = 5};
  assert_int_equal(idem_sync_run(db, &list, &res), 0);
  assert_true(res.count >= 1);
  idem_result_clear(&res);
  idem_op del = {.kind = IDEM_OP_DELETE, .scope = "", .key = key};
  assert_int_equal(idem_sync_run(db, &del, &res), 0);
  assert_int_equal(res.count, 1);
  idem_result_clear(&res);
  idem_sync_close(db);
  /* a /db other than 0 is chosen by SELECT on connect: the README's list
   * names +select for it */
  cmd_ok("ACL SETUSER idemmin +select");
  db = open_uri(uri_with("idemmin:pw@", "/3"));
  key = key_of("acl-db");
  assert_int_equal(run(db, claim_op("", key, 60000, TTL_LONG_MS), &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  idem_result_clear(&res);
  idem_sync_close(db);
  cmd_ok("ACL DELUSER idemmin");
}

/* ---- LIST ------------------------------------------------------------------ */

static int by_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void list_is_ordered_resumable_and_skips_released(void **state) {
  (void)state;
  enum { N = 600 };
  char scope[64];
  snprintf(scope, sizeof scope, "list-%s", run_id);
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, base_uri, &store, NULL), 0);
  static char keys[N][32];
  const char *live[N];
  size_t nlive = 0;
  int done = 0, ok = 0, lost = 0;
  tally t = {&done, &ok, &lost};
  for (int i = 0; i < N; i++) {
    snprintf(keys[i], sizeof keys[i], "k%05d", (i * 7919) % N);
    idem_op op = claim_op(scope, keys[i], 60000, TTL_LONG_MS);
    assert_int_equal(idem_store_submit(store, &op, cb, &t), 0);
  }
  while (done < N)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(ok, N);
  /* release every third: kept in Redis, but not live */
  done = 0;
  int releases = 0;
  for (int i = 0; i < N; i++) {
    if (i % 3 == 0) {
      idem_op op = {.kind = IDEM_OP_RELEASE, .scope = scope, .key = keys[i], .fence = 1};
      assert_int_equal(idem_store_submit(store, &op, cb, &t), 0);
      releases++;
    } else {
      live[nlive++] = keys[i];
    }
  }
  while (done < releases)
    uv_run(&loop, UV_RUN_ONCE);
  close_store_and_loop(&loop, store);
  qsort(live, nlive, sizeof live[0], by_key);

  idem_sync *db = open_uri(base_uri);
  idem_result res;
  idem_op list = {.kind = IDEM_OP_LIST, .scope = scope, .limit = 10000};
  assert_int_equal(idem_sync_run(db, &list, &res), 0);
  assert_int_equal(res.count, nlive);
  for (size_t i = 0; i < nlive; i++) {
    assert_string_equal(res.records[i].key, live[i]);
    assert_string_equal(res.records[i].scope, scope);
    assert_int_equal(res.records[i].state, IDEM_STATE_PROCESSING);
  }
  idem_result_clear(&res);

  /* pages of 37, each resuming after the last key of the one before */
  size_t seen = 0;
  const char *after = NULL;
  char last[32];
  for (;;) {
    list.limit = 37;
    list.key = after;
    assert_int_equal(idem_sync_run(db, &list, &res), 0);
    if (res.count == 0) {
      idem_result_clear(&res);
      break;
    }
    for (size_t i = 0; i < res.count; i++)
      assert_string_equal(res.records[i].key, live[seen + i]);
    seen += res.count;
    snprintf(last, sizeof last, "%s", res.records[res.count - 1].key);
    after = last;
    idem_result_clear(&res);
  }
  assert_int_equal(seen, nlive);

  /* every scope: ours are among them, in (scope length, scope, key) order */
  idem_op all = {.kind = IDEM_OP_LIST, .limit = 100000};
  assert_int_equal(idem_sync_run(db, &all, &res), 0);
  assert_true(res.count >= nlive);
  for (size_t i = 1; i < res.count; i++) {
    size_t a = strlen(res.records[i - 1].scope), b = strlen(res.records[i].scope);
    int c = a != b ? (a < b ? -1 : 1) : strcmp(res.records[i - 1].scope, res.records[i].scope);
    assert_true(c < 0 || (c == 0 && strcmp(res.records[i - 1].key, res.records[i].key) < 0));
  }
  idem_result_clear(&res);
  idem_sync_close(db);
}

/* ---- main ---------------------------------------------------------------- */

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: redis_store redis://127.0.0.1:PORT\n");
    return 2;
  }
  base_uri = argv[1];
  if (idem_redis_uri_parse(base_uri, &where, NULL) != 0) {
    fprintf(stderr, "redis_store: bad URI %s\n", base_uri);
    return 2;
  }
  admin = redisConnect(where.host, where.port);
  if (admin == NULL || admin->err) {
    fprintf(stderr, "redis_store: cannot connect to %s\n", base_uri);
    return 1;
  }
  make_run_id(run_id, sizeof run_id, 'r');
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(record_is_one_hash_expiring_at_expires_at),
      cmocka_unit_test(auth_and_database_from_the_uri),
      cmocka_unit_test(prefix_option_names_the_keys),
      cmocka_unit_test(flushed_script_cache_is_reloaded),
      cmocka_unit_test(nothing_listening_fails_fast),
      cmocka_unit_test(host_name_is_resolved_off_the_loop),
      cmocka_unit_test(address_that_timed_out_is_tried_last),
      cmocka_unit_test(closing_while_the_name_is_looked_up),
      cmocka_unit_test(lookup_slower_than_the_connect_timeout),
      cmocka_unit_test(killed_connection_fails_in_flight_then_recovers),
      cmocka_unit_test(server_that_stops_answering_times_out),
      cmocka_unit_test(idle_blocking_caller_does_not_time_out),
      cmocka_unit_test(replica_after_failover_is_left_for_a_new_connection),
      cmocka_unit_test(least_privilege_acl_user_is_enough),
      cmocka_unit_test(list_is_ordered_resumable_and_skips_released),
  };
  int rc = cmocka_run_group_tests_name("redis store", tests, NULL, NULL);
  redisFree(admin);
  idem_redis_uri_clear(&where);
  return rc;
}

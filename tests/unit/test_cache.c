/* test_cache.c - the cache tier: its URIs, the LRU bounded in bytes, trust
 * that ends with the ttl or the record, claims never answered from it,
 * and a store with the cache in front answering replays without the store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "unit.h"

#include "idem/idem.h"
#include "store/cache.h"

static idem_cache *open_ok(const char *uri) {
  idem_cache *c = NULL;
  char *why = NULL;
  int err = idem_cache_open(uri, "memory:test", &c, &why);
  if (err)
    print_error("%s: %s\n", uri, why ? why : "");
  assert_int_equal(err, 0);
  return c;
}

static void bad_uris_are_refused_with_a_reason(void **state) {
  (void)state;
  const char *bad[] = {"memory:", "memory:lots", "memory:1k", "redis-ish:64MiB",
                       "memory:64MiB?ttl=soon", "memory:64MiB?size=1", "memory:64MiB?ttl"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    idem_cache *c = NULL;
    char *why = NULL;
    assert_int_equal(idem_cache_open(bad[i], "memory:test", &c, &why), IDEM_EURI);
    assert_non_null(why);
    free(why);
  }
}

static idem_record finished(uint8_t fp, int64_t expires_at, size_t body_len) {
  static char body[8192];
  memset(body, 'b', sizeof body);
  idem_record rec = {.state = IDEM_STATE_COMPLETED, .fence = 1, .expires_at = expires_at,
                     .response = {.status = 201, .body = body, .body_len = body_len}};
  memset(rec.fingerprint, fp, sizeof rec.fingerprint);
  return rec;
}

static int has(idem_cache *c, const char *key, int64_t now) {
  idem_record rec;
  if (!idem_cache_get(c, "s", key, now, &rec))
    return 0;
  idem_record_clear(&rec);
  return 1;
}

/* 8 KiB: room for a few 1 KiB records; the least recently used goes first. */
static void least_recently_used_goes_when_bytes_run_out(void **state) {
  (void)state;
  idem_cache *c = open_ok("memory:8KiB?ttl=1h");
  idem_record rec = finished(1, 1000000, 1000);
  char key[16];
  for (int i = 0; i < 5; i++) {
    snprintf(key, sizeof key, "k%d", i);
    idem_cache_put(c, "s", key, &rec, 0, 0);
  }
  assert_true(has(c, "k0", 0)); /* k0 is now the most recent */
  for (int i = 5; i < 12; i++) {
    snprintf(key, sizeof key, "k%d", i);
    idem_cache_put(c, "s", key, &rec, 0, 0);
  }
  assert_true(has(c, "k11", 0));
  assert_false(has(c, "k1", 0)); /* the oldest untouched went first */
  /* a record larger than the whole cache is not kept */
  idem_record big = finished(1, 1000000, 8192);
  idem_cache_put(c, "s", "big", &big, 0, 0);
  assert_false(has(c, "big", 0));
  idem_cache_release(c);
}

/* rec, put at time 0 in a cache of uri, is answered until last (ms) and
 * not after; last -1: never kept. */
static void expect_trusted_until(const char *uri, idem_record rec, int64_t last) {
  idem_cache *c = open_ok(uri);
  idem_cache_put(c, "s", "k", &rec, 0, 0);
  if (last >= 0)
    assert_true(has(c, "k", last));
  assert_false(has(c, "k", last + 1));
  idem_cache_release(c);
}

static void trust_ends_with_the_ttl_or_the_record(void **state) {
  (void)state;
  expect_trusted_until("memory:1MiB?ttl=1h", finished(1, 1000, 10), 999);
  expect_trusted_until("memory:1MiB?ttl=100ms", finished(1, 1000000, 10), 99);
  idem_record processing = finished(1, 1000000, 10);
  processing.state = IDEM_STATE_PROCESSING; /* not finished: never kept */
  expect_trusted_until("memory:1MiB", processing, -1);
}

/* An expired entry that shares its hash chain with other keys: looking it up
 * drops it and answers nothing, never the entry that follows it in the chain
 * (another key's record, replayed for this key). 200 keys of one length
 * (so another's record decodes) in at most 256 buckets: many chains. Each
 * record's body names its key. */
static void an_expired_entry_never_answers_with_another_key(void **state) {
  (void)state;
  idem_cache *c = open_ok("memory:1MiB?ttl=1h");
  char key[16];
  for (int i = 0; i < 200; i++) {
    snprintf(key, sizeof key, "k%d", 1000 + i);
    idem_record rec = finished(1, 1000, 0);
    rec.response.body = key;
    rec.response.body_len = strlen(key);
    idem_cache_put(c, "s", key, &rec, 0, 0);
  }
  for (int i = 0; i < 200; i++) { /* live: each its own */
    snprintf(key, sizeof key, "k%d", 1000 + i);
    idem_record got;
    assert_true(idem_cache_get(c, "s", key, 999, &got));
    assert_int_equal(got.response.body_len, strlen(key));
    assert_memory_equal(got.response.body, key, strlen(key));
    idem_record_clear(&got);
  }
  for (int i = 0; i < 200; i++) { /* expired: nothing */
    snprintf(key, sizeof key, "k%d", 1000 + i);
    idem_record got;
    int found = idem_cache_get(c, "s", key, 1000, &got);
    if (found) {
      print_error("%s answered with %.*s\n", key, (int)got.response.body_len,
                  got.response.body ? got.response.body : "");
      idem_record_clear(&got);
    }
    assert_false(found);
  }
  idem_cache_release(c);
}

/* A claim is remembered, never answered; its complete of the same fence
 * makes the record; another fence or a forget drops it. */
static void a_claim_becomes_the_record_its_complete_makes(void **state) {
  (void)state;
  idem_cache *c = open_ok("memory:1MiB");
  idem_op claim = {.kind = IDEM_OP_CLAIM, .scope = "s", .key = "k", .lease_ms = 1000,
                   .ttl_ms = 5000};
  memset(claim.fingerprint, 7, sizeof claim.fingerprint);
  idem_cache_claimed(c, "s", "k", &claim, 3, 100);
  assert_false(has(c, "k", 100));
  idem_op stale = {.kind = IDEM_OP_COMPLETE, .scope = "s", .key = "k", .fence = 2,
                   .ttl_ms = 5000, .response = {.status = 200}};
  idem_cache_finished(c, &stale, 200);
  assert_false(has(c, "k", 200));
  idem_cache_claimed(c, "s", "k", &claim, 3, 100);
  idem_op done = {.kind = IDEM_OP_COMPLETE, .scope = "s", .key = "k", .fence = 3,
                  .ttl_ms = 5000, .response = {.status = 200, .body = "ok", .body_len = 2}};
  idem_cache_finished(c, &done, 200);
  idem_record rec;
  assert_true(idem_cache_get(c, "s", "k", 300, &rec));
  assert_int_equal(rec.state, IDEM_STATE_COMPLETED);
  assert_int_equal(rec.fence, 3);
  assert_int_equal(rec.expires_at, 5200);
  assert_memory_equal(rec.fingerprint, claim.fingerprint, sizeof rec.fingerprint);
  assert_memory_equal(rec.response.body, "ok", 2);
  idem_record_clear(&rec);
  idem_cache_forget(c, "s", "k");
  assert_false(has(c, "k", 300));
  idem_cache_count(c, 1);
  idem_cache_count(c, 0);
  idem_cache_count(c, 0);
  uint64_t hits, misses;
  idem_cache_counts(c, &hits, &misses);
  assert_int_equal(hits, 1);
  assert_int_equal(misses, 2);
  idem_cache_release(c);
}

static idem_op claim_of(const char *key, const char *body) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .key = key, .lease_ms = 60000, .ttl_ms = 60000};
  idem_fingerprint("POST", "/", body, strlen(body), 0, op.fingerprint);
  return op;
}

static int outcome(idem_sync *db, idem_op op) {
  idem_result res;
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  int o = (int)res.outcome;
  idem_result_clear(&res);
  return o;
}

/* Behind the cache, a replay and a mismatch never reach the store: with the
 * record deleted behind the cache's back (as another process would), this
 * handle still replays until the ttl ends; a delete through a cached handle
 * clears it at once. */
static void replays_are_answered_without_the_store(void **state) {
  (void)state;
  idem_sync *cached, *bare;
  /* the ttl outlasts a stalled machine between the complete and the checks */
  assert_int_equal(idem_sync_open_cached("memory:cache-test", "memory:1MiB?ttl=60s", &cached,
                                         NULL), 0);
  assert_int_equal(idem_sync_open("memory:cache-test", &bare, NULL), 0);
  idem_cache *c = NULL; /* the same cache, held here for its counts */
  assert_int_equal(idem_cache_open("memory:1MiB?ttl=60s", "memory:cache-test", &c, NULL), 0);
  idem_result res;
  idem_op claim = claim_of("k", "a");
  assert_int_equal(idem_sync_run(cached, &claim, &res), 0);
  idem_op done = {.kind = IDEM_OP_COMPLETE, .key = "k", .fence = res.fence, .ttl_ms = 60000,
                  .response = {.status = 201}};
  assert_int_equal(idem_sync_run(cached, &done, &res), 0);
  uint64_t hits, misses, hits_after;
  idem_cache_counts(c, &hits, &misses);
  assert_int_equal(outcome(cached, claim_of("k", "a")), IDEM_REPLAY);
  assert_int_equal(outcome(cached, claim_of("k", "b")), IDEM_MISMATCH);
  idem_cache_counts(c, &hits_after, &misses);
  assert_int_equal(hits_after, hits + 2); /* both answered here, not by the store */
  /* a delete through a handle of the process without the cache clears it */
  idem_op del = {.kind = IDEM_OP_DELETE, .key = "k"};
  assert_int_equal(idem_sync_run(bare, &del, &res), 0);
  claim = claim_of("k", "a");
  assert_int_equal(idem_sync_run(cached, &claim, &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  /* completed again; a delete through the cached handle clears it too */
  done.fence = res.fence;
  assert_int_equal(idem_sync_run(cached, &done, &res), 0);
  assert_int_equal(outcome(cached, claim_of("k", "a")), IDEM_REPLAY);
  assert_int_equal(idem_sync_run(cached, &del, &res), 0);
  assert_int_equal(outcome(cached, claim_of("k", "a")), IDEM_CLAIMED);
  idem_cache_release(c);
  idem_sync_close(cached);
  idem_sync_close(bare);
}

/* A record read before this process's claim, taken in after it, does not
 * replace the claim: the claim's complete makes the record. A tombstone
 * refuses what was read before the delete, not what was read after. */
static void late_reads_never_replace_a_claim_or_a_delete(void **state) {
  (void)state;
  idem_cache *c = open_ok("memory:1MiB?ttl=1h");
  idem_op claim = {.kind = IDEM_OP_CLAIM, .scope = "s", .key = "k", .lease_ms = 1000,
                   .ttl_ms = 5000};
  idem_cache_claimed(c, "s", "k", &claim, 2, 100);
  idem_record old = finished(1, 1000000, 10);
  idem_cache_put(c, "s", "k", &old, 150, 90);
  assert_false(has(c, "k", 200));
  idem_op done = {.kind = IDEM_OP_COMPLETE, .scope = "s", .key = "k", .fence = 2,
                  .ttl_ms = 5000, .response = {.status = 200}};
  idem_cache_finished(c, &done, 200);
  idem_record rec;
  assert_true(idem_cache_get(c, "s", "k", 300, &rec));
  assert_int_equal(rec.fence, 2);
  idem_record_clear(&rec);
  idem_cache_bury(c, "s", "k", 400);
  assert_false(has(c, "k", 400));
  idem_cache_forget(c, "s", "k"); /* a release: the tombstone stays */
  idem_cache_put(c, "s", "k", &old, 450, 400);
  assert_false(has(c, "k", 450));
  idem_cache_put(c, "s", "k", &old, 450, 401);
  assert_true(has(c, "k", 450));
  idem_cache_release(c);
}

/* A delete's tombstone holds through what takes its place: a claim made
 * after the delete, the record its complete makes, its release. A replay
 * read before the delete, taken in after any of them, must not put the
 * deleted record back (replayed, and another payload refused with 422). */
static void a_delete_outlives_the_claims_after_it(void **state) {
  (void)state;
  idem_cache *c = open_ok("memory:1MiB?ttl=1h");
  idem_record old = finished(1, 1000000, 10); /* fence 1, read at 300 */
  idem_op claim = {.kind = IDEM_OP_CLAIM, .scope = "s", .key = "k", .lease_ms = 1000,
                   .ttl_ms = 5000};
  idem_op done = {.kind = IDEM_OP_COMPLETE, .scope = "s", .key = "k", .fence = 2,
                  .ttl_ms = 5000, .response = {.status = 200}};
  /* deleted, claimed again and completed with fence 2 */
  idem_cache_bury(c, "s", "k", 400);
  idem_cache_claimed(c, "s", "k", &claim, 2, 500);
  idem_cache_finished(c, &done, 600);
  idem_cache_put(c, "s", "k", &old, 700, 300);
  idem_record rec;
  assert_true(idem_cache_get(c, "s", "k", 700, &rec));
  assert_int_equal(rec.fence, 2);
  idem_record_clear(&rec);
  /* a read after the delete still fills it */
  idem_cache_put(c, "s", "k", &old, 700, 401);
  assert_true(idem_cache_get(c, "s", "k", 700, &rec));
  assert_int_equal(rec.fence, 1);
  idem_record_clear(&rec);
  /* deleted, claimed again and released (the upstream's 503 is not kept) */
  idem_cache_bury(c, "s", "k", 800);
  idem_cache_claimed(c, "s", "k", &claim, 2, 900);
  idem_cache_forget(c, "s", "k");
  idem_cache_put(c, "s", "k", &old, 1000, 700);
  assert_false(has(c, "k", 1000));
  /* deleted, claimed again, and the claim's lease ran out */
  idem_cache_bury(c, "s", "k", 1100);
  idem_cache_claimed(c, "s", "k", &claim, 2, 1200);
  idem_cache_put(c, "s", "k", &old, 2300, 1000);
  assert_false(has(c, "k", 2300));
  idem_cache_release(c);
}

/* ---- a delete racing a replay, on two handles of one process ---- */

typedef struct {
  int done;
  idem_result res;
} answer_box;

static void on_answer(idem_store *st, const idem_result *res, void *arg) {
  answer_box *box = arg;
  (void)st;
  box->done = 1;
  box->res = *res;
  box->res.record = NULL; /* borrowed: gone after this callback */
}

static void run_until(uv_loop_t *loop, const answer_box *box) {
  while (!box->done)
    uv_run(loop, UV_RUN_ONCE);
}

static void on_closed(idem_store *st, void *arg) {
  (void)st;
  *(int *)arg = 1;
}

static void close_on(uv_loop_t *loop, idem_store *st) {
  int closed = 0;
  idem_store_close(st, on_closed, &closed);
  while (!closed)
    uv_run(loop, UV_RUN_ONCE);
}

/* A gateway worker's claim is answered with a replay by the store, then the
 * admin listener (another handle, another loop, the same cache) deletes the
 * key, and only then does the worker's loop take the replay in. The key is
 * gone: the replay must not put the deleted record back in the cache, where
 * it would be replayed (and another payload refused with 422) for the ttl. */
static void a_replay_read_before_a_delete_does_not_refill_the_cache(void **state) {
  (void)state;
  idem_sync *bare;
  assert_int_equal(idem_sync_open("memory:cache-race", &bare, NULL), 0);
  idem_result res;
  idem_op claim = claim_of("k", "a");
  assert_int_equal(idem_sync_run(bare, &claim, &res), 0);
  idem_op done = {.kind = IDEM_OP_COMPLETE, .key = "k", .fence = res.fence, .ttl_ms = 60000,
                  .response = {.status = 201}};
  assert_int_equal(idem_sync_run(bare, &done, &res), 0);

  uv_loop_t worker_loop, admin_loop;
  uv_loop_init(&worker_loop);
  uv_loop_init(&admin_loop);
  idem_store *worker, *admin;
  const char *cache = "memory:1MiB?ttl=1h";
  assert_int_equal(idem_store_open_cached(&worker_loop, "memory:cache-race", cache, &worker,
                                          NULL), 0);
  assert_int_equal(idem_store_open_cached(&admin_loop, "memory:cache-race", cache, &admin,
                                          NULL), 0);
  answer_box replay = {0}, deleted = {0}, again = {0};
  claim = claim_of("k", "a");
  assert_int_equal(idem_store_submit(worker, &claim, on_answer, &replay), 0);
  idem_op del = {.kind = IDEM_OP_DELETE, .key = "k"};
  assert_int_equal(idem_store_submit(admin, &del, on_answer, &deleted), 0);
  run_until(&admin_loop, &deleted);
  assert_int_equal(deleted.res.err, 0);
  run_until(&worker_loop, &replay); /* the replay's answer, taken in after the delete */
  assert_int_equal(replay.res.outcome, IDEM_REPLAY);
  claim = claim_of("k", "b"); /* another payload: the key is unseen, so it runs */
  assert_int_equal(idem_store_submit(worker, &claim, on_answer, &again), 0);
  run_until(&worker_loop, &again);
  assert_int_equal(again.res.err, 0);
  assert_int_equal(again.res.outcome, IDEM_CLAIMED);
  close_on(&worker_loop, worker);
  close_on(&admin_loop, admin);
  assert_int_equal(uv_loop_close(&worker_loop), 0);
  assert_int_equal(uv_loop_close(&admin_loop), 0);
  idem_sync_close(bare);
}

/* A failed record is not final: a claim through another process takes it
 * over and may complete it. So a replay of a failure (by flag) always asks
 * the store; here, after a takeover and complete behind the cache's back,
 * it replays the completion, not the stale failure. A mismatch on it is
 * still answered by the cache: a takeover keeps the fingerprint. */
static void a_failed_record_is_never_replayed_from_the_cache(void **state) {
  (void)state;
  idem_sync *cached, *bare;
  assert_int_equal(idem_sync_open_cached("memory:cache-failed", "memory:1MiB?ttl=60s", &cached,
                                         NULL), 0);
  assert_int_equal(idem_sync_open("memory:cache-failed", &bare, NULL), 0);
  idem_result res;
  idem_op claim = claim_of("k", "a");
  assert_int_equal(idem_sync_run(cached, &claim, &res), 0);
  idem_op fail = {.kind = IDEM_OP_FAIL, .key = "k", .fence = res.fence, .ttl_ms = 60000,
                  .response = {.status = 500}};
  idem_result_clear(&res);
  assert_int_equal(idem_sync_run(cached, &fail, &res), 0);
  idem_result_clear(&res);
  claim.flags = IDEM_CLAIM_REPLAY_FAILED;
  assert_int_equal(idem_sync_run(cached, &claim, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_int_equal(res.record->response.status, 500);
  idem_result_clear(&res);
  /* another process takes it over and completes it */
  idem_op takeover = claim_of("k", "a");
  assert_int_equal(idem_sync_run(bare, &takeover, &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  idem_op done = {.kind = IDEM_OP_COMPLETE, .key = "k", .fence = res.fence, .ttl_ms = 60000,
                  .response = {.status = 201}};
  idem_result_clear(&res);
  assert_int_equal(idem_sync_run(bare, &done, &res), 0);
  idem_result_clear(&res);
  assert_int_equal(idem_sync_run(cached, &claim, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_int_equal(res.record->state, IDEM_STATE_COMPLETED);
  assert_int_equal(res.record->response.status, 201);
  idem_result_clear(&res);
  idem_sync_close(cached);
  idem_sync_close(bare);
}

/* ---- the cache and the stores of a process ---- */

static idem_outcome sync_claim(idem_sync *s, const char *key, const char **body) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .key = key, .lease_ms = 60000, .ttl_ms = 60000};
  idem_result r;
  assert_int_equal(idem_sync_run(s, &op, &r), 0);
  idem_outcome o = r.outcome;
  static char kept[64];
  snprintf(kept, sizeof kept, "%s", r.record && r.record->response.body ? r.record->response.body : "");
  if (body)
    *body = kept;
  idem_result_clear(&r);
  return o;
}

static void sync_complete(idem_sync *s, const char *key, const char *body) {
  idem_op op = {.kind = IDEM_OP_COMPLETE, .key = key, .fence = 1, .ttl_ms = 60000,
                .response = {.status = 200, .body = body, .body_len = strlen(body)}};
  idem_result r;
  assert_int_equal(idem_sync_run(s, &op, &r), 0);
  idem_result_clear(&r);
}

/* The cache is one per cache URI and store: store y must not replay what
 * store x completed (y never saw the key: its request would never run). */
static void two_stores_with_one_cache_uri_never_answer_from_each_other(void **state) {
  (void)state;
  idem_sync *x, *y;
  char name_x[64], name_y[64];
  snprintf(name_x, sizeof name_x, "memory:cx-%d", getpid());
  snprintf(name_y, sizeof name_y, "memory:cy-%d", getpid());
  assert_int_equal(idem_sync_open_cached(name_x, "memory:1MiB", &x, NULL), 0);
  assert_int_equal(idem_sync_open_cached(name_y, "memory:1MiB", &y, NULL), 0);
  assert_int_equal(sync_claim(x, "order-1", NULL), IDEM_CLAIMED);
  sync_complete(x, "order-1", "from x");
  const char *body;
  assert_int_equal(sync_claim(x, "order-1", &body), IDEM_REPLAY);
  assert_string_equal(body, "from x");
  assert_int_equal(sync_claim(y, "order-1", NULL), IDEM_CLAIMED);
  idem_sync_close(x);
  idem_sync_close(y);
}

/* idem.h: a delete through any handle of the process clears the key, also
 * through a handle opened without the cache. */
static void a_delete_through_a_handle_without_the_cache_clears_it(void **state) {
  (void)state;
  idem_sync *cached, *plain;
  char name[64];
  snprintf(name, sizeof name, "memory:del-%d", getpid());
  assert_int_equal(idem_sync_open_cached(name, "memory:1MiB", &cached, NULL), 0);
  assert_int_equal(idem_sync_open(name, &plain, NULL), 0);
  assert_int_equal(sync_claim(cached, "k", NULL), IDEM_CLAIMED);
  sync_complete(cached, "k", "old");
  assert_int_equal(sync_claim(cached, "k", NULL), IDEM_REPLAY); /* in the cache now */
  idem_op del = {.kind = IDEM_OP_DELETE, .key = "k"};
  idem_result r;
  assert_int_equal(idem_sync_run(plain, &del, &r), 0);
  idem_result_clear(&r);
  assert_int_equal(sync_claim(plain, "k", NULL), IDEM_CLAIMED); /* a new run, in flight */
  assert_int_equal(sync_claim(cached, "k", NULL), IDEM_BUSY);   /* not the old answer */
  idem_sync_close(cached);
  idem_sync_close(plain);
}

/* idem.h: after a failed open the loop must run once more before it is
 * closed; once is enough (both handles close in one iteration). */
/* NULL where a handle or a result belongs: IDEM_EINVAL, not a crash */
static void the_sync_api_refuses_null(void **state) {
  (void)state;
  idem_op op = {.kind = IDEM_OP_GET, .key = "k"};
  idem_result r;
  assert_int_equal(idem_sync_open("memory:", NULL, NULL), IDEM_EINVAL);
  assert_int_equal(idem_sync_run(NULL, &op, &r), IDEM_EINVAL);
  idem_sync *s;
  assert_int_equal(idem_sync_open("memory:", &s, NULL), 0);
  assert_int_equal(idem_sync_run(s, &op, NULL), IDEM_EINVAL);
  idem_sync_close(s);
}

static void a_failed_open_is_freed_by_one_more_run_of_the_loop(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  idem_store *st = NULL;
  char *why = NULL;
  assert_int_not_equal(idem_store_open(&loop, "memory:?", &st, &why), 0);
  free(why);
  uv_run(&loop, UV_RUN_NOWAIT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

UNIT_TESTS(cmocka_unit_test(bad_uris_are_refused_with_a_reason),
           cmocka_unit_test(least_recently_used_goes_when_bytes_run_out),
           cmocka_unit_test(trust_ends_with_the_ttl_or_the_record),
           cmocka_unit_test(an_expired_entry_never_answers_with_another_key),
           cmocka_unit_test(a_claim_becomes_the_record_its_complete_makes),
           cmocka_unit_test(replays_are_answered_without_the_store),
           cmocka_unit_test(late_reads_never_replace_a_claim_or_a_delete),
           cmocka_unit_test(a_delete_outlives_the_claims_after_it),
           cmocka_unit_test(a_replay_read_before_a_delete_does_not_refill_the_cache),
           cmocka_unit_test(a_failed_record_is_never_replayed_from_the_cache),
           cmocka_unit_test(two_stores_with_one_cache_uri_never_answer_from_each_other),
           cmocka_unit_test(a_delete_through_a_handle_without_the_cache_clears_it),
           cmocka_unit_test(a_failed_open_is_freed_by_one_more_run_of_the_loop),
           cmocka_unit_test(the_sync_api_refuses_null))

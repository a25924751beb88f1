/*
 * contract.c - the store contract: every transition of README.md's "How it
 * works", run against the store named on the command line (`contract URI`).
 * Every store must pass all of it. Keys are unique per run, so a persistent
 * store can be reused; lease and retention tests wait for conditions, with
 * deadlines.
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

#include <uv.h>

#include "idem/idem.h"
#include "../support/store_test.h"

static const char *store_uri;
static const char *cache_uri; /* NULL: no cache tier in front */
static char run_id[64];
static idem_sync *db;

#define LEASE_SHORT_MS 150
#define TTL_LONG_MS (3600 * 1000)
#define WAIT_DEADLINE_MS 10000

/* ---- helpers ----------------------------------------------------------- */

static const char *unique_key(const char *name) { return run_key(run_id, name); }

static void fingerprint_of(const char *text, uint8_t fp[IDEM_FINGERPRINT_LEN]) {
  assert_int_equal(idem_fingerprint("POST", "/contract", text, strlen(text), 0, fp), 0);
}

static idem_op claim_op(const char *scope, const char *key, const char *payload, int64_t lease_ms) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = scope, .key = key, .lease_ms = lease_ms,
                .ttl_ms = TTL_LONG_MS};
  fingerprint_of(payload, op.fingerprint);
  return op;
}

static int claim(const char *scope, const char *key, const char *payload, int64_t lease_ms,
                 idem_result *res) {
  idem_op op = claim_op(scope, key, payload, lease_ms);
  return idem_sync_run(db, &op, res);
}

static int finish(idem_op_kind kind, const char *scope, const char *key, uint64_t fence,
                  int status, const char *body, int64_t ttl_ms) {
  idem_op op = {.kind = kind, .scope = scope, .key = key, .fence = fence, .ttl_ms = ttl_ms};
  op.response.status = status;
  op.response.headers = "Content-Type: text/plain\r\n";
  op.response.headers_len = strlen(op.response.headers);
  op.response.body = body;
  op.response.body_len = body ? strlen(body) : 0;
  idem_result res;
  int err = idem_sync_run(db, &op, &res);
  idem_result_clear(&res);
  return err;
}

static int complete(const char *scope, const char *key, uint64_t fence, const char *body) {
  return finish(IDEM_OP_COMPLETE, scope, key, fence, 201, body, TTL_LONG_MS);
}

static int get(const char *scope, const char *key, idem_result *res) {
  idem_op op = {.kind = IDEM_OP_GET, .scope = scope, .key = key};
  return idem_sync_run(db, &op, res);
}

/* Claim until the outcome is no longer BUSY (the lease ended), or fail. */
static void claim_after_lease(const char *scope, const char *key, const char *payload,
                              idem_result *res) {
  int64_t deadline = idem_now_ms() + WAIT_DEADLINE_MS;
  for (;;) {
    assert_int_equal(claim(scope, key, payload, TTL_LONG_MS, res), 0);
    if (res->outcome != IDEM_BUSY)
      return;
    assert_true(res->retry_after_ms > 0 && res->retry_after_ms <= TTL_LONG_MS);
    idem_result_clear(res);
    assert_true(idem_now_ms() < deadline);
    usleep(10 * 1000);
  }
}

static int claimed(idem_result *res, uint64_t fence) {
  int ok = res->err == 0 && res->outcome == IDEM_CLAIMED && res->fence == fence;
  if (!ok)
    print_error("expected claimed fence %llu, got err %d outcome %s fence %llu\n",
                (unsigned long long)fence, res->err, idem_outcome_name(res->outcome),
                (unsigned long long)res->fence);
  idem_result_clear(res);
  return ok;
}

/* ---- transitions -------------------------------------------------------- */

static void unseen_claim_gives_fence_one(void **state) {
  (void)state;
  idem_result res;
  assert_int_equal(claim("", unique_key("first"), "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
}

static void duplicate_while_processing_is_busy(void **state) {
  (void)state;
  const char *key = unique_key("busy");
  idem_result res;
  assert_int_equal(claim("", key, "a", 60000, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(claim("", key, "a", 60000, &res), 0);
  assert_int_equal(res.outcome, IDEM_BUSY);
  assert_int_equal(res.fence, 1);
  assert_true(res.retry_after_ms > 0 && res.retry_after_ms <= 60000);
  idem_result_clear(&res);
}

static void completed_replays_the_exact_response(void **state) {
  (void)state;
  const char *key = unique_key("replay");
  static const char body[] = "{\"id\":42}\0binary\xff tail";
  idem_result res;
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  idem_op op = {.kind = IDEM_OP_COMPLETE, .scope = "", .key = key, .fence = 1,
                .ttl_ms = TTL_LONG_MS,
                .response = {.status = 201, .headers = "X-A: 1\r\nX-B: two\r\n",
                             .headers_len = 18, .body = body, .body_len = sizeof body - 1}};
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  idem_result_clear(&res);

  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_int_equal(res.fence, 1);
  assert_non_null(res.record);
  assert_int_equal(res.record->state, IDEM_STATE_COMPLETED);
  assert_int_equal(res.record->response.status, 201);
  assert_int_equal(res.record->response.headers_len, 18);
  assert_memory_equal(res.record->response.headers, "X-A: 1\r\nX-B: two\r\n", 18);
  assert_int_equal(res.record->response.body_len, sizeof body - 1);
  assert_memory_equal(res.record->response.body, body, sizeof body - 1);
  idem_result_clear(&res);
}

static void replay_of_empty_response(void **state) {
  (void)state;
  const char *key = unique_key("empty");
  idem_result res;
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  idem_op op = {.kind = IDEM_OP_COMPLETE, .scope = "", .key = key, .fence = 1,
                .ttl_ms = TTL_LONG_MS, .response = {.status = 204}};
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  idem_result_clear(&res);
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_int_equal(res.record->response.status, 204);
  assert_int_equal(res.record->response.headers_len, 0);
  assert_int_equal(res.record->response.body_len, 0);
  idem_result_clear(&res);
}

static void large_response_round_trips(void **state) {
  (void)state;
  const char *key = unique_key("large");
  size_t n = 256 * 1024;
  char *body = malloc(n);
  assert_non_null(body);
  for (size_t i = 0; i < n; i++)
    body[i] = (char)(i * 7 + 3);
  idem_result res;
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  idem_op op = {.kind = IDEM_OP_COMPLETE, .scope = "", .key = key, .fence = 1,
                .ttl_ms = TTL_LONG_MS, .response = {.status = 200, .body = body, .body_len = n}};
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  idem_result_clear(&res);
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_int_equal(res.record->response.body_len, n);
  assert_memory_equal(res.record->response.body, body, n);
  idem_result_clear(&res);
  free(body);
}

static void other_fingerprint_is_a_mismatch_in_every_state(void **state) {
  (void)state;
  const char *key = unique_key("mismatch");
  idem_result res;
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(claim("", key, "b", TTL_LONG_MS, &res), 0); /* processing */
  assert_int_equal(res.outcome, IDEM_MISMATCH);
  idem_result_clear(&res);
  assert_int_equal(complete("", key, 1, "done"), 0);
  assert_int_equal(claim("", key, "b", TTL_LONG_MS, &res), 0); /* completed */
  assert_int_equal(res.outcome, IDEM_MISMATCH);
  idem_result_clear(&res);
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0); /* no state change */
  assert_int_equal(res.outcome, IDEM_REPLAY);
  idem_result_clear(&res);

  const char *failed = unique_key("mismatch-failed");
  assert_int_equal(claim("", failed, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(finish(IDEM_OP_FAIL, "", failed, 1, 500, "boom", TTL_LONG_MS), 0);
  assert_int_equal(claim("", failed, "b", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_MISMATCH);
  idem_result_clear(&res);
}

static void lease_over_is_taken_over_with_next_fence(void **state) {
  (void)state;
  const char *key = unique_key("takeover");
  idem_result res;
  assert_int_equal(claim("", key, "a", LEASE_SHORT_MS, &res), 0);
  assert_true(claimed(&res, 1));
  claim_after_lease("", key, "a", &res);
  assert_true(claimed(&res, 2));
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_BUSY); /* the new holder's lease is long */
  assert_int_equal(res.fence, 2);
  idem_result_clear(&res);
}

static void stale_fence_is_refused_after_takeover(void **state) {
  (void)state;
  const char *key = unique_key("zombie");
  idem_result res;
  assert_int_equal(claim("", key, "a", LEASE_SHORT_MS, &res), 0);
  assert_true(claimed(&res, 1));
  claim_after_lease("", key, "a", &res);
  assert_true(claimed(&res, 2));
  /* the zombie worker with fence 1 comes back: every ending is refused */
  assert_int_equal(complete("", key, 1, "zombie"), IDEM_ESTALE);
  assert_int_equal(finish(IDEM_OP_FAIL, "", key, 1, 500, "zombie", TTL_LONG_MS), IDEM_ESTALE);
  assert_int_equal(finish(IDEM_OP_RELEASE, "", key, 1, 0, NULL, TTL_LONG_MS), IDEM_ESTALE);
  assert_int_equal(complete("", key, 3, "future"), IDEM_ESTALE);
  assert_int_equal(complete("", key, 2, "winner"), 0);
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_int_equal(res.fence, 2);
  assert_int_equal(res.record->response.body_len, 6);
  assert_memory_equal(res.record->response.body, "winner", 6);
  idem_result_clear(&res);
}

static void lease_over_takeover_counts_up_repeatedly(void **state) {
  (void)state;
  const char *key = unique_key("takeover3");
  idem_result res;
  assert_int_equal(claim("", key, "a", LEASE_SHORT_MS, &res), 0);
  assert_true(claimed(&res, 1));
  for (uint64_t fence = 2; fence <= 3; fence++) {
    int64_t deadline = idem_now_ms() + WAIT_DEADLINE_MS;
    do {
      assert_int_equal(claim("", key, "a", LEASE_SHORT_MS, &res), 0);
      if (res.outcome == IDEM_BUSY) {
        idem_result_clear(&res);
        usleep(10 * 1000);
      }
    } while (res.outcome == IDEM_BUSY && idem_now_ms() < deadline);
    assert_true(claimed(&res, fence));
  }
}

/* A ttl shorter than the lease: the record must still be there when the
 * lease ends, so the takeover counts on (fence 2, not 1 again) and the
 * zombie's late complete is refused rather than taken for the new holder's.
 * A store may drop the record a lease after the lease ends (Redis does), so
 * the lease is long enough for a stalled test to take over within it. */
static void short_ttl_still_fences_a_takeover(void **state) {
  (void)state;
  const char *key = unique_key("short-ttl");
  idem_result res;
  idem_op op = claim_op("", key, "a", 1000);
  op.ttl_ms = 10;
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  assert_true(claimed(&res, 1));
  int64_t deadline = idem_now_ms() + WAIT_DEADLINE_MS;
  do {
    assert_int_equal(idem_sync_run(db, &op, &res), 0);
    if (res.outcome == IDEM_BUSY) {
      idem_result_clear(&res);
      usleep(5 * 1000);
    }
  } while (res.outcome == IDEM_BUSY && idem_now_ms() < deadline);
  assert_true(claimed(&res, 2));
  assert_int_equal(complete("", key, 1, "zombie"), IDEM_ESTALE);
  assert_int_equal(complete("", key, 2, "winner"), 0);
}

/* A worker that comes back after the record's retention finds it gone, on
 * every store alike (a Redis key has expired; memory and LMDB may still hold
 * it until a sweep): its complete is stale, and keeps nothing. */
static void ending_after_retention_is_stale(void **state) {
  (void)state;
  const char *key = unique_key("past-retention");
  idem_result res;
  idem_op op = claim_op("", key, "a", 20);
  op.ttl_ms = 10; /* retention: one lease past the lease, 40 ms */
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  assert_true(claimed(&res, 1));
  int64_t deadline = idem_now_ms() + WAIT_DEADLINE_MS;
  int err;
  while ((err = get("", key, &res)) == 0 && idem_now_ms() < deadline) {
    idem_result_clear(&res);
    usleep(10 * 1000);
  }
  assert_int_equal(err, IDEM_ENOTFOUND);
  assert_int_equal(complete("", key, 1, "late"), IDEM_ESTALE);
  assert_int_equal(finish(IDEM_OP_FAIL, "", key, 1, 500, "late", TTL_LONG_MS), IDEM_ESTALE);
  assert_int_equal(finish(IDEM_OP_RELEASE, "", key, 1, 0, NULL, TTL_LONG_MS), IDEM_ESTALE);
  assert_int_equal(get("", key, &res), IDEM_ENOTFOUND);
  assert_int_equal(claim("", key, "b", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED); /* unseen: no mismatch, no replay */
  idem_result_clear(&res);
}

static void ending_twice_or_unknown_is_stale(void **state) {
  (void)state;
  const char *key = unique_key("twice");
  idem_result res;
  assert_int_equal(complete("", unique_key("never-claimed"), 1, "x"), IDEM_ESTALE);
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(complete("", key, 1, "once"), 0);
  assert_int_equal(complete("", key, 1, "twice"), IDEM_ESTALE);
  assert_int_equal(finish(IDEM_OP_RELEASE, "", key, 1, 0, NULL, TTL_LONG_MS), IDEM_ESTALE);
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_memory_equal(res.record->response.body, "once", 4);
  idem_result_clear(&res);
}

static void release_makes_it_claimable_and_keeps_the_fence(void **state) {
  (void)state;
  const char *key = unique_key("release");
  idem_result res;
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(finish(IDEM_OP_RELEASE, "", key, 2, 0, NULL, TTL_LONG_MS), IDEM_ESTALE);
  assert_int_equal(finish(IDEM_OP_RELEASE, "", key, 1, 0, NULL, TTL_LONG_MS), 0);
  assert_int_equal(get("", key, &res), IDEM_ENOTFOUND); /* unseen again */
  idem_result_clear(&res);
  /* unseen: a different payload is a fresh start, not a mismatch */
  assert_int_equal(claim("", key, "b", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 2));
}

static void failed_is_taken_over_or_replayed_by_flag(void **state) {
  (void)state;
  const char *key = unique_key("failed");
  idem_result res;
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(finish(IDEM_OP_FAIL, "", key, 1, 402, "declined", TTL_LONG_MS), 0);
  assert_int_equal(get("", key, &res), 0);
  assert_int_equal(res.record->state, IDEM_STATE_FAILED);
  assert_int_equal(res.record->response.status, 402);
  idem_result_clear(&res);

  idem_op op = claim_op("", key, "a", TTL_LONG_MS);
  op.flags = IDEM_CLAIM_REPLAY_FAILED;
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_int_equal(res.record->state, IDEM_STATE_FAILED);
  assert_memory_equal(res.record->response.body, "declined", 8);
  idem_result_clear(&res);

  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 2));
}

static void retention_end_makes_the_key_unseen(void **state) {
  (void)state;
  const char *key = unique_key("expire");
  idem_result res;
  idem_op op = claim_op("", key, "a", 100);
  op.ttl_ms = 200;
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(finish(IDEM_OP_COMPLETE, "", key, 1, 200, "short", 200), 0);
  int64_t deadline = idem_now_ms() + WAIT_DEADLINE_MS;
  for (;;) {
    /* another payload: a mismatch while retained, a fresh claim once expired */
    assert_int_equal(claim("", key, "b", TTL_LONG_MS, &res), 0);
    if (res.outcome == IDEM_CLAIMED)
      break;
    assert_int_equal(res.outcome, IDEM_MISMATCH);
    idem_result_clear(&res);
    assert_true(idem_now_ms() < deadline);
    usleep(20 * 1000);
  }
  /* the fence keeps counting where the store still has the old record */
  assert_true(res.fence == 1 || res.fence == 2);
  idem_result_clear(&res);
}

static void get_shows_the_record(void **state) {
  (void)state;
  const char *key = unique_key("get");
  idem_result res;
  assert_int_equal(get("", key, &res), IDEM_ENOTFOUND);
  idem_result_clear(&res);
  int64_t before = idem_now_ms() - 2000; /* allow a server clock a little behind */
  assert_int_equal(claim("", key, "a", 60000, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(get("", key, &res), 0);
  assert_int_equal(res.record->state, IDEM_STATE_PROCESSING);
  assert_int_equal(res.record->fence, 1);
  assert_true(res.record->locked_until > res.record->created_at);
  idem_result_clear(&res);
  assert_int_equal(complete("", key, 1, "abc"), 0);
  assert_int_equal(get("", key, &res), 0);
  const idem_record *r = res.record;
  assert_string_equal(r->key, key);
  assert_string_equal(r->scope, "");
  assert_int_equal(r->state, IDEM_STATE_COMPLETED);
  assert_int_equal(r->response.status, 201);
  assert_int_equal(r->response.body_len, 3);
  assert_true(r->created_at >= before && r->updated_at >= r->created_at);
  assert_true(r->expires_at > r->updated_at);
  uint8_t fp[IDEM_FINGERPRINT_LEN];
  fingerprint_of("a", fp);
  assert_memory_equal(r->fingerprint, fp, IDEM_FINGERPRINT_LEN);
  idem_result_clear(&res);
}

static void delete_forgets_the_record(void **state) {
  (void)state;
  const char *key = unique_key("delete");
  idem_result res;
  idem_op del = {.kind = IDEM_OP_DELETE, .scope = "", .key = key};
  assert_int_equal(idem_sync_run(db, &del, &res), IDEM_ENOTFOUND);
  idem_result_clear(&res);
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(complete("", key, 1, "x"), 0);
  assert_int_equal(idem_sync_run(db, &del, &res), 0);
  assert_int_equal(res.count, 1);
  idem_result_clear(&res);
  assert_int_equal(get("", key, &res), IDEM_ENOTFOUND);
  idem_result_clear(&res);
  assert_int_equal(claim("", key, "b", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  idem_result_clear(&res);
}

static void scopes_are_isolated(void **state) {
  (void)state;
  const char *key = unique_key("scoped");
  char scope_a[80], scope_b[80];
  snprintf(scope_a, sizeof scope_a, "tenant-a-%s", run_id);
  snprintf(scope_b, sizeof scope_b, "tenant-b-%s", run_id);
  idem_result res;
  assert_int_equal(claim(scope_a, key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(claim(scope_b, key, "other", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1)); /* not a mismatch: another tenant's key */
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(complete(scope_a, key, 1, "for a"), 0);
  assert_int_equal(claim(scope_b, key, "other", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_BUSY); /* b's own record, still processing */
  idem_result_clear(&res);
  assert_int_equal(get(scope_b, key, &res), 0);
  assert_int_equal(res.record->state, IDEM_STATE_PROCESSING);
  assert_string_equal(res.record->scope, scope_b);
  idem_result_clear(&res);
  assert_int_equal(claim(scope_a, key, "a", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_memory_equal(res.record->response.body, "for a", 5);
  idem_result_clear(&res);
}

static void list_returns_the_scope_records(void **state) {
  (void)state;
  char scope[80];
  snprintf(scope, sizeof scope, "list-%s", run_id);
  const char *names[] = {"k1", "k2", "k3"};
  idem_result res;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(claim(scope, names[i], "a", TTL_LONG_MS, &res), 0);
    assert_true(claimed(&res, 1));
    assert_int_equal(complete(scope, names[i], 1, "v"), 0);
  }
  idem_op op = {.kind = IDEM_OP_LIST, .scope = scope, .limit = 100};
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  assert_int_equal(res.count, 3);
  int seen[3] = {0};
  for (size_t i = 0; i < res.count; i++) {
    assert_string_equal(res.records[i].scope, scope);
    for (int j = 0; j < 3; j++)
      seen[j] |= !strcmp(res.records[i].key, names[j]);
  }
  assert_true(seen[0] && seen[1] && seen[2]);
  idem_result_clear(&res);
  op.limit = 2;
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  assert_int_equal(res.count, 2);
  idem_result_clear(&res);
}

/* Every live record of a scope once, in key order, page by page: each page
 * resumes after the last key of the one before. The keys are claimed out of
 * order and are enough to spread over every shard of memory:. */
static void list_pages_in_key_order(void **state) {
  (void)state;
  enum { KEYS = 40, PAGE = 7 };
  char scope[80];
  snprintf(scope, sizeof scope, "page-%s", run_id);
  idem_result res;
  for (int i = 0; i < KEYS; i++) {
    char key[16];
    snprintf(key, sizeof key, "p%02d", (i * 17) % KEYS);
    assert_int_equal(claim(scope, key, "a", TTL_LONG_MS, &res), 0);
    assert_true(claimed(&res, 1));
  }
  char after[16] = "";
  int seen = 0;
  for (int pages = 0; pages <= KEYS / PAGE + 1; pages++) {
    idem_op op = {.kind = IDEM_OP_LIST, .scope = scope, .limit = PAGE,
                  .key = after[0] ? after : NULL};
    assert_int_equal(idem_sync_run(db, &op, &res), 0);
    for (size_t i = 0; i < res.count; i++) {
      char want[16];
      snprintf(want, sizeof want, "p%02d", seen++);
      assert_string_equal(res.records[i].key, want);
    }
    size_t count = res.count;
    if (count)
      snprintf(after, sizeof after, "%s", res.records[count - 1].key);
    idem_result_clear(&res);
    if (count < PAGE)
      break;
  }
  assert_int_equal(seen, KEYS);
}

static void gc_removes_expired_records(void **state) {
  (void)state;
  char scope[80];
  snprintf(scope, sizeof scope, "gc-%s", run_id);
  idem_result res;
  for (int i = 0; i < 5; i++) {
    char key[16];
    snprintf(key, sizeof key, "g%d", i);
    idem_op op = claim_op(scope, key, "a", 50);
    op.ttl_ms = 100;
    assert_int_equal(idem_sync_run(db, &op, &res), 0);
    assert_true(claimed(&res, 1));
  }
  assert_int_equal(claim(scope, "keep", "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  int64_t deadline = idem_now_ms() + WAIT_DEADLINE_MS;
  size_t live;
  do {
    idem_op gc = {.kind = IDEM_OP_GC, .limit = 1000};
    assert_int_equal(idem_sync_run(db, &gc, &res), 0);
    idem_result_clear(&res);
    idem_op list = {.kind = IDEM_OP_LIST, .scope = scope, .limit = 100};
    assert_int_equal(idem_sync_run(db, &list, &res), 0);
    live = res.count;
    idem_result_clear(&res);
    if (live > 1)
      usleep(20 * 1000);
  } while (live > 1 && idem_now_ms() < deadline);
  assert_int_equal(live, 1);
  assert_int_equal(get(scope, "keep", &res), 0);
  idem_result_clear(&res);
}

static void invalid_operations_are_refused(void **state) {
  (void)state;
  idem_result res;
  idem_op op = claim_op("", "ok", "a", 1000);
  op.key = "";
  assert_int_equal(idem_sync_run(db, &op, &res), IDEM_EKEY);
  op.key = "bad\x01key";
  assert_int_equal(idem_sync_run(db, &op, &res), IDEM_EKEY);
  char long_key[300];
  memset(long_key, 'k', 256);
  long_key[256] = '\0';
  op.key = long_key;
  assert_int_equal(idem_sync_run(db, &op, &res), IDEM_EKEY);
  long_key[255] = '\0'; /* 255 is the longest valid key */
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  idem_result_clear(&res);
  char long_scope[300];
  memset(long_scope, 's', 256);
  long_scope[256] = '\0';
  op.key = "ok";
  op.scope = long_scope;
  assert_int_equal(idem_sync_run(db, &op, &res), IDEM_ESCOPE);
  op.scope = "";
  op.lease_ms = 0;
  assert_int_equal(idem_sync_run(db, &op, &res), IDEM_EINVAL);
  idem_op fin = {.kind = IDEM_OP_COMPLETE, .key = "ok", .fence = 0, .ttl_ms = 1000};
  assert_int_equal(idem_sync_run(db, &fin, &res), IDEM_EINVAL);
  fin.fence = 1;
  fin.response.status = 42;
  assert_int_equal(idem_sync_run(db, &fin, &res), IDEM_EINVAL);
}

/* The most of an answer the store keeps, as the README (and idem.h) say:
 * 0 for the stores that keep IDEM_RESPONSE_PART_MAX of each part. */
static size_t documented_answer_max(void) {
  if (!strncmp(store_uri, "redis", 5))
    return (size_t)512 << 20;
  if (!strncmp(store_uri, "postgres", 8))
    return ((size_t)1 << 30) - ((size_t)1 << 20);
  return 0;
}

/* An answer larger than the store keeps is refused at submit with
 * IDEM_ETOOBIG, before a byte of it is read (the answer below is an
 * address only) or sent: a Redis drops the connection on an argument past
 * its proto-max-bulk-len. The claim stands, and a smaller answer ends it. */
static void answer_larger_than_the_store_keeps_is_refused(void **state) {
  (void)state;
  size_t max = documented_answer_max();
  if (!max)
    skip();
  const char *key = unique_key("too-big");
  idem_result res;
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  const char *nowhere = (const char *)(uintptr_t)0x10000;
  idem_op fin = {.kind = IDEM_OP_COMPLETE, .key = key, .fence = 1, .ttl_ms = TTL_LONG_MS};
  fin.response = (idem_response){.status = 200, .body = nowhere, .body_len = max + 1};
  assert_int_equal(idem_sync_run(db, &fin, &res), IDEM_ETOOBIG);
  fin.response = (idem_response){.status = 200, .headers = nowhere, .headers_len = max,
                                 .body = nowhere, .body_len = 1}; /* together */
  assert_int_equal(idem_sync_run(db, &fin, &res), IDEM_ETOOBIG);
  fin.kind = IDEM_OP_FAIL;
  assert_int_equal(idem_sync_run(db, &fin, &res), IDEM_ETOOBIG);
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_BUSY);
  idem_result_clear(&res);
  assert_int_equal(complete("", key, 1, "small"), 0);
  assert_int_equal(claim("", key, "a", TTL_LONG_MS, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  idem_result_clear(&res);
}

/* A caller who asks for "forever" (INT64_MAX) must never get a record that
 * has already expired: now + ttl overflowing to the past would make the key
 * unseen at once and let a duplicate run a second time. Either the store
 * refuses the duration, or it keeps the record. */
static void huge_durations_never_let_a_duplicate_run(void **state) {
  (void)state;
  const int64_t huge[] = {INT64_MAX, INT64_MAX / 2 + 1};
  for (size_t h = 0; h < sizeof huge / sizeof huge[0]; h++) {
    for (int which = 0; which < 2; which++) {
      char name[40];
      snprintf(name, sizeof name, "huge-%zu-%d", h, which);
      const char *key = unique_key(name);
      idem_op op = claim_op("", key, "a", 60000);
      if (which == 0)
        op.ttl_ms = huge[h];
      else
        op.lease_ms = huge[h];
      idem_result res;
      int err = idem_sync_run(db, &op, &res);
      if (err == IDEM_EINVAL)
        continue; /* refused up front: nothing ran */
      assert_int_equal(err, 0);
      assert_true(claimed(&res, 1));
      assert_int_equal(claim("", key, "a", 60000, &res), 0);
      assert_int_equal(res.outcome, IDEM_BUSY); /* not a second CLAIMED */
      idem_result_clear(&res);
    }
    /* complete with a huge retention: still replays */
    const char *key = unique_key(h ? "huge-complete-half" : "huge-complete");
    idem_result res;
    assert_int_equal(claim("", key, "a", 60000, &res), 0);
    assert_true(claimed(&res, 1));
    int err = finish(IDEM_OP_COMPLETE, "", key, 1, 200, "kept", huge[h]);
    if (err == IDEM_EINVAL) {
      assert_int_equal(complete("", key, 1, "kept"), 0);
    } else {
      assert_int_equal(err, 0);
    }
    assert_int_equal(claim("", key, "a", 60000, &res), 0);
    assert_int_equal(res.outcome, IDEM_REPLAY);
    idem_result_clear(&res);
  }
}

static void longest_scope_and_key_work(void **state) {
  (void)state;
  char scope[256], key[256];
  snprintf(scope, sizeof scope, "%s", run_id);
  memset(scope + strlen(scope), 's', 255 - strlen(scope));
  scope[255] = '\0';
  memset(key, 'k', 255);
  key[255] = '\0';
  idem_result res;
  assert_int_equal(claim(scope, key, "a", TTL_LONG_MS, &res), 0);
  assert_true(claimed(&res, 1));
  assert_int_equal(complete(scope, key, 1, "long"), 0);
  assert_int_equal(get(scope, key, &res), 0);
  assert_string_equal(res.record->scope, scope);
  assert_string_equal(res.record->key, key);
  idem_result_clear(&res);
}

/* ---- concurrency: many claims in flight at once ------------------------ */

typedef struct {
  int claimed, busy, other;
  uint64_t fence;
} tally;

static void count_outcome(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  tally *t = arg;
  if (res->err == 0 && res->outcome == IDEM_CLAIMED) {
    t->claimed++;
    t->fence = res->fence;
  } else if (res->err == 0 && res->outcome == IDEM_BUSY) {
    t->busy++;
  } else {
    t->other++;
  }
}

static void on_closed(idem_store *store, void *arg) {
  (void)store;
  *(int *)arg = 1;
}

typedef struct {
  const char *key;
  int n;
  tally t;
  pthread_barrier_t *start;
} claimer;

/* One loop, one store handle, n claims of one key submitted before any
 * completes. */
static void *claim_burst(void *arg) {
  claimer *c = arg;
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  char *msg = NULL;
  assert_int_equal(idem_store_open_cached(&loop, store_uri, cache_uri, &store, &msg), 0);
  idem_op op = claim_op("", c->key, "a", 60000);
  if (c->start)
    pthread_barrier_wait(c->start);
  for (int i = 0; i < c->n; i++)
    assert_int_equal(idem_store_submit(store, &op, count_outcome, &c->t), 0);
  while (c->t.claimed + c->t.busy + c->t.other < c->n)
    uv_run(&loop, UV_RUN_ONCE);
  close_store_and_loop(&loop, store);
  return NULL;
}

static void concurrent_claims_on_one_loop_give_one_claim(void **state) {
  (void)state;
  claimer c = {.key = unique_key("burst"), .n = 64};
  claim_burst(&c);
  assert_int_equal(c.t.claimed, 1);
  assert_int_equal(c.t.busy, 63);
  assert_int_equal(c.t.other, 0);
  assert_int_equal(c.t.fence, 1);
}

static void concurrent_claims_from_threads_give_one_claim(void **state) {
  (void)state;
  enum { THREADS = 4, PER_THREAD = 32 };
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, THREADS);
  claimer c[THREADS];
  pthread_t th[THREADS];
  const char *key = unique_key("threads");
  for (int i = 0; i < THREADS; i++) {
    c[i] = (claimer){.key = key, .n = PER_THREAD, .start = &start};
    pthread_create(&th[i], NULL, claim_burst, &c[i]);
  }
  int claimed = 0, busy = 0, other = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    claimed += c[i].t.claimed;
    busy += c[i].t.busy;
    other += c[i].t.other;
  }
  pthread_barrier_destroy(&start);
  assert_int_equal(claimed, 1);
  assert_int_equal(busy, THREADS * PER_THREAD - 1);
  assert_int_equal(other, 0);
}

typedef struct {
  int done, failed;
} counter;

static void count_done(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  counter *c = arg;
  c->done++;
  if (res->err || (res->outcome && res->outcome != IDEM_CLAIMED))
    c->failed++;
}

static void many_keys_in_flight_all_claim_and_complete(void **state) {
  (void)state;
  enum { N = 200 };
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  assert_int_equal(idem_store_open_cached(&loop, store_uri, cache_uri, &store, NULL), 0);
  char keys[N][64];
  counter claims = {0}, completes = {0};
  for (int i = 0; i < N; i++) {
    snprintf(keys[i], sizeof keys[i], "%.40s-many-%d", run_id, i);
    idem_op op = claim_op("", keys[i], "a", 60000);
    assert_int_equal(idem_store_submit(store, &op, count_done, &claims), 0);
  }
  while (claims.done < N)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(claims.failed, 0);
  for (int i = 0; i < N; i++) {
    idem_op op = {.kind = IDEM_OP_COMPLETE, .scope = "", .key = keys[i], .fence = 1,
                  .ttl_ms = TTL_LONG_MS, .response = {.status = 200, .body = keys[i],
                                                      .body_len = strlen(keys[i])}};
    assert_int_equal(idem_store_submit(store, &op, count_done, &completes), 0);
  }
  /* close with the completions still in flight: each still gets its callback */
  int closed = 0;
  idem_store_close(store, on_closed, &closed);
  idem_op late = claim_op("", keys[0], "a", 1000);
  assert_int_equal(idem_store_submit(store, &late, count_done, &claims), IDEM_ECLOSED);
  while (!closed)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(completes.done, N);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  idem_result res;
  for (int i = 0; i < N; i += 37) {
    if (completes.failed == 0) {
      assert_int_equal(claim("", keys[i], "a", TTL_LONG_MS, &res), 0);
      assert_int_equal(res.outcome, IDEM_REPLAY);
      assert_memory_equal(res.record->response.body, keys[i], strlen(keys[i]));
      idem_result_clear(&res);
    }
  }
  /* a close may fail what it cannot finish, but never loses an acknowledged one */
  assert_int_equal(completes.failed, 0);
}

/* A close lets every claim already submitted finish, those that wait on a
 * shared cache's lookup too (they go on to the store after it). */
static void claims_in_flight_at_close_are_answered(void **state) {
  (void)state;
  enum { N = 50 };
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  assert_int_equal(idem_store_open_cached(&loop, store_uri, cache_uri, &store, NULL), 0);
  char keys[N][64];
  counter claims = {0};
  for (int i = 0; i < N; i++) {
    snprintf(keys[i], sizeof keys[i], "%.40s-closing-%d", run_id, i);
    idem_op op = claim_op("", keys[i], "a", 60000);
    assert_int_equal(idem_store_submit(store, &op, count_done, &claims), 0);
  }
  int closed = 0;
  idem_store_close(store, on_closed, &closed);
  while (!closed)
    uv_run(&loop, UV_RUN_ONCE);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  assert_int_equal(claims.done, N);
  assert_int_equal(claims.failed, 0);
}

/* ---- main -------------------------------------------------------------- */

static int open_db(void **state) {
  (void)state;
  char *msg = NULL;
  int err = idem_sync_open_cached(store_uri, cache_uri, &db, &msg);
  if (err) {
    print_error("cannot open %s: %s (%s)\n", store_uri, idem_strerror(err), msg ? msg : "");
    free(msg);
    return -1;
  }
  return 0;
}

static int close_db(void **state) {
  (void)state;
  idem_sync_close(db);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: contract STORE_URI [CACHE_URI]\n");
    return 2;
  }
  store_uri = argv[1];
  cache_uri = argc == 3 ? argv[2] : NULL;
  make_run_id(run_id, sizeof run_id, 'c');
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(unseen_claim_gives_fence_one),
      cmocka_unit_test(duplicate_while_processing_is_busy),
      cmocka_unit_test(completed_replays_the_exact_response),
      cmocka_unit_test(replay_of_empty_response),
      cmocka_unit_test(large_response_round_trips),
      cmocka_unit_test(other_fingerprint_is_a_mismatch_in_every_state),
      cmocka_unit_test(lease_over_is_taken_over_with_next_fence),
      cmocka_unit_test(stale_fence_is_refused_after_takeover),
      cmocka_unit_test(lease_over_takeover_counts_up_repeatedly),
      cmocka_unit_test(short_ttl_still_fences_a_takeover),
      cmocka_unit_test(ending_twice_or_unknown_is_stale),
      cmocka_unit_test(ending_after_retention_is_stale),
      cmocka_unit_test(release_makes_it_claimable_and_keeps_the_fence),
      cmocka_unit_test(failed_is_taken_over_or_replayed_by_flag),
      cmocka_unit_test(retention_end_makes_the_key_unseen),
      cmocka_unit_test(get_shows_the_record),
      cmocka_unit_test(delete_forgets_the_record),
      cmocka_unit_test(scopes_are_isolated),
      cmocka_unit_test(list_returns_the_scope_records),
      cmocka_unit_test(list_pages_in_key_order),
      cmocka_unit_test(gc_removes_expired_records),
      cmocka_unit_test(invalid_operations_are_refused),
      cmocka_unit_test(huge_durations_never_let_a_duplicate_run),
      cmocka_unit_test(answer_larger_than_the_store_keeps_is_refused),
      cmocka_unit_test(longest_scope_and_key_work),
      cmocka_unit_test(concurrent_claims_on_one_loop_give_one_claim),
      cmocka_unit_test(concurrent_claims_from_threads_give_one_claim),
      cmocka_unit_test(many_keys_in_flight_all_claim_and_complete),
      cmocka_unit_test(claims_in_flight_at_close_are_answered),
  };
  char name[256];
  snprintf(name, sizeof name, "contract %s%s%s", store_uri, cache_uri ? " cache " : "",
           cache_uri ? cache_uri : "");
  return cmocka_run_group_tests_name(name, tests, open_db, close_db);
}

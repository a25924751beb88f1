/* test_spool.c - the gateway's spool (src/http/spool.c): entries kept,
 * found for replays, drained into a store under their fence, and kept
 * apart per store. A memory: store stands for the store of record. */
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
#include "http/metrics.c"
#include "http/msg.c"
#include "http/policy.c"
#include "http/spool.c"

typedef struct {
  char dir[64];
  char uri[64];
  uv_loop_t loop;
  idem_store *store;
  gw_spool *sp;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/idem-spool-test-XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  assert_int_equal(uv_loop_init(&f->loop), 0);
  static int n;
  snprintf(f->uri, sizeof f->uri, "memory:spool-%d-%d", getpid(), n++);
  assert_int_equal(idem_store_open(&f->loop, f->uri, &f->store, NULL), 0);
  char err[256];
  if (gw_spool_open(f->dir, f->uri, &f->sp, err, sizeof err))
    fail_msg("%s", err);
  *state = f;
  return 0;
}

static void on_store_closed(idem_store *st, void *arg) {
  (void)st;
  (void)arg;
}

static int teardown(void **state) {
  fixture *f = *state;
  gw_spool_close(f->sp);
  idem_store_close(f->store, on_store_closed, NULL);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  uv_loop_close(&f->loop);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
  assert_int_equal(system(cmd), 0);
  free(f);
  return 0;
}

/* ---- helpers: run an operation to its callback ---- */

#define PENDING 42 /* no IDEM_E* code */

/* The store's handle keeps the loop alive: turn it until *flag moves. */
static void run_until(fixture *f, const volatile int *flag) {
  while (*flag == PENDING)
    uv_run(&f->loop, UV_RUN_ONCE);
}

static void on_put(void *arg, int err) { *(int *)arg = err; }

static int put(fixture *f, idem_op_kind kind, const char *key, uint64_t fence, const char *body,
               uint8_t fp_byte) {
  idem_op op = {.kind = kind, .scope = "s", .key = key, .fence = fence, .ttl_ms = 60000};
  op.response.status = 201;
  op.response.headers = "X-A: 1\r\n";
  op.response.headers_len = 8;
  op.response.body = body;
  op.response.body_len = strlen(body);
  uint8_t fp[IDEM_FINGERPRINT_LEN];
  memset(fp, fp_byte, sizeof fp);
  int err = PENDING;
  assert_int_equal(gw_spool_put(f->sp, &f->loop, &op, fp, on_put, &err), 0);
  run_until(f, &err);
  return err;
}

static void on_result(idem_store *st, const idem_result *res, void *arg) {
  (void)st;
  assert_int_equal(idem_result_copy(arg, res), 0);
}

static idem_result run(fixture *f, idem_op op) {
  idem_result res = {0};
  res.err = PENDING;
  op.scope = "s";
  assert_int_equal(idem_store_submit(f->store, &op, on_result, &res), 0);
  run_until(f, &res.err);
  return res;
}

static uint64_t claim(fixture *f, const char *key) {
  idem_result res = run(f, (idem_op){.kind = IDEM_OP_CLAIM, .key = key, .lease_ms = 60000,
                                     .ttl_ms = 60000});
  assert_int_equal(res.err, 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  uint64_t fence = res.fence;
  idem_result_clear(&res);
  return fence;
}

static void on_round(void *arg, size_t failed) { *(int *)arg = (int)failed; }

static int drain(fixture *f, idem_store *store) {
  int failed = PENDING;
  gw_spool_drain(f->sp, &f->loop, store, on_round, &failed);
  run_until(f, &failed);
  return failed;
}

/* ---- tests ---- */

static void test_put_then_find(void **state) {
  fixture *f = *state;
  idem_record rec;
  assert_int_equal(gw_spool_find(f->sp, "s", "k", &rec), 0);
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "k", 3, "hello", 0xab), 0);
  assert_int_equal(gw_spool_depth(f->sp), 1);
  assert_int_equal(gw_metrics_spool_depth_get(), 1);
  assert_int_equal(gw_spool_find(f->sp, "s", "k", &rec), 1);
  assert_int_equal(rec.fence, 3);
  assert_int_equal(rec.response.status, 201);
  assert_memory_equal(rec.response.body, "hello", 5);
  assert_memory_equal(rec.response.headers, "X-A: 1\r\n", 8);
  assert_int_equal(rec.fingerprint[0], 0xab);
  idem_record_clear(&rec);
  /* another scope, another key: not found */
  assert_int_equal(gw_spool_find(f->sp, "", "k", &rec), 0);
  assert_int_equal(gw_spool_find(f->sp, "s", "k2", &rec), 0);
}

static void test_release_is_not_replayed(void **state) {
  fixture *f = *state;
  idem_record rec;
  assert_int_equal(put(f, IDEM_OP_RELEASE, "r", 1, "", 0), 0);
  assert_int_equal(gw_spool_depth(f->sp), 1);
  assert_int_equal(gw_spool_find(f->sp, "s", "r", &rec), 0);
}

static void test_drain_completes_and_releases(void **state) {
  fixture *f = *state;
  uint64_t fc = claim(f, "c"), fr = claim(f, "r");
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "c", fc, "kept", 1), 0);
  assert_int_equal(put(f, IDEM_OP_RELEASE, "r", fr, "", 0), 0);
  assert_int_equal(gw_spool_depth(f->sp), 2);
  assert_int_equal(drain(f, f->store), 0);
  assert_int_equal(gw_spool_depth(f->sp), 0);
  /* the store now replays c, and r runs again under a higher fence */
  idem_result res = run(f, (idem_op){.kind = IDEM_OP_CLAIM, .key = "c", .lease_ms = 1000,
                                     .ttl_ms = 1000});
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_memory_equal(res.record->response.body, "kept", 4);
  idem_result_clear(&res);
  assert_int_equal(claim(f, "r"), fr + 1);
}

static void test_stale_entry_is_dropped(void **state) {
  fixture *f = *state;
  uint64_t fence = claim(f, "k");
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "k", fence + 7, "late", 1), 0);
  assert_int_equal(drain(f, f->store), 0); /* refused as stale, dropped */
  assert_int_equal(gw_spool_depth(f->sp), 0);
  idem_result res = run(f, (idem_op){.kind = IDEM_OP_GET, .key = "k"});
  assert_int_equal(res.record->state, IDEM_STATE_PROCESSING);
  idem_result_clear(&res);
}

/* The store stayed away past the record's retention: the record is gone and
 * the complete is stale, but the key is free, so the answer is kept under a
 * new claim instead of dropped (a retry would run the request again). */
static void test_answer_outliving_its_record_is_kept(void **state) {
  fixture *f = *state;
  idem_result res = run(f, (idem_op){.kind = IDEM_OP_CLAIM, .key = "k", .lease_ms = 20,
                                     .ttl_ms = 10});
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  uint64_t fence = res.fence;
  idem_result_clear(&res);
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "k", fence, "kept", 0), 0);
  for (int i = 0; i < 1000; i++) { /* its retention: one lease past the lease */
    res = run(f, (idem_op){.kind = IDEM_OP_GET, .key = "k"});
    int gone = res.err == IDEM_ENOTFOUND;
    idem_result_clear(&res);
    if (gone)
      break;
    usleep(10 * 1000);
  }
  assert_int_equal(drain(f, f->store), 0);
  assert_int_equal(gw_spool_depth(f->sp), 0);
  res = run(f, (idem_op){.kind = IDEM_OP_GET, .key = "k"});
  assert_int_equal(res.err, 0);
  assert_int_equal(res.record->state, IDEM_STATE_COMPLETED);
  /* a new claim: the next fence over the expired record, or 1 again if
   * the memory store's sweep had deleted it (a record gone starts over) */
  assert_true(res.fence == fence + 1 || res.fence == 1);
  assert_int_equal(res.record->response.body_len, 4);
  assert_memory_equal(res.record->response.body, "kept", 4);
  idem_result_clear(&res);
}

static void test_no_store_keeps_entries(void **state) {
  fixture *f = *state;
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "k", 1, "x", 1), 0);
  assert_int_equal(drain(f, NULL), 1);
  assert_int_equal(gw_spool_depth(f->sp), 1);
}

/* Rounds that drain nothing (every entry failing, say a store timeout too
 * short for the answers) still move on: each takes the entries after the
 * last one the round before took, then wraps to the first, so more than a
 * round's worth of failing entries holds back none behind them. */
static void test_rounds_rotate_past_entries_that_fail(void **state) {
  fixture *f = *state;
  char key[16];
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "k%03d", i);
    assert_int_equal(put(f, IDEM_OP_COMPLETE, key, 1, "x", 1), 0);
  }
  static const struct {
    int first, n;
  } rounds[] = {{0, 64}, {64, 64}, {28, 64}, {92, 64}};
  for (size_t r = 0; r < sizeof rounds / sizeof rounds[0]; r++) {
    drain_item *items[DRAIN_BATCH];
    size_t n = take_batch(f->sp, items); /* nothing removed: as if every one failed */
    assert_int_equal(n, rounds[r].n);
    for (size_t i = 0; i < n; i++) {
      snprintf(key, sizeof key, "k%03d", (int)(rounds[r].first + i) % 100);
      if (strcmp(items[i]->name, key))
        fail_msg("round %zu, item %zu: %s, not %s", r, i, items[i]->name, key);
      free(items[i]->val);
      free(items[i]);
    }
  }
}

static void test_newer_put_replaces(void **state) {
  fixture *f = *state;
  idem_record rec;
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "k", 1, "one", 1), 0);
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "k", 2, "two", 2), 0);
  assert_int_equal(gw_spool_depth(f->sp), 1);
  assert_int_equal(gw_spool_find(f->sp, "s", "k", &rec), 1);
  assert_int_equal(rec.fence, 2);
  idem_record_clear(&rec);
}

/* A remove under the fence it drained must leave a newer entry alone. */
static void test_remove_only_same_fence(void **state) {
  fixture *f = *state;
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "k", 2, "two", 2), 0);
  spool_write *w = calloc(1, sizeof *w);
  w->key_len = entry_key(f->sp, "s", "k", w->key);
  w->fence = 1;
  int err = PENDING;
  w->cb = on_put;
  w->arg = &err;
  assert_int_equal(queue_write(f->sp, &f->loop, w), 0);
  run_until(f, &err);
  assert_int_equal(err, 0);
  assert_int_equal(gw_spool_depth(f->sp), 1);
}

/* Entries survive a close and open, and belong to their store's URI. */
static void test_reopen_and_other_store(void **state) {
  fixture *f = *state;
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "k", 1, "x", 1), 0);
  gw_spool_close(f->sp);
  char err[256];
  gw_spool *other;
  assert_int_equal(gw_spool_open(f->dir, "redis://127.0.0.1:1", &other, err, sizeof err), 0);
  idem_record rec;
  assert_int_equal(gw_spool_depth(other), 0);
  assert_int_equal(gw_spool_find(other, "s", "k", &rec), 0);
  gw_spool_close(other);
  assert_int_equal(gw_spool_open(f->dir, f->uri, &f->sp, err, sizeof err), 0);
  assert_int_equal(gw_spool_depth(f->sp), 1);
}

/* The identity ignores credentials and the options that do not choose the
 * records: a restart with a larger map_size or another pool= drains what the
 * last run spooled; another database or prefix does not. */
static void test_store_identity(void **state) {
  (void)state;
  char a[4200], b[4200];
  idem_store_identity("redis://user:secret@cache:6380/2?timeout=5s", a, sizeof a);
  assert_string_equal(a, "redis://cache:6380/2");
  idem_store_identity("postgres://idem@db:5432/app?pool=4&batch=8", a, sizeof a);
  assert_string_equal(a, "postgres://db:5432/app");
  idem_store_identity("postgres://db:5432/app", b, sizeof b);
  assert_string_equal(a, b);
  idem_store_identity("postgres://db2:5432/app", b, sizeof b);
  assert_string_not_equal(a, b);
  /* the options that choose the records are kept, in their order */
  idem_store_identity("postgres://idem@db?dbname=app&pool=4&port=5433&password=x", a, sizeof a);
  assert_string_equal(a, "postgres://db?dbname=app&port=5433");
  idem_store_identity("postgres://idem@db?dbname=app2&port=5433", b, sizeof b);
  assert_string_not_equal(a, b);
  idem_store_identity("postgres:///app?host=/run/pg&options=-csearch_path%3Dx", a, sizeof a);
  assert_string_equal(a, "postgres:///app?host=/run/pg&options=-csearch_path%3Dx");
  idem_store_identity("redis://cache:6380/2?timeout=5s&prefix=tenant-a", a, sizeof a);
  idem_store_identity("redis://cache:6380/2?prefix=tenant-b", b, sizeof b);
  assert_string_equal(a, "redis://cache:6380/2?prefix=tenant-a");
  assert_string_not_equal(a, b);
  idem_store_identity("redis://cache:6380/2?prefixes=x&xprefix=y&prefix", a, sizeof a);
  assert_string_equal(a, "redis://cache:6380/2");
  idem_store_identity("lmdb:/tmp/../tmp?map_size=2MiB", a, sizeof a);
  idem_store_identity("lmdb:/tmp?map_size=64MiB", b, sizeof b);
  assert_string_equal(a, b);
  assert_string_equal(a, "lmdb:/tmp");
  idem_store_identity("memory:x", a, sizeof a);
  assert_string_equal(a, "memory:x");
  /* spellings of one store are one: the README says so, and an answer
   * spooled under one and stranded under the other ran again */
  idem_store_identity("postgresql://idem@db:5432/app?pool=2", a, sizeof a);
  idem_store_identity("postgres://db:5432/app", b, sizeof b);
  assert_string_equal(a, b);
#if IDEM_WITH_REDIS /* read by the Redis URI parser */
  static const char *const one_redis[] = {"redis://cache", "redis://Cache:6379",
                                          "redis://u:p@cache:6379/", "redis://cache/0",
                                          "redis://cache:6379/0?prefix=idem&timeout=1s"};
  for (size_t i = 0; i < sizeof one_redis / sizeof one_redis[0]; i++) {
    idem_store_identity(one_redis[i], a, sizeof a);
    assert_string_equal(a, "redis://cache:6379/0");
  }
  idem_store_identity("redis://cache/1", b, sizeof b);
  assert_string_not_equal(a, b);
  idem_store_identity("redis://[::1]/3?prefix=t", a, sizeof a);
  assert_string_equal(a, "redis://[::1]:6379/3?prefix=t");
#endif
}

/* Entries a gateway from before store_identity spooled under the URI as
 * written are adopted by the next start on that URI, and then found by
 * its other spellings too. */
static void test_entries_under_the_written_form_are_adopted(void **state) {
  fixture *f = *state;
  char err[256], id[4200];
  const char *uri = "postgresql://db/app"; /* its written form is not its identity */
  gw_spool_close(f->sp);
  assert_int_equal(gw_spool_open(f->dir, uri, &f->sp, err, sizeof err), 0);
  idem_store_written_identity(uri, id, sizeof id);
  assert_int_equal(store_id_of(id, f->sp->store_id), 0); /* as an old gateway wrote */
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "k", 1, "kept", 1), 0);
  gw_spool_close(f->sp);
  assert_int_equal(gw_spool_open(f->dir, uri, &f->sp, err, sizeof err), 0);
  assert_int_equal(gw_spool_depth(f->sp), 1);
  gw_spool_close(f->sp);
  assert_int_equal(gw_spool_open(f->dir, "postgres://db/app", &f->sp, err, sizeof err), 0);
  assert_int_equal(gw_spool_depth(f->sp), 1);
  idem_record rec;
  assert_int_equal(gw_spool_find(f->sp, "s", "k", &rec), 1);
  assert_int_equal(rec.response.body_len, 4);
  idem_record_clear(&rec);
}

/* Entries written before a restart with other options drain after it. */
static void test_other_options_same_store(void **state) {
  fixture *f = *state;
  assert_int_equal(put(f, IDEM_OP_COMPLETE, "k", 1, "x", 1), 0);
  gw_spool_close(f->sp);
  char err[256], uri[80];
  snprintf(uri, sizeof uri, "%s?pool=9", f->uri);
  assert_int_equal(gw_spool_open(f->dir, uri, &f->sp, err, sizeof err), 0);
  assert_int_equal(gw_spool_depth(f->sp), 1);
}

static void test_open_refuses_a_file(void **state) {
  (void)state;
  gw_spool *sp;
  char err[256];
  assert_int_equal(gw_spool_open("/dev/null/x", "memory:", &sp, err, sizeof err), -1);
  assert_non_null(strstr(err, "/dev/null/x"));
}

/* The decoder refuses what a put never writes: short, unknown kind or version. */
static void test_entry_decode_refuses_garbage(void **state) {
  (void)state;
  spool_entry e;
  unsigned char bad[ENTRY_HEAD + 3] = {ENTRY_VERSION, IDEM_OP_COMPLETE};
  assert_int_equal(entry_decode(bad, sizeof bad, &e), IDEM_ECORRUPT);
  bad[1] = 77;
  assert_int_equal(entry_decode(bad, ENTRY_HEAD, &e), IDEM_ECORRUPT);
  bad[0] = 9;
  assert_int_equal(entry_decode(bad, ENTRY_HEAD, &e), IDEM_ECORRUPT);
}

UNIT_TESTS(cmocka_unit_test_setup_teardown(test_put_then_find, setup, teardown),
           cmocka_unit_test_setup_teardown(test_release_is_not_replayed, setup, teardown),
           cmocka_unit_test_setup_teardown(test_drain_completes_and_releases, setup, teardown),
           cmocka_unit_test_setup_teardown(test_stale_entry_is_dropped, setup, teardown),
           cmocka_unit_test_setup_teardown(test_answer_outliving_its_record_is_kept, setup,
                                           teardown),
           cmocka_unit_test_setup_teardown(test_no_store_keeps_entries, setup, teardown),
           cmocka_unit_test_setup_teardown(test_rounds_rotate_past_entries_that_fail, setup,
                                           teardown),
           cmocka_unit_test_setup_teardown(test_newer_put_replaces, setup, teardown),
           cmocka_unit_test_setup_teardown(test_remove_only_same_fence, setup, teardown),
           cmocka_unit_test_setup_teardown(test_reopen_and_other_store, setup, teardown),
           cmocka_unit_test_setup_teardown(test_open_refuses_a_file, setup, teardown),
           cmocka_unit_test(test_store_identity),
           cmocka_unit_test_setup_teardown(test_entries_under_the_written_form_are_adopted, setup,
                                           teardown),
           cmocka_unit_test_setup_teardown(test_other_options_same_store, setup, teardown),
           cmocka_unit_test_setup_teardown(test_entry_decode_refuses_garbage, setup, teardown))

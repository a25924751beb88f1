/* test_store_delivery.c - when a store's callbacks run (store.c): never
 * inside the submit; at the end of the same loop iteration for a req the
 * backend finished inside submit (memory:, an LMDB replay read); and a submit
 * made before the poll (from a timer) is not left behind a blocking poll. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <uv.h>


#include "idem/idem.h"

typedef struct {
  uv_loop_t loop;
  idem_store *store;
  uv_async_t kick;
  uv_timer_t timer, guard;
  int in_submit, called_inside, calls, closed, guard_fired;
  idem_outcome outcome;
  const char *key;
} fixture;

static char lmdb_dir[64];

static void on_result(idem_store *store, const idem_result *res, void *arg) {
  fixture *f = arg;
  (void)store;
  assert_int_equal(res->err, 0);
  f->called_inside |= f->in_submit;
  f->outcome = res->outcome;
  f->calls++;
}

static void submit_claim(fixture *f) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = "", .key = f->key, .lease_ms = 60000,
                .ttl_ms = 3600000};
  f->in_submit = 1;
  assert_int_equal(idem_store_submit(f->store, &op, on_result, f), 0);
  f->in_submit = 0;
}

static void on_kick(uv_async_t *a) { submit_claim(a->data); }
static void on_timer(uv_timer_t *t) { submit_claim(t->data); }

static void on_guard(uv_timer_t *t) {
  fixture *f = t->data;
  f->guard_fired = 1;
}

static void on_closed(idem_store *store, void *arg) {
  (void)store;
  *(int *)arg = 1;
}

static void on_handle_closed(uv_handle_t *h) { (void)h; }

static void open_fixture(fixture *f, const char *uri, const char *key) {
  memset(f, 0, sizeof *f);
  f->key = key;
  assert_int_equal(uv_loop_init(&f->loop), 0);
  char *msg = NULL;
  assert_int_equal(idem_store_open(&f->loop, uri, &f->store, &msg), 0);
  uv_async_init(&f->loop, &f->kick, on_kick);
  uv_timer_init(&f->loop, &f->timer);
  uv_timer_init(&f->loop, &f->guard);
  f->kick.data = f->timer.data = f->guard.data = f;
}

static void close_fixture(fixture *f) {
  idem_store_close(f->store, on_closed, &f->closed);
  uv_close((uv_handle_t *)&f->kick, on_handle_closed);
  uv_close((uv_handle_t *)&f->timer, on_handle_closed);
  uv_close((uv_handle_t *)&f->guard, on_handle_closed);
  while (!f->closed)
    uv_run(&f->loop, UV_RUN_ONCE);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&f->loop), 0);
}

/* A submit from an I/O callback (the poll phase: a request read from a
 * socket) is answered within the same uv_run(UV_RUN_NOWAIT): one iteration. */
static void expect_same_iteration(const char *uri, const char *key, idem_outcome want) {
  fixture f;
  open_fixture(&f, uri, key);
  uv_async_send(&f.kick);
  uv_run(&f.loop, UV_RUN_NOWAIT);
  assert_int_equal(f.calls, 1);
  assert_int_equal(f.outcome, want);
  assert_false(f.called_inside);
  close_fixture(&f);
}

static void test_memory_claim_in_the_same_iteration(void **state) {
  (void)state;
  expect_same_iteration("memory:delivery", "same-iteration", IDEM_CLAIMED);
}

/* LMDB: a replay is read on the loop; a first claim goes to the writer
 * thread and comes back through the async. */
static void test_lmdb_replay_in_the_same_iteration(void **state) {
  (void)state;
  char uri[128];
  snprintf(uri, sizeof uri, "lmdb:%s", lmdb_dir);
  idem_sync *db;
  assert_int_equal(idem_sync_open(uri, &db, NULL), 0);
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = "", .key = "lmdb-replay", .lease_ms = 60000,
                .ttl_ms = 3600000};
  idem_result res;
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  idem_result_clear(&res);
  idem_op done = {.kind = IDEM_OP_COMPLETE, .scope = "", .key = "lmdb-replay", .fence = 1,
                  .ttl_ms = 3600000, .response = {.status = 200, .body = "ok", .body_len = 2}};
  assert_int_equal(idem_sync_run(db, &done, &res), 0);
  idem_result_clear(&res);
  idem_sync_close(db);
  expect_same_iteration(uri, "lmdb-replay", IDEM_REPLAY);
}

/* A submit from a timer runs before the poll: the store's async must still
 * wake that poll, or UV_RUN_ONCE would block until the guard timer. */
static void test_submit_before_the_poll_is_not_left_waiting(void **state) {
  (void)state;
  fixture f;
  open_fixture(&f, "memory:delivery", "from-a-timer");
  uv_timer_start(&f.timer, on_timer, 0, 0);
  uv_timer_start(&f.guard, on_guard, 2000, 0);
  while (f.calls == 0 && !f.guard_fired)
    uv_run(&f.loop, UV_RUN_ONCE);
  assert_int_equal(f.calls, 1);
  assert_false(f.guard_fired);
  assert_false(f.called_inside);
  close_fixture(&f);
}

/* Closing the store right after a submit that finished inside it: the
 * callback still comes, once, and both of the store's handles close. */
static void test_close_with_a_delivery_pending(void **state) {
  (void)state;
  fixture f;
  open_fixture(&f, "memory:delivery", "close-pending");
  submit_claim(&f);
  assert_int_equal(f.calls, 0);
  close_fixture(&f);
  assert_int_equal(f.calls, 1);
  assert_false(f.called_inside);
}

static int make_dir(void **state) {
  (void)state;
  snprintf(lmdb_dir, sizeof lmdb_dir, "/tmp/idem-delivery-XXXXXX");
  return mkdtemp(lmdb_dir) ? 0 : -1;
}

static int remove_dir(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", lmdb_dir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memory_claim_in_the_same_iteration),
      cmocka_unit_test(test_lmdb_replay_in_the_same_iteration),
      cmocka_unit_test(test_submit_before_the_poll_is_not_left_waiting),
      cmocka_unit_test(test_close_with_a_delivery_pending),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}

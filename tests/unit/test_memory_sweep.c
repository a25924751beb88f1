/* test_memory_sweep.c - the memory: store deletes records past their
 * retention as it goes, so a long-running process on fresh keys holds what
 * its retention implies, not every key it ever saw. Counted, not timed: gc
 * finds nothing left to delete once enough transitions have run. */
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

#include "idem/idem.h"

#define OLD 1000

static void claim_ok(idem_sync *db, const char *key, int64_t ms) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = "", .key = key, .lease_ms = ms, .ttl_ms = ms};
  assert_int_equal(idem_fingerprint("POST", "/sweep", "a", 1, 0, op.fingerprint), 0);
  idem_result res;
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  idem_result_clear(&res);
}

static size_t run_count(idem_sync *db, idem_op_kind kind) {
  idem_op op = {.kind = kind, .limit = 100000};
  idem_result res;
  assert_int_equal(idem_sync_run(db, &op, &res), 0);
  size_t n = res.count;
  idem_result_clear(&res);
  return n;
}

static void expired_records_are_swept_by_later_transitions(void **state) {
  (void)state;
  idem_sync *db = NULL;
  assert_int_equal(idem_sync_open("memory:sweep", &db, NULL), 0);
  char key[32];
  for (int i = 0; i < OLD; i++) { /* kept one lease past a 1 ms lease: 2 ms */
    snprintf(key, sizeof key, "old-%d", i);
    claim_ok(db, key, 1);
  }
  int64_t all_expired = idem_now_ms() + 3;
  while (idem_now_ms() < all_expired)
    usleep(1000);
  for (int i = 0; i < OLD; i++) { /* as many transitions on fresh keys */
    snprintf(key, sizeof key, "new-%d", i);
    claim_ok(db, key, 3600 * 1000);
  }
  /* they swept every expired record (before: gc found all 1000 still there) */
  assert_int_equal(run_count(db, IDEM_OP_GC), 0);
  assert_int_equal(run_count(db, IDEM_OP_LIST), OLD); /* and no live one */
  idem_sync_close(db);
}

/* The sweep reads nothing while no record can have expired (a lower bound
 * on the expiries); records that expire soon, claimed after many that live
 * long, must lower that bound, or they would stay. */
static void short_lived_records_after_long_lived_ones_are_swept(void **state) {
  (void)state;
  idem_sync *db = NULL;
  assert_int_equal(idem_sync_open("memory:sweep-order", &db, NULL), 0);
  char key[32];
  for (int i = 0; i < OLD; i++) {
    snprintf(key, sizeof key, "long-%d", i);
    claim_ok(db, key, 3600 * 1000);
  }
  for (int i = 0; i < OLD; i++) {
    snprintf(key, sizeof key, "short-%d", i);
    claim_ok(db, key, 1);
  }
  int64_t all_expired = idem_now_ms() + 3;
  while (idem_now_ms() < all_expired)
    usleep(1000);
  for (int i = 0; i < 2 * OLD; i++) { /* as many claims as records held */
    snprintf(key, sizeof key, "new-%d", i);
    claim_ok(db, key, 3600 * 1000);
  }
  assert_int_equal(run_count(db, IDEM_OP_GC), 0);
  assert_int_equal(run_count(db, IDEM_OP_LIST), 3 * OLD);
  idem_sync_close(db);
}

UNIT_TESTS(cmocka_unit_test(expired_records_are_swept_by_later_transitions),
           cmocka_unit_test(short_lived_records_after_long_lived_ones_are_swept))

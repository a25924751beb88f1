/* test_op_limits.c - the bounds idem.h documents for an idem_op, at submit
 * (memory:, the checks are the same for every store): durations 1 ms..100
 * years, a status 0 or 100..999, each response part at most
 * IDEM_RESPONSE_PART_MAX bytes, a fence for the endings, a scope of at most
 * 255 bytes; anything else IDEM_EINVAL (IDEM_ESCOPE for the scope), and no
 * callback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "idem/idem.h"
#include "unit.h"

#define HUNDRED_YEARS_MS INT64_C(3155760000000) /* 36525 days */

static idem_sync *db;

static int setup(void **state) {
  (void)state;
  return idem_sync_open("memory:test_op_limits", &db, NULL);
}

static int teardown(void **state) {
  (void)state;
  idem_sync_close(db);
  return 0;
}

static int run(const idem_op *op) {
  idem_result res;
  int err = idem_sync_run(db, op, &res);
  idem_result_clear(&res);
  return err;
}

static idem_op claim(const char *key, int64_t lease_ms, int64_t ttl_ms) {
  return (idem_op){.kind = IDEM_OP_CLAIM, .key = key, .lease_ms = lease_ms, .ttl_ms = ttl_ms};
}

static void durations_from_one_ms_to_a_hundred_years(void **state) {
  (void)state;
  idem_op op = claim("d1", 1, 1);
  assert_int_equal(run(&op), 0);
  op = claim("d2", HUNDRED_YEARS_MS, HUNDRED_YEARS_MS);
  assert_int_equal(run(&op), 0);
  const int64_t bad[] = {0, -1, HUNDRED_YEARS_MS + 1, INT64_MAX, INT64_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    op = claim("d3", bad[i], 1000);
    assert_int_equal(run(&op), IDEM_EINVAL);
    op = claim("d3", 1000, bad[i]);
    assert_int_equal(run(&op), IDEM_EINVAL);
  }
  idem_op done = {.kind = IDEM_OP_COMPLETE, .key = "d2", .fence = 1, .ttl_ms = 0};
  assert_int_equal(run(&done), IDEM_EINVAL);
  done.ttl_ms = HUNDRED_YEARS_MS + 1;
  assert_int_equal(run(&done), IDEM_EINVAL);
  done.kind = IDEM_OP_FAIL;
  assert_int_equal(run(&done), IDEM_EINVAL);
}

static void responses_within_the_documented_bounds(void **state) {
  (void)state;
  idem_op op = claim("r1", 60000, 60000);
  assert_int_equal(run(&op), 0);
  idem_op done = {.kind = IDEM_OP_COMPLETE, .key = "r1", .fence = 1, .ttl_ms = 60000};
  const int bad_status[] = {-1, 1, 99, 1000, 65536};
  for (size_t i = 0; i < sizeof bad_status / sizeof bad_status[0]; i++) {
    done.response = (idem_response){.status = bad_status[i]};
    assert_int_equal(run(&done), IDEM_EINVAL);
  }
  /* more than IDEM_RESPONSE_PART_MAX in a part: refused before it is read */
  const char *nowhere = (const char *)(uintptr_t)0x10000;
  done.response = (idem_response){.status = 200, .body = nowhere,
                                  .body_len = IDEM_RESPONSE_PART_MAX + 1};
  assert_int_equal(run(&done), IDEM_EINVAL);
  done.response = (idem_response){.status = 200, .headers = nowhere,
                                  .headers_len = IDEM_RESPONSE_PART_MAX + 1};
  assert_int_equal(run(&done), IDEM_EINVAL);
  done.response = (idem_response){.status = 200, .body_len = 3}; /* NULL body */
  assert_int_equal(run(&done), IDEM_EINVAL);
  done.fence = 0;
  done.response = (idem_response){.status = 200};
  assert_int_equal(run(&done), IDEM_EINVAL);
  idem_op rel = {.kind = IDEM_OP_RELEASE, .key = "r1", .fence = 0};
  assert_int_equal(run(&rel), IDEM_EINVAL);
  /* the edges that are allowed */
  const int good_status[] = {0, 100, 999};
  for (size_t i = 0; i < sizeof good_status / sizeof good_status[0]; i++) {
    char key[8];
    snprintf(key, sizeof key, "r2-%zu", i);
    op = claim(key, 60000, 60000);
    assert_int_equal(run(&op), 0);
    idem_op ok = {.kind = IDEM_OP_COMPLETE, .key = key, .fence = 1, .ttl_ms = 60000,
                  .response = {.status = good_status[i]}};
    assert_int_equal(run(&ok), 0);
  }
}

static void scopes_up_to_255_bytes(void **state) {
  (void)state;
  char scope[300];
  memset(scope, 's', 255);
  scope[255] = '\0';
  idem_op op = claim("s1", 60000, 60000);
  op.scope = scope;
  assert_int_equal(run(&op), 0);
  scope[255] = 's';
  scope[256] = '\0';
  assert_int_equal(run(&op), IDEM_ESCOPE);
  idem_op list = {.kind = IDEM_OP_LIST, .scope = scope};
  assert_int_equal(run(&list), IDEM_ESCOPE);
}

static void other_bad_arguments(void **state) {
  (void)state;
  idem_op op = claim("b1", 60000, 60000);
  op.kind = (idem_op_kind)0;
  assert_int_equal(run(&op), IDEM_EINVAL);
  op.kind = (idem_op_kind)99;
  assert_int_equal(run(&op), IDEM_EINVAL);
  idem_result res;
  assert_int_equal(idem_sync_run(db, NULL, &res), IDEM_EINVAL);
  assert_int_equal(res.err, IDEM_EINVAL);
  op = claim("b1", 60000, 60000);
  assert_int_equal(idem_sync_run(db, &op, NULL), IDEM_EINVAL);
  assert_int_equal(idem_sync_run(NULL, &op, &res), IDEM_EINVAL);
  uint8_t fp[IDEM_FINGERPRINT_LEN];
  assert_int_equal(idem_fingerprint("POST", "/", "{}", 2, 2u, fp), IDEM_EINVAL);
  assert_int_equal(idem_fingerprint("POST", "/", NULL, 1, 0, fp), IDEM_EINVAL);
  assert_int_equal(idem_fingerprint(NULL, NULL, NULL, 0, 0, fp), 0);
}

UNIT_TESTS(cmocka_unit_test_setup_teardown(durations_from_one_ms_to_a_hundred_years, setup, teardown),
           cmocka_unit_test_setup_teardown(responses_within_the_documented_bounds, setup, teardown),
           cmocka_unit_test_setup_teardown(scopes_up_to_255_bytes, setup, teardown),
           cmocka_unit_test_setup_teardown(other_bad_arguments, setup, teardown))

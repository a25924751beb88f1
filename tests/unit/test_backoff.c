/* test_backoff.c - the reconnection backoff of the network stores
 * (store/backoff.c): its bounds, its growth and its jitter. No clock: the
 * waits are numbers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "unit.h"

#include "store/backoff.h"

/* A wait drawn at step s lies in [3s/4, 3s/4 + s/2]: 75%..125%. */
static void assert_within(uint64_t wait, int64_t step) {
  assert_true(wait >= (uint64_t)(step * 3 / 4));
  assert_true(wait <= (uint64_t)(step * 3 / 4 + step / 2));
}

static void doubles_from_min_to_max(void **state) {
  (void)state;
  static const int64_t steps[] = {100, 200, 400, 800, 1600, 2000, 2000, 2000};
  idem_backoff b;
  idem_backoff_init(&b, 100, 2000, 42);
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    assert_int_equal(b.step_ms, steps[i]);
    assert_within(idem_backoff_next(&b), steps[i]);
  }
}

static void every_wait_stays_within_its_bounds(void **state) {
  (void)state;
  for (uint64_t seed = 0; seed < 200; seed++) {
    idem_backoff b;
    idem_backoff_init(&b, 50, 2000, seed * 0x9e3779b97f4a7c15u);
    for (int i = 0; i < 20; i++) {
      int64_t step = b.step_ms;
      uint64_t wait = idem_backoff_next(&b);
      assert_within(wait, step);
      assert_true(wait <= 2500); /* 125% of max_ms */
    }
  }
}

static void the_jitter_spreads_over_its_range(void **state) {
  (void)state;
  idem_backoff b;
  idem_backoff_init(&b, 1000, 1000, 7);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < 1000; i++) {
    uint64_t wait = idem_backoff_next(&b);
    assert_within(wait, 1000);
    lo = wait < lo ? wait : lo;
    hi = wait > hi ? wait : hi;
  }
  /* 1000 draws from 750..1250: both ends are nearly reached */
  assert_true(lo < 800);
  assert_true(hi > 1200);
}

static void other_seeds_draw_other_waits(void **state) {
  (void)state;
  idem_backoff a, b;
  idem_backoff_init(&a, 1000, 1000, 1);
  idem_backoff_init(&b, 1000, 1000, 2);
  int differ = 0;
  for (int i = 0; i < 10; i++)
    differ += idem_backoff_next(&a) != idem_backoff_next(&b);
  assert_true(differ > 5);
}

static void reset_starts_again_from_min(void **state) {
  (void)state;
  idem_backoff b;
  idem_backoff_init(&b, 100, 2000, 3);
  for (int i = 0; i < 6; i++)
    idem_backoff_next(&b);
  assert_int_equal(b.step_ms, 2000);
  idem_backoff_reset(&b);
  assert_int_equal(b.step_ms, 100);
  assert_within(idem_backoff_next(&b), 100);
}

static void a_zero_seed_still_jitters(void **state) {
  (void)state;
  idem_backoff b;
  idem_backoff_init(&b, 1000, 1000, 0); /* xorshift would stay at 0 */
  uint64_t first = idem_backoff_next(&b);
  int differ = 0;
  for (int i = 0; i < 10; i++)
    differ += idem_backoff_next(&b) != first;
  assert_true(differ > 0);
}

UNIT_TESTS(cmocka_unit_test(doubles_from_min_to_max),
           cmocka_unit_test(every_wait_stays_within_its_bounds),
           cmocka_unit_test(the_jitter_spreads_over_its_range),
           cmocka_unit_test(other_seeds_draw_other_waits),
           cmocka_unit_test(reset_starts_again_from_min),
           cmocka_unit_test(a_zero_seed_still_jitters))

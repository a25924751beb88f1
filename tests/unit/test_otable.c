/* test_otable.c - the open-addressed table under memory.c: every item stays
 * findable through adds, removes and growth, also when runs of taken slots
 * wrap past the last slot, and a walk that removes as it goes (the sweep,
 * gc) sees every item. The hashes are made to collide: items share home
 * slots, so removing one must move the others back, not lose them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "core/otable.h"

#define KEYS 300

typedef struct {
  unsigned char key[8];
  size_t klen;
} item;

static item items[KEYS];

static int item_matches(const void *it, const unsigned char *key, size_t klen) {
  const item *i = it;
  return i->klen == klen && !memcmp(i->key, key, klen);
}

/* Distinct, well-mixed hashes for the numbers 0 to N - 1. */
static uint64_t spread(uint32_t k) { return (uint64_t)(k + 1) * UINT64_C(0x9E3779B97F4A7C15); }

static int u32_matches(const void *it, const unsigned char *key, size_t klen) {
  return klen == sizeof(uint32_t) && !memcmp(it, key, klen);
}

/* Seven distinct hashes, near the top of the hash space: homes in the last
 * slots, so the runs wrap around to slot 0. */
static uint64_t hash_of(int k) { return UINT64_MAX - (uint64_t)(k % 7) * (UINT64_MAX / 64); }

static void items_init(void) {
  for (int k = 0; k < KEYS; k++)
    items[k].klen = (size_t)snprintf((char *)items[k].key, sizeof items[k].key, "k%d", k);
}

static size_t find(const idem_otable *t, int k) {
  return idem_otable_find(t, hash_of(k), items[k].key, items[k].klen, item_matches);
}

static void add(idem_otable *t, int k) {
  size_t i = find(t, k);
  assert_null(t->slots[i].item);
  assert_int_equal(idem_otable_add(t, i, hash_of(k), &items[k]), 0);
}

static void assert_holds(const idem_otable *t, const int *present) {
  size_t n = 0;
  for (int k = 0; k < KEYS; k++) {
    void *found = t->slots[find(t, k)].item;
    if (present[k]) {
      assert_ptr_equal(found, &items[k]);
      n++;
    } else {
      assert_null(found);
    }
  }
  assert_int_equal(t->count, n);
}

static void items_stay_findable_through_adds_removes_and_growth(void **state) {
  (void)state;
  items_init();
  idem_otable t;
  assert_int_equal(idem_otable_init(&t), 0);
  int present[KEYS] = {0};
  uint32_t rng = 12345;
  for (int step = 0; step < 5000; step++) {
    rng = rng * 1103515245u + 12345u;
    int k = (int)((rng >> 8) % KEYS);
    if (present[k])
      idem_otable_remove(&t, find(&t, k));
    else
      add(&t, k);
    present[k] = !present[k];
    if (step % 50 == 0)
      assert_holds(&t, present);
  }
  assert_holds(&t, present);
  assert_true(t.mask + 1 >= 2 * t.count); /* at most half full */
  free(t.slots);
}

/* The sweep and gc walk the slots upwards and look at a slot again after
 * removing its item: every item is seen, and removed where asked. */
static void a_walk_that_removes_sees_every_item(void **state) {
  (void)state;
  items_init();
  idem_otable t;
  assert_int_equal(idem_otable_init(&t), 0);
  int present[KEYS] = {0};
  for (int k = 0; k < KEYS; k++) {
    add(&t, k);
    present[k] = 1;
  }
  int seen[KEYS] = {0};
  for (size_t i = 0; i <= t.mask;) {
    item *it = t.slots[i].item;
    if (!it) {
      i++;
      continue;
    }
    int k = (int)(it - items);
    seen[k] = 1;
    if (k % 3 == 0) {
      idem_otable_remove(&t, i);
      present[k] = 0;
    } else {
      i++;
    }
  }
  for (int k = 0; k < KEYS; k++)
    assert_true(seen[k]);
  assert_holds(&t, present);
  free(t.slots);
}

/* Past IDEM_OTABLE_HUGE of slots the arrays come from posix_memalign, not
 * calloc: they must still start empty, and free() must take them. */
static void a_table_past_the_huge_page_size_keeps_every_item(void **state) {
  (void)state;
  enum { N = 100000 }; /* 262144 slots of 16 bytes: 4 MiB */
  static uint32_t keys[N];
  idem_otable t;
  assert_int_equal(idem_otable_init(&t), 0);
  for (uint32_t k = 0; k < N; k++) {
    keys[k] = k;
    uint64_t hash = spread(k);
    size_t i = idem_otable_find(&t, hash, (const unsigned char *)&keys[k], sizeof keys[k],
                                u32_matches);
    assert_null(t.slots[i].item);
    assert_int_equal(idem_otable_add(&t, i, hash, &keys[k]), 0);
  }
  assert_true((t.mask + 1) * sizeof *t.slots > IDEM_OTABLE_HUGE);
  size_t taken = 0;
  for (size_t i = 0; i <= t.mask; i++)
    taken += t.slots[i].item != NULL;
  assert_int_equal(taken, N);
  for (uint32_t k = 0; k < N; k++) {
    size_t i = idem_otable_find(&t, spread(k), (const unsigned char *)&k, sizeof k, u32_matches);
    assert_ptr_equal(t.slots[i].item, &keys[k]);
  }
  free(t.slots);
}

UNIT_TESTS(cmocka_unit_test(items_stay_findable_through_adds_removes_and_growth),
           cmocka_unit_test(a_walk_that_removes_sees_every_item),
           cmocka_unit_test(a_table_past_the_huge_page_size_keeps_every_item))

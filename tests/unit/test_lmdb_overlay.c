/* test_lmdb_overlay.c - the LMDB store's overlay (src/store/lmdb_overlay.c):
 * readers see a value only once its batch is promoted; unstage, prune and
 * collect keep the entry count and byte total exact; the table grows under
 * many keys and gives the room back once they are pruned; and readers on
 * other threads never see a freed or foreign value while the writer stages,
 * promotes and prunes. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/lmdb_overlay.h"

/* A value whose bytes are "KEY#VERSION". */
static lmdb_blob *value_of(const char *key, unsigned version) {
  char text[64];
  int n = snprintf(text, sizeof text, "%s#%u", key, version);
  lmdb_blob *b = lmdb_blob_new((size_t)n);
  assert_non_null(b);
  memcpy(b->data, text, (size_t)n);
  return b;
}

static lmdb_ov_entry *stage(lmdb_overlay *ov, const char *key, unsigned version) {
  lmdb_ov_entry *en =
      lmdb_overlay_stage(ov, (const unsigned char *)key, strlen(key), value_of(key, version));
  assert_non_null(en);
  return en;
}

/* key's value version, staged and promoted as batch seq. */
static void put_durable(lmdb_overlay *ov, const char *key, unsigned version, uint64_t seq) {
  lmdb_ov_entry *en[1] = {stage(ov, key, version)};
  lmdb_overlay_promote(ov, en, 1, seq);
}

/* b as text ("" for NULL), unreferenced. */
static const char *text_of(lmdb_blob *b) {
  static char text[64];
  text[0] = 0;
  if (b) {
    snprintf(text, sizeof text, "%.*s", (int)b->len, (const char *)b->data);
    lmdb_blob_unref(b);
  }
  return text;
}

/* What readers see of key, and what the writer sees. */
static const char *durable(lmdb_overlay *ov, const char *key) {
  return text_of(lmdb_overlay_get(ov, (const unsigned char *)key, strlen(key)));
}

static const char *latest(lmdb_overlay *ov, const char *key) {
  return text_of(lmdb_overlay_latest(ov, (const unsigned char *)key, strlen(key)));
}

static int setup(void **state) {
  lmdb_overlay *ov = malloc(sizeof *ov);
  if (!ov || lmdb_overlay_init(ov)) {
    free(ov);
    return -1;
  }
  *state = ov;
  return 0;
}

static int teardown(void **state) {
  lmdb_overlay_destroy(*state);
  free(*state);
  return 0;
}

static void staged_is_seen_by_the_writer_only_until_promoted(void **state) {
  lmdb_overlay *ov = *state;
  lmdb_ov_entry *en[1] = {stage(ov, "a", 1)};
  assert_string_equal(durable(ov, "a"), "");
  assert_string_equal(latest(ov, "a"), "a#1");
  lmdb_overlay_promote(ov, en, 1, 7);
  assert_string_equal(durable(ov, "a"), "a#1");
  assert_int_equal(ov->durable_seq, 7);

  /* the next batch stages over a durable value: readers keep the old one */
  en[0] = stage(ov, "a", 2);
  assert_string_equal(durable(ov, "a"), "a#1");
  assert_string_equal(latest(ov, "a"), "a#2");
  lmdb_overlay_promote(ov, en, 1, 8);
  assert_string_equal(durable(ov, "a"), "a#2");
  assert_int_equal(ov->count, 1);
  assert_int_equal(ov->bytes, 3);
}

static void a_key_twice_in_one_batch_keeps_the_last(void **state) {
  lmdb_overlay *ov = *state;
  lmdb_ov_entry *en[2];
  en[0] = stage(ov, "k", 1);
  en[1] = stage(ov, "k", 2);
  assert_ptr_equal(en[0], en[1]);
  lmdb_overlay_promote(ov, en, 2, 1);
  assert_string_equal(durable(ov, "k"), "k#2");
  assert_int_equal(ov->count, 1);
  assert_int_equal(ov->bytes, 3);
}

static void unstage_drops_staged_values_and_empty_entries(void **state) {
  lmdb_overlay *ov = *state;
  lmdb_ov_entry *en[3];
  put_durable(ov, "old", 1, 1);
  /* a failed flush: "old" goes back to its durable value, "new" away */
  en[0] = stage(ov, "old", 2);
  en[1] = stage(ov, "new", 1);
  en[2] = en[1];
  lmdb_overlay_unstage(ov, en, 3);
  assert_string_equal(durable(ov, "old"), "old#1");
  assert_string_equal(latest(ov, "old"), "old#1");
  assert_string_equal(latest(ov, "new"), "");
  assert_int_equal(ov->count, 1);
  assert_int_equal(ov->bytes, 5);
}

static void prune_removes_what_lmdb_holds_and_keeps_the_rest(void **state) {
  lmdb_overlay *ov = *state;
  put_durable(ov, "one", 1, 1);
  put_durable(ov, "two", 1, 2);
  lmdb_ov_entry *en[2];
  en[1] = stage(ov, "three", 1); /* staged only: never pruned */
  en[0] = stage(ov, "two", 2);   /* durable at 2 and staged again */

  lmdb_overlay_prune(ov, 2);
  assert_string_equal(durable(ov, "one"), "");
  assert_string_equal(durable(ov, "two"), "two#1");
  assert_string_equal(latest(ov, "three"), "three#1");
  uint64_t keys, bytes;
  lmdb_overlay_size(ov, &keys, &bytes); /* what /metrics shows */
  assert_int_equal(keys, 2);
  assert_int_equal(bytes, strlen("two#1") + strlen("two#2") + strlen("three#1"));

  stage(ov, "three", 2);
  lmdb_overlay_promote(ov, en, 2, 3);
  lmdb_overlay_prune(ov, 3);
  lmdb_overlay_size(ov, &keys, &bytes);
  assert_int_equal(keys, 0);
  assert_int_equal(bytes, 0);
  assert_string_equal(durable(ov, "two"), "");
}

static void collect_takes_durable_values_newer_than_a_seq(void **state) {
  lmdb_overlay *ov = *state;
  put_durable(ov, "a", 1, 1);
  put_durable(ov, "b", 1, 2);
  stage(ov, "c", 1); /* staged: not durable yet */

  lmdb_ov_item *items;
  uint64_t target = 0;
  long n = lmdb_overlay_collect(ov, 1, &items, &target);
  assert_int_equal(n, 1);
  assert_int_equal(target, 2);
  assert_int_equal(items[0].klen, 1);
  assert_memory_equal(items[0].key, "b", 1);
  assert_memory_equal(items[0].val->data, "b#1", 3);

  /* the items outlive the entries they were taken from */
  lmdb_overlay_prune(ov, 2);
  assert_memory_equal(items[0].key, "b", 1);
  assert_memory_equal(items[0].val->data, "b#1", 3);
  lmdb_overlay_items_free(items, n);

  n = lmdb_overlay_collect(ov, 0, &items, &target);
  assert_int_equal(n, 0);
  lmdb_overlay_items_free(items, n);
}

#define MANY 20000

static void the_table_grows_and_gives_the_room_back(void **state) {
  lmdb_overlay *ov = *state;
  size_t start = ov->nbuckets;
  char key[32];
  for (unsigned i = 0; i < MANY; i++) {
    snprintf(key, sizeof key, "key-%u", i);
    put_durable(ov, key, i, i + 1);
  }
  assert_int_equal(ov->count, MANY);
  assert_true(ov->nbuckets >= MANY);
  for (unsigned i = 0; i < MANY; i += 997) {
    char want[48];
    snprintf(key, sizeof key, "key-%u", i);
    snprintf(want, sizeof want, "key-%u#%u", i, i);
    assert_string_equal(durable(ov, key), want);
  }

  /* checkpointed in two steps: the table shrinks as the entries go */
  lmdb_overlay_prune(ov, MANY / 2);
  assert_int_equal(ov->count, MANY / 2);
  snprintf(key, sizeof key, "key-%u", MANY - 1);
  assert_string_not_equal(durable(ov, key), "");
  lmdb_overlay_prune(ov, MANY);
  assert_int_equal(ov->count, 0);
  assert_int_equal(ov->bytes, 0);
  assert_int_equal(ov->nbuckets, start);
}

/* ---- readers on other threads ---- */

#define KEYS 64
#define ROUNDS 3000

typedef struct {
  lmdb_overlay *ov;
  _Atomic int stop;
  _Atomic long seen;
  _Atomic int bad;
} race;

static void *reader(void *arg) {
  race *r = arg;
  char key[16], prefix[20];
  for (unsigned i = 0; !atomic_load(&r->stop); i++) {
    snprintf(key, sizeof key, "r%u", i % KEYS);
    lmdb_blob *b = lmdb_overlay_get(r->ov, (const unsigned char *)key, strlen(key));
    if (!b)
      continue;
    /* a value read is the key's own, whole */
    int n = snprintf(prefix, sizeof prefix, "%s#", key);
    if (b->len <= (size_t)n || memcmp(b->data, prefix, (size_t)n))
      atomic_store(&r->bad, 1);
    atomic_fetch_add(&r->seen, 1);
    lmdb_blob_unref(b);
  }
  return NULL;
}

/* What the writer and checkpointer do, in one thread: stage a batch over
 * every key, promote it, and prune what an earlier "checkpoint" covered. */
static void readers_race_stage_promote_prune(void **state) {
  lmdb_overlay *ov = *state;
  race r = {.ov = ov};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, reader, &r), 0);
  lmdb_ov_entry *en[KEYS];
  char key[16];
  for (unsigned round = 1; round <= ROUNDS; round++) {
    for (unsigned k = 0; k < KEYS; k++) {
      snprintf(key, sizeof key, "r%u", (k * 7 + round) % KEYS);
      en[k] = stage(ov, key, round);
    }
    lmdb_overlay_promote(ov, en, KEYS, round);
    if (round % 3 == 0) {
      lmdb_ov_item *items;
      uint64_t target;
      long n = lmdb_overlay_collect(ov, round - 3, &items, &target);
      assert_true(n >= 0);
      lmdb_overlay_items_free(items, n);
      lmdb_overlay_prune(ov, target); /* LMDB holds it now */
    }
  }
  atomic_store(&r.stop, 1);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  assert_false(atomic_load(&r.bad));
  assert_true(atomic_load(&r.seen) > 0);
  lmdb_overlay_prune(ov, UINT64_MAX);
  assert_int_equal(ov->count, 0);
  assert_int_equal(ov->bytes, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(staged_is_seen_by_the_writer_only_until_promoted, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_key_twice_in_one_batch_keeps_the_last, setup, teardown),
      cmocka_unit_test_setup_teardown(unstage_drops_staged_values_and_empty_entries, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(prune_removes_what_lmdb_holds_and_keeps_the_rest, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(collect_takes_durable_values_newer_than_a_seq, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(the_table_grows_and_gives_the_room_back, setup, teardown),
      cmocka_unit_test_setup_teardown(readers_race_stage_promote_prune, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_lmdb_log.c - the LMDB store's log: its batches round-trip, every
 * damaged or torn batch is refused by its checksum, a walk stops at stale
 * batches left from before a reset, and a store whose log is cut at every
 * byte of its last batch opens cleanly with every whole batch replayed. */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../support/temp_root.h"

#include "core/scoped_key.h"
#include "idem/idem.h"
#include "store/lmdb_logfmt.h"

static void crc32c_known_answer(void **state) {
  (void)state;
  assert_int_equal(lmdb_crc32c(0, "123456789", 9), 0xe3069283u);
  /* in pieces, as a batch is checked: header then payload */
  uint32_t c = lmdb_crc32c(0, "1234", 4);
  assert_int_equal(lmdb_crc32c(c, "56789", 5), 0xe3069283u);
  assert_int_equal(lmdb_crc32c(0, "", 0), 0);
}

/* A completed record of key, with a body naming it, encoded. */
static uint8_t *record_of(const char *key, size_t *len) {
  idem_record r = {.state = IDEM_STATE_COMPLETED, .fence = 1, .expires_at = INT64_C(1) << 50,
                   .response = {.status = 200, .body = key, .body_len = strlen(key)}};
  *len = idem_record_encoded_len(&r);
  uint8_t *buf = malloc(*len);
  assert_non_null(buf);
  idem_record_encode(&r, buf);
  return buf;
}

/* One batch of the given keys (a "-" prefix: a deletion), sealed as seq. */
static void build_batch(lmdb_log_buf *b, uint64_t seq, const char *const *keys, int n) {
  lmdb_log_buf_reset(b);
  for (int i = 0; i < n; i++) {
    const char *k = keys[i][0] == '-' ? keys[i] + 1 : keys[i];
    unsigned char skey[IDEM_SCOPED_KEY_MAX];
    size_t klen = idem_scoped_key_encode("", k, skey);
    if (keys[i][0] == '-') {
      assert_int_equal(lmdb_log_buf_add(b, LMDB_LOG_DEL, skey, klen, NULL, 0, INT64_MIN), 0);
    } else {
      size_t vlen;
      uint8_t *v = record_of(k, &vlen);
      assert_int_equal(lmdb_log_buf_add(b, LMDB_LOG_PUT, skey, klen, v, vlen, INT64_C(1) << 50), 0);
      free(v);
    }
  }
  lmdb_log_buf_seal(b, seq);
}

static void batch_round_trip(void **state) {
  (void)state;
  lmdb_log_buf b = {0};
  const char *keys[] = {"a", "bb", "-c"};
  build_batch(&b, 7, keys, 3);
  lmdb_log_batch batch;
  assert_int_equal(lmdb_log_batch_parse(b.p, b.len, &batch), b.len);
  assert_true(batch.seq == 7);
  assert_int_equal(batch.count, 3);
  size_t off = 0;
  lmdb_log_entry en;
  assert_int_equal(lmdb_log_entry_next(&batch, &off, &en), 1);
  assert_int_equal(en.kind, LMDB_LOG_PUT);
  idem_record rec;
  assert_int_equal(idem_record_decode(en.val, en.vlen, &rec), 0);
  assert_int_equal(rec.response.body_len, 1);
  assert_int_equal(lmdb_log_entry_next(&batch, &off, &en), 1);
  assert_int_equal(lmdb_log_entry_next(&batch, &off, &en), 1);
  assert_int_equal(en.kind, LMDB_LOG_DEL);
  assert_null(en.val);
  assert_int_equal(lmdb_log_entry_next(&batch, &off, &en), 0);
  lmdb_log_buf_free(&b);
}

static void every_damage_is_refused(void **state) {
  (void)state;
  lmdb_log_buf b = {0};
  const char *keys[] = {"x", "y"};
  build_batch(&b, 3, keys, 2);
  lmdb_log_batch batch;
  for (size_t cut = 0; cut < b.len; cut++) /* torn: any prefix */
    assert_int_equal(lmdb_log_batch_parse(b.p, cut, &batch), 0);
  for (size_t i = 0; i < b.len; i++) /* any one byte changed */
    for (int bit = 0; bit < 8; bit++) {
      b.p[i] ^= (unsigned char)(1u << bit);
      assert_int_equal(lmdb_log_batch_parse(b.p, b.len, &batch), 0);
      b.p[i] ^= (unsigned char)(1u << bit);
    }
  assert_int_equal(lmdb_log_batch_parse(b.p, b.len, &batch), b.len);
  lmdb_log_buf_free(&b);
}

/* An image: header, then batches of the given seqs (one key each). */
static unsigned char *image_of(const uint64_t *seqs, int n, size_t *len) {
  unsigned char *img = calloc(1, LMDB_LOG_HEAD);
  assert_non_null(img);
  lmdb_log_header(img);
  *len = LMDB_LOG_HEAD;
  lmdb_log_buf b = {0};
  for (int i = 0; i < n; i++) {
    char key[32];
    snprintf(key, sizeof key, "k%llu", (unsigned long long)seqs[i]);
    const char *keys[] = {key};
    build_batch(&b, seqs[i], keys, 1);
    img = realloc(img, *len + b.len);
    assert_non_null(img);
    memcpy(img + *len, b.p, b.len);
    *len += b.len;
  }
  lmdb_log_buf_free(&b);
  return img;
}

static int count_visit(void *arg, const lmdb_log_batch *b) {
  (void)b;
  ++*(int *)arg;
  return 0;
}

static void walk_stops_at_stale_batches(void **state) {
  (void)state;
  /* after a reset: 8, 9 written over the start of 3..7 */
  uint64_t seqs[] = {8, 9, 5, 6, 7};
  size_t len, end;
  uint64_t last;
  unsigned char *img = image_of(seqs, 5, &len);
  int n = 0;
  assert_int_equal(lmdb_log_walk(img, len, count_visit, &n, &end, &last), 0);
  assert_int_equal(n, 2);
  assert_true(last == 9);
  free(img);
  /* a bad header is not a log */
  unsigned char zeros[LMDB_LOG_HEAD] = {0};
  assert_int_equal(lmdb_log_walk(zeros, sizeof zeros, NULL, NULL, &end, &last), -1);
}

/* ---- a store whose log is torn ----------------------------------------- */

static int has_key(idem_sync *s, const char *key) {
  idem_op op = {.kind = IDEM_OP_GET, .key = key};
  idem_result res;
  int err = idem_sync_run(s, &op, &res);
  int ok = err == 0 && res.record->state == IDEM_STATE_COMPLETED &&
           res.record->response.body_len == strlen(key) &&
           !memcmp(res.record->response.body, key, strlen(key));
  assert_true(err == 0 || err == IDEM_ENOTFOUND);
  idem_result_clear(&res);
  return ok;
}

static void torn_log_opens_cleanly_at_every_byte(void **state) {
  (void)state;
  /* batches 1..3 whole; batch 4 (two records and a deletion of batch 1's
   * second key) torn at each of its bytes, then whole */
  lmdb_log_buf b = {0};
  size_t len = LMDB_LOG_HEAD;
  unsigned char *img = calloc(1, LMDB_LOG_HEAD);
  lmdb_log_header(img);
  const char *batches[4][3] = {{"one", "gone", NULL}, {"two", NULL}, {"three", NULL},
                               {"four", "-gone", "five"}};
  size_t last_start = 0;
  for (int i = 0; i < 4; i++) {
    int n = 0;
    while (n < 3 && batches[i][n])
      n++;
    build_batch(&b, (uint64_t)i + 1, batches[i], n);
    last_start = len;
    img = realloc(img, len + b.len);
    memcpy(img + len, b.p, b.len);
    len += b.len;
  }
  lmdb_log_buf_free(&b);
  for (size_t cut = last_start; cut <= len; cut++) {
    char dir[512], path[600], uri[700];
    snprintf(dir, sizeof dir, "%s/cut-%zu", root, cut);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/idem.log", dir);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, img, cut), (ssize_t)cut);
    close(fd);
    snprintf(uri, sizeof uri, "lmdb:%s", dir);
    idem_sync *s;
    char *msg = NULL;
    int err = idem_sync_open(uri, &s, &msg);
    if (err)
      fail_msg("cut at %zu: %s", cut, msg ? msg : idem_strerror(err));
    int whole = cut == len;
    assert_true(has_key(s, "one") && has_key(s, "two") && has_key(s, "three"));
    assert_int_equal(has_key(s, "four"), whole);
    assert_int_equal(has_key(s, "five"), whole);
    assert_int_equal(has_key(s, "gone"), !whole);
    /* and it takes writes after the torn tail */
    idem_op op = {.kind = IDEM_OP_CLAIM, .key = "after", .lease_ms = 1000, .ttl_ms = 60000};
    idem_result res;
    assert_int_equal(idem_sync_run(s, &op, &res), 0);
    assert_int_equal(res.outcome, IDEM_CLAIMED);
    idem_result_clear(&res);
    idem_sync_close(s);
    /* reopened: the same, the claim included */
    assert_int_equal(idem_sync_open(uri, &s, NULL), 0);
    assert_int_equal(has_key(s, "four"), whole);
    op = (idem_op){.kind = IDEM_OP_GET, .key = "after"};
    assert_int_equal(idem_sync_run(s, &op, &res), 0);
    idem_result_clear(&res);
    idem_sync_close(s);
    rm_rf(dir);
  }
  free(img);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(crc32c_known_answer),
      cmocka_unit_test(batch_round_trip),
      cmocka_unit_test(every_damage_is_refused),
      cmocka_unit_test(walk_stops_at_stale_batches),
      cmocka_unit_test(torn_log_opens_cleanly_at_every_byte),
  };
  return cmocka_run_group_tests(tests, temp_root_setup, temp_root_teardown);
}

/* test_lmdb_log.c - the LMDB store's log: its batches round-trip, every
 * damaged or torn batch is refused by its checksum, a walk stops at stale
 * batches left from before a reset, a store whose log is cut at every
 * byte of its last batch opens cleanly with every whole batch replayed,
 * and one whose log is damaged where no crash tears it (a bad batch with
 * whole ones after it, a bad header, another format version) is refused
 * with the log left as it was. */
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

/* The offset of batch i (0-based) of an image_of image. */
static size_t batch_at(const unsigned char *img, size_t len, int i) {
  size_t off = LMDB_LOG_HEAD;
  lmdb_log_batch b;
  while (i-- > 0) {
    size_t n = lmdb_log_batch_parse(img + off, len - off, &b);
    assert_true(n > 0);
    off += n;
  }
  return off;
}

static void batches_past_damage_are_found(void **state) {
  (void)state;
  uint64_t seqs[] = {1, 2, 3, 4};
  size_t len, end, at;
  uint64_t last;
  unsigned char *img = image_of(seqs, 4, &len);
  size_t second = batch_at(img, len, 1), third = batch_at(img, len, 2);
  /* whole: nothing beyond the walk */
  assert_int_equal(lmdb_log_walk(img, len, NULL, NULL, &end, &last), 0);
  assert_true(lmdb_log_lost_batch(img, len, end, last, &at) == 0);
  /* torn at any byte of the last batch: still nothing */
  size_t fourth = batch_at(img, len, 3);
  for (size_t cut = fourth; cut < len; cut++) {
    assert_int_equal(lmdb_log_walk(img, cut, NULL, NULL, &end, &last), 0);
    assert_true(last == 3 && end == fourth);
    assert_true(lmdb_log_lost_batch(img, cut, end, last, &at) == 0);
  }
  /* one byte of the second batch's payload, or of its header, changed */
  size_t hits[] = {second + LMDB_LOG_BATCH_HDR + 3, second + 9, second};
  for (int h = 0; h < 3; h++) {
    img[hits[h]] ^= 0x20;
    assert_int_equal(lmdb_log_walk(img, len, NULL, NULL, &end, &last), 0);
    assert_true(last == 1 && end == second);
    assert_true(lmdb_log_lost_batch(img, len, end, last, &at) == 3);
    assert_true(at == third);
    img[hits[h]] ^= 0x20;
  }
  /* LMDB holds batch 3 already: only 4 is lost */
  img[second + LMDB_LOG_BATCH_HDR + 3] ^= 0x20;
  assert_true(lmdb_log_lost_batch(img, len, second, 3, &at) == 4);
  assert_true(lmdb_log_lost_batch(img, len, second, 4, &at) == 0);
  img[second + LMDB_LOG_BATCH_HDR + 3] ^= 0x20;
  /* a bad header in front of batches LMDB lacks */
  img[0] ^= 1;
  assert_int_equal(lmdb_log_walk(img, len, NULL, NULL, &end, &last), -1);
  assert_int_equal(lmdb_log_header_version(img, len), -1);
  assert_true(lmdb_log_lost_batch(img, len, LMDB_LOG_HEAD, 0, &at) == 1);
  assert_true(lmdb_log_lost_batch(img, len, LMDB_LOG_HEAD, 4, &at) == 0);
  img[0] ^= 1;
  assert_int_equal(lmdb_log_header_version(img, len), LMDB_LOG_VERSION);
  free(img);
  /* a bad header and one whole batch: that batch */
  img = image_of(seqs, 1, &len);
  img[5] ^= 1;
  assert_true(lmdb_log_lost_batch(img, len, LMDB_LOG_HEAD, 0, &at) == 1);
  free(img);
  /* after a reset (8, 9 over the start of 3..7), 9 damaged: the stale
   * batches behind it are below LMDB's seq (7 at least), not lost */
  uint64_t reset[] = {8, 9, 5, 6, 7};
  img = image_of(reset, 5, &len);
  size_t nine = batch_at(img, len, 1);
  img[nine + LMDB_LOG_BATCH_HDR + 2] ^= 0x20;
  assert_int_equal(lmdb_log_walk(img, len, NULL, NULL, &end, &last), 0);
  assert_true(last == 8);
  assert_true(lmdb_log_lost_batch(img, len, end, 8, &at) == 0);
  free(img);
}

/* A stored answer that holds a batch far ahead (a stale batch's payload
 * after a reset) is not taken for one LMDB lacks: only seqs within the
 * window past the floor count. */
static void a_batch_far_ahead_is_not_lost(void **state) {
  (void)state;
  lmdb_log_buf inner = {0}, stale = {0};
  const char *k[] = {"inner"};
  unsigned char skey[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode("", "stale", skey), len, at;
  uint64_t reset[] = {8};
  unsigned char *img = image_of(reset, 1, &len);
  uint64_t far[] = {8 + LMDB_LOG_LOST_WINDOW + 1, 8 + LMDB_LOG_LOST_WINDOW};
  for (int i = 0; i < 2; i++) {
    build_batch(&inner, far[i], k, 1);
    lmdb_log_buf_reset(&stale);
    assert_int_equal(
        lmdb_log_buf_add(&stale, LMDB_LOG_PUT, skey, klen, inner.p, inner.len, INT64_C(1) << 50),
        0);
    lmdb_log_buf_seal(&stale, 5); /* from before the reset */
    unsigned char *both = malloc(len + stale.len);
    memcpy(both, img, len);
    memcpy(both + len, stale.p, stale.len);
    uint64_t found = lmdb_log_lost_batch(both, len + stale.len, len, 8, &at);
    assert_true(found == (i == 0 ? 0 : far[1]));
    free(both);
  }
  lmdb_log_buf_free(&inner);
  lmdb_log_buf_free(&stale);
  free(img);
}

/* A torn batch whose payload holds the bytes of a whole batch (a stored
 * answer can be anything) is not taken for damage. */
static void a_batch_inside_a_torn_one_is_not_lost(void **state) {
  (void)state;
  lmdb_log_buf inner = {0}, outer = {0};
  const char *k[] = {"inner"};
  build_batch(&inner, 99, k, 1);
  unsigned char skey[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode("", "outer", skey);
  assert_int_equal(
      lmdb_log_buf_add(&outer, LMDB_LOG_PUT, skey, klen, inner.p, inner.len, INT64_C(1) << 50), 0);
  lmdb_log_buf_seal(&outer, 2);
  uint64_t one[] = {1};
  size_t len, at;
  unsigned char *img = image_of(one, 1, &len);
  img = realloc(img, len + outer.len);
  memcpy(img + len, outer.p, outer.len);
  size_t start = len;
  len += outer.len;
  assert_true(lmdb_log_lost_batch(img, len - 1, start, 1, &at) == 0); /* torn by one byte */
  lmdb_log_buf_free(&inner);
  lmdb_log_buf_free(&outer);
  free(img);
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

/* A new store directory root/name holding img[0..len) as its idem.log:
 * its path (dir), the log's (path) and the store's URI (uri). */
static void store_with_log(const char *name, const unsigned char *img, size_t len, char dir[512],
                           char path[600], char uri[700]) {
  snprintf(dir, 512, "%s/%s", root, name);
  assert_int_equal(mkdir(dir, 0700), 0);
  snprintf(path, 600, "%s/idem.log", dir);
  int fd = open(path, O_CREAT | O_WRONLY, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, img, len), (ssize_t)len);
  close(fd);
  snprintf(uri, 700, "lmdb:%s", dir);
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
    char name[64], dir[512], path[600], uri[700];
    snprintf(name, sizeof name, "cut-%zu", cut);
    store_with_log(name, img, cut, dir, path, uri);
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

/* Write img[0..len) as dir's idem.log and open the store: the error. The
 * log must be left as it was. */
static int open_with_log(const char *name, const unsigned char *img, size_t len, char **msg) {
  char dir[512], path[600], uri[700];
  store_with_log(name, img, len, dir, path, uri);
  idem_sync *s = NULL;
  int fd;
  int err = idem_sync_open(uri, &s, msg);
  if (!err)
    idem_sync_close(s);
  unsigned char *back = malloc(len + 1);
  fd = open(path, O_RDONLY);
  assert_true(fd >= 0 && back);
  ssize_t got = read(fd, back, len + 1);
  close(fd);
  if (err) {
    assert_int_equal(got, (ssize_t)len);
    assert_memory_equal(back, img, len);
  }
  free(back);
  rm_rf(dir);
  return err;
}

static void damaged_log_is_refused(void **state) {
  (void)state;
  uint64_t seqs[] = {1, 2, 3};
  size_t len;
  unsigned char *img = image_of(seqs, 3, &len);
  size_t second = batch_at(img, len, 1);
  char *msg = NULL;
  img[second + LMDB_LOG_BATCH_HDR + 1] ^= 0x40;
  assert_int_equal(open_with_log("mid", img, len, &msg), IDEM_ECORRUPT);
  assert_non_null(strstr(msg, "damaged"));
  free(msg);
  img[second + LMDB_LOG_BATCH_HDR + 1] ^= 0x40;
  img[3] ^= 1; /* the header's magic */
  assert_int_equal(open_with_log("head", img, len, &msg), IDEM_ECORRUPT);
  free(msg);
  img[3] ^= 1;
  img[8] = 2; /* version 2 */
  assert_int_equal(open_with_log("version", img, len, &msg), IDEM_EVERSION);
  assert_non_null(strstr(msg, "version"));
  free(msg);
  img[8] = LMDB_LOG_VERSION;
  msg = NULL;
  assert_int_equal(open_with_log("whole", img, len, &msg), 0);
  free(msg);
  free(img);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(crc32c_known_answer),
      cmocka_unit_test(batch_round_trip),
      cmocka_unit_test(every_damage_is_refused),
      cmocka_unit_test(walk_stops_at_stale_batches),
      cmocka_unit_test(torn_log_opens_cleanly_at_every_byte),
      cmocka_unit_test(batches_past_damage_are_found),
      cmocka_unit_test(a_batch_inside_a_torn_one_is_not_lost),
      cmocka_unit_test(a_batch_far_ahead_is_not_lost),
      cmocka_unit_test(damaged_log_is_refused),
  };
  return cmocka_run_group_tests(tests, temp_root_setup, temp_root_teardown);
}

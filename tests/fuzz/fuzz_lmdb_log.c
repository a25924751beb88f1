/* fuzz_lmdb_log.c - the LMDB store's log as read back after a crash: any
 * bytes after a valid file header walk to a clean stop, never a crash or a
 * read out of bounds; every batch walked has consecutive seqs and entries
 * that lie inside it; every record value that decodes is within it; a
 * search past where the walk stopped finds only a whole batch above the
 * seq it was given (within the window), inside the image.
 *
 * The fuzz build links only src/core, so the log format is compiled in
 * here (and instrumented with the target). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idem/idem.h"
#include "store/lmdb_logfmt.h"

#include "../../src/store/lmdb_logfmt.c"

typedef struct {
  const unsigned char *img;
  size_t len;
  uint64_t prev;
} walk_state;

static int visit(void *arg, const lmdb_log_batch *b) {
  walk_state *w = arg;
  if (w->prev && b->seq != w->prev + 1)
    abort();
  w->prev = b->seq;
  if (b->payload < w->img || b->payload + b->payload_len > w->img + w->len)
    abort();
  size_t off = 0;
  uint32_t n = 0;
  lmdb_log_entry e;
  while (lmdb_log_entry_next(b, &off, &e)) {
    n++;
    if (e.skey < b->payload || e.skey + e.klen > b->payload + b->payload_len)
      abort();
    if (e.val) {
      if (e.val + e.vlen > b->payload + b->payload_len)
        abort();
      idem_record rec;
      (void)idem_record_decode(e.val, e.vlen, &rec);
    }
  }
  if (n != b->count || off != b->payload_len)
    abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *img = malloc(LMDB_LOG_HEAD + size);
  if (!img)
    return 0;
  lmdb_log_header(img);
  memcpy(img + LMDB_LOG_HEAD, data, size);
  walk_state w = {img, LMDB_LOG_HEAD + size, 0};
  size_t end;
  uint64_t last;
  if (lmdb_log_walk(img, w.len, visit, &w, &end, &last) != 0 || end > w.len || last != w.prev)
    abort();
  size_t at;
  for (uint64_t floor = 0; floor <= 2; floor++) {
    uint64_t lost = lmdb_log_lost_batch(img, w.len, end, last + floor, &at);
    lmdb_log_batch found;
    if (lost && (lost <= last + floor || lost - (last + floor) > LMDB_LOG_LOST_WINDOW ||
                 at < end || at >= w.len ||
                 lmdb_log_batch_parse(img + at, w.len - at, &found) == 0 || found.seq != lost))
      abort();
  }
  (void)lmdb_log_header_version(data, size);
  (void)lmdb_log_lost_batch(data, size, size / 2, 0, &at);
  /* the raw bytes as a header, and as one batch */
  size_t end2;
  (void)lmdb_log_walk(data, size, NULL, NULL, &end2, &last);
  lmdb_log_batch b;
  size_t n = lmdb_log_batch_parse(data, size, &b);
  if (n > size)
    abort();
  free(img);
  return 0;
}

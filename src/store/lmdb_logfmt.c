/*
 * lmdb_logfmt.c - building, checking and walking the LMDB store's log
 * batches (the layout is in lmdb_logfmt.h).
 *
 * CRC32C (Castagnoli): the SSE4.2 instruction where the CPU has it, else
 * slicing by 8 over tables built once. A batch of 64 small operations is a
 * few KiB, so either costs a few microseconds against a device flush of
 * about 100.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "store/lmdb_logfmt.h"

#define POLY 0x82f63b78u /* CRC32C, reflected */

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_build(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
    table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t crc_soft(uint32_t crc, const unsigned char *p, size_t len) {
  pthread_once(&table_once, table_build);
  while (len >= 8) {
    uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24);
    crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
          table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
    p += 8;
    len -= 8;
  }
  while (len--)
    crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p,
                                                          size_t len) {
  uint64_t c = crc;
  while (len >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
    p += 8;
    len -= 8;
  }
  uint32_t c32 = (uint32_t)c;
  while (len--)
    c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#define HAVE_CRC_HW 1
#endif

uint32_t lmdb_crc32c(uint32_t crc, const void *buf, size_t len) {
  crc = ~crc;
#ifdef HAVE_CRC_HW
  static int hw = -1;
  if (hw < 0)
    hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
  crc = hw ? crc_hw(crc, buf, len) : crc_soft(crc, buf, len);
#else
  crc = crc_soft(crc, buf, len);
#endif
  return ~crc;
}

/* ---- little-endian integers --------------------------------------------- */

static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* ---- the file header ----------------------------------------------------- */

#define HEADER_MAGIC "idem-log"
#define BATCH_MAGIC "IDLB"

void lmdb_log_header(unsigned char out[LMDB_LOG_HEAD]) {
  memset(out, 0, LMDB_LOG_HEAD);
  memcpy(out, HEADER_MAGIC, 8);
  put_le(out + 8, LMDB_LOG_VERSION, 4);
}

int lmdb_log_header_ok(const unsigned char *p, size_t len) {
  return len >= LMDB_LOG_HEAD && lmdb_log_header_version(p, len) == LMDB_LOG_VERSION;
}

long lmdb_log_header_version(const unsigned char *p, size_t len) {
  if (len < 12 || memcmp(p, HEADER_MAGIC, 8))
    return -1;
  return (long)get_le(p + 8, 4);
}

/* ---- building a batch ---------------------------------------------------- */

static int buf_reserve(lmdb_log_buf *b, size_t more) {
  if (b->len + more <= b->cap)
    return 0;
  size_t cap = b->cap ? b->cap : 16384;
  while (cap < b->len + more)
    cap *= 2;
  unsigned char *p = realloc(b->p, cap);
  if (!p)
    return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

void lmdb_log_buf_reset(lmdb_log_buf *b) {
  b->len = LMDB_LOG_BATCH_HDR;
  b->count = 0;
}

int lmdb_log_buf_add(lmdb_log_buf *b, int kind, const unsigned char *skey, size_t klen,
                     const void *val, size_t vlen, int64_t expires_at) {
  if (b->len < LMDB_LOG_BATCH_HDR)
    b->len = LMDB_LOG_BATCH_HDR;
  if (!val)
    vlen = 0;
  if (klen > 0xffff || vlen > LMDB_LOG_BATCH_MAX ||
      b->len + LMDB_LOG_ENTRY_HDR + klen + vlen > LMDB_LOG_BATCH_MAX ||
      buf_reserve(b, LMDB_LOG_ENTRY_HDR + klen + vlen))
    return -1;
  unsigned char *p = b->p + b->len;
  p[0] = (unsigned char)kind;
  put_le(p + 1, klen, 2);
  put_le(p + 3, vlen, 4);
  put_le(p + 7, (uint64_t)expires_at, 8);
  memcpy(p + LMDB_LOG_ENTRY_HDR, skey, klen);
  if (vlen)
    memcpy(p + LMDB_LOG_ENTRY_HDR + klen, val, vlen);
  b->len += LMDB_LOG_ENTRY_HDR + klen + vlen;
  b->count++;
  return 0;
}

void lmdb_log_buf_seal(lmdb_log_buf *b, uint64_t seq) {
  unsigned char *h = b->p;
  memcpy(h, BATCH_MAGIC, 4);
  put_le(h + 4, b->len - LMDB_LOG_BATCH_HDR, 4);
  put_le(h + 8, seq, 8);
  put_le(h + 16, b->count, 4);
  uint32_t crc = lmdb_crc32c(0, h, 20);
  crc = lmdb_crc32c(crc, h + LMDB_LOG_BATCH_HDR, b->len - LMDB_LOG_BATCH_HDR);
  put_le(h + 20, crc, 4);
}

void lmdb_log_buf_free(lmdb_log_buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

/* ---- reading ------------------------------------------------------------- */

/* One entry at off of payload[0..len); 0 when it is not a whole one. */
static size_t entry_parse(const unsigned char *payload, size_t len, size_t off,
                          lmdb_log_entry *e) {
  if (len - off < LMDB_LOG_ENTRY_HDR)
    return 0;
  const unsigned char *p = payload + off;
  size_t klen = (size_t)get_le(p + 1, 2), vlen = (size_t)get_le(p + 3, 4);
  if ((p[0] != LMDB_LOG_PUT && p[0] != LMDB_LOG_DEL) || klen == 0 ||
      (p[0] == LMDB_LOG_DEL && vlen) || (p[0] == LMDB_LOG_PUT && !vlen) ||
      len - off - LMDB_LOG_ENTRY_HDR < klen ||
      len - off - LMDB_LOG_ENTRY_HDR - klen < vlen)
    return 0;
  e->kind = p[0];
  e->klen = klen;
  e->vlen = vlen;
  e->expires_at = (int64_t)get_le(p + 7, 8);
  e->skey = p + LMDB_LOG_ENTRY_HDR;
  e->val = p[0] == LMDB_LOG_PUT ? e->skey + klen : NULL;
  return LMDB_LOG_ENTRY_HDR + klen + vlen;
}

size_t lmdb_log_batch_parse(const unsigned char *p, size_t len, lmdb_log_batch *out) {
  if (len < LMDB_LOG_BATCH_HDR || memcmp(p, BATCH_MAGIC, 4))
    return 0;
  uint64_t plen = get_le(p + 4, 4);
  if (plen > LMDB_LOG_BATCH_MAX || plen > len - LMDB_LOG_BATCH_HDR)
    return 0;
  uint32_t crc = lmdb_crc32c(0, p, 20);
  crc = lmdb_crc32c(crc, p + LMDB_LOG_BATCH_HDR, (size_t)plen);
  if (crc != (uint32_t)get_le(p + 20, 4))
    return 0;
  lmdb_log_batch b = {get_le(p + 8, 8), (uint32_t)get_le(p + 16, 4), p + LMDB_LOG_BATCH_HDR,
                      (size_t)plen};
  /* the entries must fill the payload exactly, count of them */
  size_t off = 0, n;
  uint32_t count = 0;
  lmdb_log_entry e;
  while (off < b.payload_len && (n = entry_parse(b.payload, b.payload_len, off, &e)) != 0) {
    off += n;
    count++;
  }
  if (off != b.payload_len || count != b.count || b.seq == 0)
    return 0;
  *out = b;
  return LMDB_LOG_BATCH_HDR + (size_t)plen;
}

int lmdb_log_entry_next(const lmdb_log_batch *b, size_t *off, lmdb_log_entry *out) {
  if (*off >= b->payload_len)
    return 0;
  size_t n = entry_parse(b->payload, b->payload_len, *off, out);
  if (!n)
    return 0;
  *off += n;
  return 1;
}

int lmdb_log_walk(const unsigned char *p, size_t len, lmdb_log_visit visit, void *arg,
                  size_t *end, uint64_t *last) {
  *end = LMDB_LOG_HEAD;
  *last = 0;
  if (!lmdb_log_header_ok(p, len))
    return -1;
  size_t off = LMDB_LOG_HEAD, n;
  lmdb_log_batch b;
  while ((n = lmdb_log_batch_parse(p + off, len - off, &b)) != 0) {
    if (*last && b.seq != *last + 1)
      break; /* stale bytes from before a reset */
    int rc = visit ? visit(arg, &b) : 0;
    if (rc)
      return rc;
    off += n;
    *end = off;
    *last = b.seq;
  }
  return 0;
}

uint64_t lmdb_log_lost_batch(const unsigned char *p, size_t len, size_t from, uint64_t floor,
                             size_t *at) {
  lmdb_log_batch b;
  if (from > len)
    return 0;
  /* A torn batch whose own header came through: what it carries is not
   * looked at, so a stored answer that holds the bytes of a batch cannot
   * pass for one */
  if (len - from >= LMDB_LOG_BATCH_HDR && !memcmp(p + from, BATCH_MAGIC, 4) &&
      get_le(p + from + 8, 8) == floor + 1 && !lmdb_log_batch_parse(p + from, len - from, &b)) {
    uint64_t plen = get_le(p + from + 4, 4);
    if (plen <= len - from - LMDB_LOG_BATCH_HDR)
      from += LMDB_LOG_BATCH_HDR + (size_t)plen;
  }
  for (size_t off = from; off < len && len - off >= LMDB_LOG_BATCH_HDR; off++) {
    const unsigned char *m = memchr(p + off, BATCH_MAGIC[0], len - off - LMDB_LOG_BATCH_HDR + 1);
    if (!m)
      break;
    off = (size_t)(m - p);
    if (lmdb_log_batch_parse(m, len - off, &b) && b.seq > floor &&
        b.seq - floor <= LMDB_LOG_LOST_WINDOW) {
      *at = off;
      return b.seq;
    }
  }
  return 0;
}

/*
 * lmdb_logfmt.h - the bytes of the LMDB store's log (lmdb_log.c writes the
 * file, this reads and builds its contents; no I/O, no LMDB: the fuzzer
 * compiles it alone).
 *
 * A log file is a LMDB_LOG_HEAD-byte header ("idem-log", a 4-byte format
 * version, zeros) and then batches, back to back. A batch is what one device
 * flush made durable:
 *
 *   magic "IDLB" (4) | payload length (4) | seq (8) | entries (4) | crc (4)
 *   entries, each:  kind (1) | key length (2) | value length (4) |
 *                   expires_at (8) | scoped key | value (an encoded record)
 *
 * Integers are little-endian. crc is CRC32C over the 20 header bytes before
 * it and the payload, so a batch torn by a crash (or stale bytes from before
 * the log was reset) never passes for a whole one. Sequence numbers never
 * repeat across resets; a walk of the log stops at the first batch that is
 * torn, malformed or not the successor of the one before.
 */
#ifndef IDEM_STORE_LMDB_LOGFMT_H
#define IDEM_STORE_LMDB_LOGFMT_H

#include <stddef.h>
#include <stdint.h>

#define LMDB_LOG_HEAD 4096u
#define LMDB_LOG_BATCH_HDR 24u
#define LMDB_LOG_ENTRY_HDR 15u
#define LMDB_LOG_VERSION 1u
/* no batch is bigger: a length past it is garbage, not a batch */
#define LMDB_LOG_BATCH_MAX (UINT32_C(1) << 30)

enum { LMDB_LOG_PUT = 1, LMDB_LOG_DEL = 2 };

uint32_t lmdb_crc32c(uint32_t crc, const void *buf, size_t len);

void lmdb_log_header(unsigned char out[LMDB_LOG_HEAD]);
/* 1 when p[0..len) starts with a header this build reads */
int lmdb_log_header_ok(const unsigned char *p, size_t len);

/* The format version in a log image's header, or -1 when p does not start
 * with a log's magic (a file whose header was never made durable). */
long lmdb_log_header_version(const unsigned char *p, size_t len);

/* A batch being built: the header's room is reserved at the front. */
typedef struct {
  unsigned char *p;
  size_t len, cap;
  uint32_t count;
} lmdb_log_buf;

void lmdb_log_buf_reset(lmdb_log_buf *b);
/* Append one entry (val NULL for a delete). 0 or -1 (out of memory). */
int lmdb_log_buf_add(lmdb_log_buf *b, int kind, const unsigned char *skey, size_t klen,
                     const void *val, size_t vlen, int64_t expires_at);
/* Write the header for seq; the batch is b->p[0..b->len). */
void lmdb_log_buf_seal(lmdb_log_buf *b, uint64_t seq);
void lmdb_log_buf_free(lmdb_log_buf *b);

typedef struct {
  uint64_t seq;
  uint32_t count;
  const unsigned char *payload;
  size_t payload_len;
} lmdb_log_batch;

typedef struct {
  int kind;
  const unsigned char *skey;
  size_t klen;
  const unsigned char *val; /* NULL for a delete */
  size_t vlen;
  int64_t expires_at;
} lmdb_log_entry;

/* The whole valid batch at p[0..len): returns its size, or 0 when there is
 * none (torn, bad checksum, malformed entries). */
size_t lmdb_log_batch_parse(const unsigned char *p, size_t len, lmdb_log_batch *out);
/* The entry at *off of a parsed batch: 1 and *off advanced, 0 at the end. */
int lmdb_log_entry_next(const lmdb_log_batch *b, size_t *off, lmdb_log_entry *out);

/* Walk the batches of a log image (header included) in order, calling
 * visit for each (a non-zero return stops the walk and is returned). *end
 * gets the offset past the last batch walked, *last its seq (0 for none).
 * Returns 0, visit's code, or -1 when the header is not a log's. */
typedef int (*lmdb_log_visit)(void *arg, const lmdb_log_batch *b);
int lmdb_log_walk(const unsigned char *p, size_t len, lmdb_log_visit visit, void *arg,
                  size_t *end, uint64_t *last);

/* A whole batch past the place from where a walk stopped (LMDB_LOG_HEAD
 * for a log whose header is bad), with a seq above floor (the last seq
 * walked, or LMDB's, whichever is higher) by at most LMDB_LOG_LOST_WINDOW:
 * its seq, and its offset in *at; 0 when there is none. A crash tears only
 * the batch being appended, and no batch is appended before the one ahead
 * of it is flushed whole, so such a batch was acknowledged behind one
 * damaged since: the log must not be taken as ending at from. Stale
 * batches from before a reset have seqs LMDB holds, at or below floor.
 *
 * The window: the bytes searched include stale batches' payloads, whose
 * stored answers can hold anything, a batch's bytes too. One placed there
 * with a seq far ahead would otherwise stop the store from opening; within
 * the window it must guess a count the process never shows. Damage that
 * swallowed more batches than the window goes unseen, as a torn tail. */
#define LMDB_LOG_LOST_WINDOW 1024u
uint64_t lmdb_log_lost_batch(const unsigned char *p, size_t len, size_t from, uint64_t floor,
                             size_t *at);

#endif

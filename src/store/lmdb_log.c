/*
 * lmdb_log.c - the LMDB store's log file, `idem.log` in the store directory:
 * who owns it, appending a batch with one write and one fdatasync, and
 * replaying it into LMDB when a process takes it over. The bytes are
 * lmdb_logfmt.c's.
 *
 * Space: the file is written with zeros ahead of use, LOG_STEP at a time,
 * so that appending a batch overwrites allocated blocks and its fdatasync
 * flushes data only (writing into a hole or an fallocated, unwritten extent
 * would make each flush commit the file system's journal too). Once LMDB
 * holds every batch flushed, the next batch goes back to the start (a
 * reset); a log that reaches LOG_MAX waits for a checkpoint to reset. Seqs
 * keep counting across resets, so the stale batches after the new ones are
 * never taken for a continuation (lmdb_log_walk).
 *
 * Ownership between processes: one process at a time owns the log, by an
 * open-file-description lock on byte 0 of the file (released by the kernel
 * when the process dies). Another process (`idem keys`, `idem gc`, a second
 * gateway in a rolling restart) is a guest: its writer asks for the log by
 * locking byte 1, waits for byte 0, and then replays whatever the log holds
 * beyond LMDB. The owner looks at byte 1 between batches (and every
 * OWNER_POLL_MS when idle, lmdb_writer.c) and hands the log over: LMDB gets
 * all it holds, the overlay empties, byte 0 is unlocked. So whichever
 * process serves an operation sees every acknowledged record.
 *
 * Measured and not done (ext4 without a journal, virtio disk with a
 * volatile cache and no FUA):
 * - Appends through a second descriptor opened O_DIRECT | O_DSYNC (whole
 *   4 KiB blocks from an aligned buffer, the partial block before log_off
 *   written again): 15% less time and 20% less CPU per 8 KiB write + flush
 *   alone, but lmdb_bench time in commit 0.50-0.61 ms either way and the
 *   gateway's unique keys 0.89x to 1.12x (median about 1.0) over 6 paired
 *   rounds. The device's write and cache flush are the cost, not the page
 *   cache.
 * - What a flush costs the device here: one data write and one cache
 *   flush; about one in six also writes the inode, when the append moved
 *   the file's mtime to a new clock tick (ext4 without a journal writes a
 *   dirty inode on fdatasync). Nothing in the API skips mtime on ext4.
 * - The whole LOG_MAX zero-filled at creation instead of LOG_STEP at a
 *   time: about +5% lmdb_bench pairs/s on a fresh store, same p99, and a
 *   store that has run for a while no longer grows its log anyway.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/lmdb_env.h"

#define LOG_NAME "idem.log"
#define LOG_STEP (UINT64_C(1) << 20)
#define LOG_MAX (UINT64_C(64) << 20)
#define OWN_BYTE 0
#define ASK_BYTE 1
#define ACQUIRE_WAIT_MS 5000 /* how long a guest waits for the log */
#define ASKER_GRACE_MS 50    /* how long a free log is left to another asker */

static int lock_byte(int fd, int cmd, short type, off_t byte) {
  struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1};
  int rc;
  while ((rc = fcntl(fd, cmd, &fl)) < 0 && errno == EINTR)
    ;
  return rc;
}

/* Whether byte is locked by another open file description. */
static int locked_elsewhere(int fd, off_t byte) {
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1};
  return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

int lmdb_log_requested(lmdb_env *e) { return locked_elsewhere(e->log_fd, ASK_BYTE); }

static int write_all(int fd, const void *p, size_t len, uint64_t off) {
  const unsigned char *b = p;
  while (len) {
    ssize_t n = pwrite(fd, b, len, (off_t)off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n < 0 ? errno : EIO;
    b += n;
    len -= (size_t)n;
    off += (uint64_t)n;
  }
  return 0;
}

static int zero_fill(int fd, uint64_t from, uint64_t to) {
  static const unsigned char zeros[65536];
  for (uint64_t off = from; off < to;) {
    size_t n = to - off < sizeof zeros ? (size_t)(to - off) : sizeof zeros;
    int err = write_all(fd, zeros, n, off);
    if (err)
      return err;
    off += n;
  }
  return 0;
}

/* A fresh log: header and the first step of zeros, durable, and its name
 * in the directory durable too. Returns 0 or errno. */
static int log_init(lmdb_env *e) {
  unsigned char head[LMDB_LOG_HEAD];
  lmdb_log_header(head);
  int err = write_all(e->log_fd, head, sizeof head, 0);
  if (!err)
    err = zero_fill(e->log_fd, LMDB_LOG_HEAD, LMDB_LOG_HEAD + LOG_STEP);
  if (!err && fdatasync(e->log_fd))
    err = errno;
  int dir = err ? -1 : open(e->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    if (fsync(dir))
      err = errno;
    close(dir);
  }
  e->log_size = LMDB_LOG_HEAD + LOG_STEP;
  return err;
}

typedef struct {
  lmdb_env *e;
  MDB_txn *txn;
  uint64_t after; /* LMDB's logseq: batches up to it are in already */
  int rc;
} replay_ctx;

static int replay_batch(void *arg, const lmdb_log_batch *b) {
  replay_ctx *r = arg;
  if (b->seq <= r->after)
    return 0;
  if (!r->txn && (r->rc = lmdb_write_begin(r->e, &r->txn)) != 0)
    return 1;
  size_t off = 0;
  lmdb_log_entry en;
  while (lmdb_log_entry_next(b, &off, &en))
    if ((r->rc = lmdb_state_put(r->e, r->txn, en.skey, en.klen, en.val, en.vlen,
                                en.expires_at)) != 0)
      return 1;
  return 0;
}

/* LMDB's logseq, from a read transaction. */
static int read_logseq(lmdb_env *e, uint64_t *seq) {
  MDB_txn *txn;
  lmdb_map_hold(e);
  int rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &txn);
  if (rc == MDB_MAP_RESIZED && (rc = lmdb_map_adopt(e)) == 0)
    rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &txn);
  if (rc == 0) {
    rc = lmdb_logseq_get(e, txn, seq);
    mdb_txn_abort(txn);
  }
  lmdb_map_release(e);
  return rc;
}

/* Damage to the log that no crash makes, found in its image after a walk
 * (walked: what lmdb_log_walk returned; end: where it stopped; floor: the
 * higher of the last seq it walked and LMDB's): a header of another format
 * version, or a whole batch LMDB lacks beyond where the walk stopped
 * (lmdb_log_lost_batch). Going on would start the log afresh over batches
 * that were acknowledged, so the store is not opened: IDEM_EVERSION or
 * IDEM_ECORRUPT, *why says which; 0 when the log only ends where a crash
 * may have torn it. */
static int log_damage(const unsigned char *img, size_t len, int walked, size_t end, uint64_t floor,
                      char **why) {
  size_t at;
  if (!img)
    return 0;
  long version = lmdb_log_header_version(img, len);
  if (walked < 0 && version >= 0 && version != LMDB_LOG_VERSION) {
    *why = "the log has another format version (written by another idem?)";
    return IDEM_EVERSION;
  }
  if (lmdb_log_lost_batch(img, len, walked < 0 ? LMDB_LOG_HEAD : end, floor, &at)) {
    *why = walked < 0 ? "the log is damaged: batches LMDB lacks follow a bad header (move "
                        "idem.log aside to open the store without them)"
                      : "the log is damaged: batches LMDB lacks lie past a bad one (move "
                        "idem.log aside to open the store without them)";
    return IDEM_ECORRUPT;
  }
  return 0;
}

/* The owner's first act: LMDB gets every batch it lacks (one durable
 * commit), and the next batch goes to the start of the log. */
static int log_recover(lmdb_env *e, char **why) {
  uint64_t after;
  int rc = read_logseq(e, &after);
  if (rc) {
    *why = "cannot read the log's place in LMDB";
    return lmdb_error(e, rc);
  }
  off_t size = lseek(e->log_fd, 0, SEEK_END);
  unsigned char *img = size > 0 ? malloc((size_t)size) : NULL;
  if (size > 0 && !img)
    return IDEM_ENOMEM;
  ssize_t got = 0;
  while (img && got < size) {
    ssize_t n = pread(e->log_fd, img + got, (size_t)(size - got), got);
    if (n <= 0)
      break;
    got += n;
  }
  replay_ctx r = {e, NULL, after, 0};
  size_t end;
  uint64_t last = 0;
  int walked = img ? lmdb_log_walk(img, (size_t)got, replay_batch, &r, &end, &last) : -1;
  int damage = r.rc ? 0 : log_damage(img, (size_t)got, walked, end, last > after ? last : after, why);
  free(img);
  if (damage) {
    if (r.txn) {
      mdb_txn_abort(r.txn);
      lmdb_map_release(e);
    }
    return damage;
  }
  if (walked < 0) { /* new, or created by a process killed before its header was durable */
    int err = log_init(e);
    if (err) {
      *why = "cannot write the log";
      return lmdb_error(e, err);
    }
  } else {
    e->log_size = (uint64_t)size;
  }
  if (r.txn) {
    if (r.rc == 0 && (r.rc = lmdb_logseq_put(e, r.txn, last)) == 0)
      r.rc = mdb_txn_commit(r.txn);
    else
      mdb_txn_abort(r.txn);
    lmdb_map_release(e);
  }
  if (r.rc) {
    *why = "cannot replay the log into LMDB";
    return lmdb_error(e, r.rc);
  }
  uint64_t seq = last > after ? last : after;
  e->last_seq = seq;
  e->log_off = LMDB_LOG_HEAD;
  pthread_mutex_lock(&e->ov.lock);
  e->ov.durable_seq = seq;
  pthread_mutex_unlock(&e->ov.lock);
  atomic_store(&e->ck_have, seq);
  atomic_store(&e->ck_seq, seq);
  atomic_store(&e->ck_err, 0); /* LMDB holds the whole log again */
  return 0;
}

int lmdb_log_open(lmdb_env *e, char **errmsg) {
  e->log_fd = -1;
  atomic_store(&e->mode, LMDB_DIRECT);
  if (!e->opt.log)
    return 0;
  if (lmdb_overlay_init(&e->ov))
    return IDEM_ENOMEM;
  char path[4096];
  snprintf(path, sizeof path, "%s/" LOG_NAME, e->path);
  e->log_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (e->log_fd < 0) {
    int err = errno;
    if (errmsg && asprintf(errmsg, "lmdb: cannot open the log '%s': %s (log=off goes without)",
                           path, strerror(err)) < 0)
      *errmsg = NULL;
    return lmdb_error(e, err);
  }
  atomic_store(&e->mode, LMDB_GUEST);
  if (lock_byte(e->log_fd, F_OFD_SETLK, F_WRLCK, OWN_BYTE) != 0)
    return 0; /* another process owns it: this one is a guest */
  const char *why = NULL;
  int err = log_recover(e, (char **)&why);
  if (err) {
    if (errmsg && asprintf(errmsg, "lmdb: '%s': %s: %s", path, why ? why : "log",
                           idem_strerror(err)) < 0)
      *errmsg = NULL;
    return err;
  }
  atomic_store(&e->mode, LMDB_OWNER);
  return 0;
}

void lmdb_log_close(lmdb_env *e) {
  if (e->log_fd >= 0)
    close(e->log_fd); /* releases its locks */
  e->log_fd = -1;
  if (e->opt.log)
    lmdb_overlay_destroy(&e->ov);
  lmdb_log_buf_free(&e->logbuf);
}

/* Byte 0, within ACQUIRE_WAIT_MS: 0, or errno (ETIMEDOUT). Polled, not
 * waited for with F_OFD_SETLKW: an owner that is stopped (a Ctrl-Z'd `idem
 * keys`, a SIGSTOP) never lets go, and a wait without end would hang
 * every operation of this process.
 *
 * Byte 1 first, as before: the owner hands the log over when it sees byte
 * 1 taken, and an owner that just did so must ask in turn, behind this
 * process, or it would take the log straight back at its next batch and
 * starve every guest. While another process holds byte 1 it goes first;
 * but one that leaves byte 0 free for ASKER_GRACE_MS (stopped between its
 * two locks) is passed by. */
static int own_within(int fd) {
  int64_t now = lmdb_mono_us(), until = now + ACQUIRE_WAIT_MS * 1000, free_since = -1;
  int asked = 0, err = 0;
  for (;;) {
    if (!asked && lock_byte(fd, F_OFD_SETLK, F_WRLCK, ASK_BYTE) == 0)
      asked = 1;
    else if (!asked && errno != EAGAIN && errno != EACCES)
      return errno;
    if (asked || (free_since >= 0 && now - free_since >= ASKER_GRACE_MS * 1000)) {
      if (lock_byte(fd, F_OFD_SETLK, F_WRLCK, OWN_BYTE) == 0)
        break;
      if (errno != EAGAIN && errno != EACCES) {
        err = errno;
        break;
      }
    }
    if (!asked)
      free_since = locked_elsewhere(fd, OWN_BYTE) ? -1 : free_since >= 0 ? free_since : now;
    if ((now = lmdb_mono_us()) >= until) {
      err = ETIMEDOUT;
      break;
    }
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
    now = lmdb_mono_us();
  }
  if (asked)
    lock_byte(fd, F_OFD_SETLK, F_UNLCK, ASK_BYTE);
  return err;
}

int lmdb_log_acquire(lmdb_env *e) {
  int err = own_within(e->log_fd);
  if (err == ETIMEDOUT) {
    atomic_fetch_add(&e->errors_store, 1);
    return IDEM_ETIMEDOUT;
  }
  if (err)
    return lmdb_error(e, err);
  char *why;
  if ((err = log_recover(e, &why)) != 0) {
    lock_byte(e->log_fd, F_OFD_SETLK, F_UNLCK, OWN_BYTE);
    return err;
  }
  pthread_mutex_lock(&e->ck_lock);
  atomic_store(&e->mode, LMDB_OWNER);
  pthread_mutex_unlock(&e->ck_lock);
  return 0;
}

/* LMDB gets everything the log holds first. When it cannot (a full map
 * or disk), the log stays here: the next owner would replay it into the
 * same full LMDB, fail, and let it go, and then no process could serve the
 * records only the log holds, not even to read them. The asker's wait
 * times out instead (IDEM_ETIMEDOUT), and this process goes on serving. */
void lmdb_log_yield(lmdb_env *e) {
  if (lmdb_ckpt_sync(e))
    return;
  pthread_mutex_lock(&e->ck_lock);
  atomic_store(&e->mode, LMDB_GUEST); /* no checkpoint starts from now on */
  while (e->ck_busy)
    pthread_cond_wait(&e->ck_done, &e->ck_lock);
  pthread_mutex_unlock(&e->ck_lock);
  lmdb_overlay_prune(&e->ov, UINT64_MAX);
  lock_byte(e->log_fd, F_OFD_SETLK, F_UNLCK, OWN_BYTE);
}

int lmdb_log_append(lmdb_env *e, const unsigned char *p, size_t len) {
  if (e->log_off > LMDB_LOG_HEAD && atomic_load(&e->ck_seq) >= e->last_seq) {
    e->log_off = LMDB_LOG_HEAD; /* LMDB holds all of it: start over */
    atomic_fetch_add(&e->log_resets, 1);
  }
  if (e->log_off + len > LOG_MAX && e->log_off > LMDB_LOG_HEAD) {
    int err = lmdb_ckpt_sync(e); /* full: wait until LMDB holds it all */
    if (err)
      return err;
    e->log_off = LMDB_LOG_HEAD;
    atomic_fetch_add(&e->log_resets, 1);
  }
  int err = 0;
  if (e->log_off + len > e->log_size) {
    uint64_t to = (e->log_off + len + LOG_STEP - 1) / LOG_STEP * LOG_STEP + LOG_STEP;
    if ((err = zero_fill(e->log_fd, e->log_size, to)) != 0)
      return lmdb_error(e, err);
    e->log_size = to;
  }
  if ((err = write_all(e->log_fd, p, len, e->log_off)) == 0 && fdatasync(e->log_fd))
    err = errno;
  if (err) {
    /* Refused, but the batch may sit whole in the file (its write went
     * through, its flush failed): the next owner of the log (the next
     * start after a crash, or a process taking it over) would replay what
     * every caller hears was not run, before any direct commit moves
     * LMDB's place past it. Zeros end the log there instead. */
    if (!zero_fill(e->log_fd, e->log_off, e->log_off + len))
      (void)fdatasync(e->log_fd);
    return lmdb_error(e, err);
  }
  e->log_off += len;
  return 0;
}

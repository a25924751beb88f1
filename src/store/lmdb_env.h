/*
 * lmdb_env.h - internals shared by the LMDB store files, each using only
 * the ones listed after it:
 *   lmdb.c         URI, the process-wide registry of environments, handles,
 *                  the read path (answers that need no write)
 *   lmdb_writer.c  the one writer thread per environment: group commit
 *   lmdb_logbatch.c  the writer's batches through the log
 *   lmdb_sweep.c   the expiry index and the retention sweep
 *   lmdb_log.c     the log file: ownership between processes, append,
 *                  replay into LMDB (format: lmdb_logfmt.c)
 *   lmdb_ckpt.c    the checkpointer thread: the log's records into LMDB
 *   lmdb_overlay.c records the log holds ahead of LMDB, in memory
 *   lmdb_env.c     the map lock, and MDB errors as IDEM_E codes
 *
 * LMDB allows one MDB_env per file per process, and the gateway opens one
 * store handle per loop, so handles on the same path share one lmdb_env and
 * its writer thread. Everything that writes goes through that thread.
 *
 * With the log (the default, `log=on`), the writer appends each batch to
 * the log with one write and one fdatasync and acknowledges it then; the
 * checkpointer copies what the log holds into LMDB with ordinary durable
 * commits behind it, off the request path, and the log is reset once LMDB
 * holds all of it. Records acknowledged but not yet in LMDB are served from
 * the overlay. One process at a time owns the log (lmdb_log.c); a process
 * that does not (a guest) sends everything through its writer, which first
 * takes ownership over. Near a full map, after a log failure, or with
 * `log=off`, a batch is one LMDB write transaction committed with fsync
 * before any of it is acknowledged (direct mode).
 */
#ifndef IDEM_STORE_LMDB_ENV_H
#define IDEM_STORE_LMDB_ENV_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "store/backend.h"
#include "store/lmdb.h"
#include "store/lmdb_logfmt.h"
#include "store/lmdb_overlay.h"

/* Options from the URI, fixed by the first open of a path. */
typedef struct {
  uint64_t map_size;        /* bytes; the store refuses writes past it */
  size_t batch_max;         /* most operations in one commit (1: no grouping) */
  int64_t sweep_interval_ms; /* between background sweeps; 0: no sweeper */
  size_t sweep_batch;       /* most deletions in one sweep transaction */
  int create;               /* 0: refuse a path that holds no store yet */
  int log;                  /* 0: every batch is an LMDB commit (log=off) */
} lmdb_options;

/* Who writes: see the top. */
enum { LMDB_DIRECT = 0, LMDB_OWNER = 1, LMDB_GUEST = 2 };

typedef struct lmdb_env lmdb_env;
/* The counters of idem_lmdb_stats (lmdb.h), one atomic each in the env. */
#define LMDB_COUNTERS(X)                                                                           \
  X(commits) X(commit_us) X(apply_us) X(handback_us) X(ops_written) X(ops_read) X(max_batch)      \
  X(swept) X(errors_full) X(errors_store) X(checkpoints) X(checkpoint_us) X(log_resets)

struct lmdb_env {
  char *path; /* realpath of the directory: the registry key */
  idem_queue registered; /* in lmdb.c's registry */
  int refs; /* open handles; guarded by the registry lock */
  lmdb_options opt;

  MDB_env *env;
  /* Held (read) by every transaction of this process, taken (write) to
   * remap: see lmdb_map_adopt. Writer-preferring, never taken twice. */
  pthread_rwlock_t map_lock;
  MDB_dbi records; /* scoped key -> encoded record */
  MDB_dbi expiry;  /* 8-byte expires_at -> scoped keys (DUPSORT) */
  MDB_dbi meta;    /* "format" -> magic and version */

  /* writer thread and its queue */
  pthread_t writer;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  idem_queue queue; /* writes, in submit order */
  size_t queue_len;
  size_t wake_at; /* enqueue wakes the writer when queue_len reaches this */
  idem_queue gc;    /* IDEM_OP_GC, served one chunk at a time */
  int stopping;
  /* writer-private */
  idem_req **batch;
  unsigned char *refused; /* per batch slot: refused with IDEM_EFULL */
  unsigned char *scratch; /* encoded record */
  size_t scratch_cap;
  uint64_t file_size; /* data.mdb's size when the writer last looked */

  /* the log (lmdb_log.c); log_fd -1: none, every batch is direct */
  int log_fd;
  _Atomic int mode;   /* LMDB_DIRECT, _OWNER or _GUEST */
  int log_broken;     /* a write or flush failed: direct from then on */
  uint64_t skip_seq;  /* the seq of that batch: it may be in the file, never
                         acknowledged, and must never be replayed over what
                         the direct commits after it write (apply_batch) */
  uint64_t log_off;   /* where the next batch goes (writer) */
  uint64_t log_size;  /* bytes of the file written (zeros ahead included) */
  uint64_t last_seq;  /* of the last batch flushed (writer) */
  lmdb_log_buf logbuf;
  lmdb_ov_entry **staged; /* the batch's overlay entries, batch_max of them */
  MDB_txn *wrtxn;     /* the writer's read snapshot in log mode */
  lmdb_overlay ov;
  uint64_t pruned_at; /* the ck_seq of the writer's last prune */
  int64_t owned_since; /* monotonic ms when this process took the log (writer) */
  int64_t asked_at;    /* monotonic ms of the writer's last look for a process asking for it */

  /* the checkpointer (lmdb_ckpt.c) */
  pthread_t ckpt;
  int ckpt_running;
  pthread_mutex_t ck_lock;
  pthread_cond_t ck_wake, ck_done;
  int ck_stop;
  int ck_idle;               /* the thread waits for a first batch */
  int ck_busy;               /* a checkpoint is under way */
  uint64_t ck_want;          /* a sync asks for LMDB to hold this seq */
  _Atomic uint64_t ck_have;  /* the last batch flushed in the log */
  _Atomic uint64_t ck_seq;   /* LMDB holds every batch up to this */
  _Atomic int ck_err;        /* the last checkpoint's error, 0 when it worked */
  uint64_t ck_runs;          /* checkpoints tried */

  /* counters (idem_lmdb_stats), any thread */
#define LMDB_COUNTER_FIELD(name) _Atomic uint64_t name;
  LMDB_COUNTERS(LMDB_COUNTER_FIELD)
#undef LMDB_COUNTER_FIELD
};

/* lmdb_env.c: hold the map around each transaction (begin to commit, abort
 * or reset). When a begin says MDB_MAP_RESIZED (another process grew the map
 * past this one's), lmdb_map_adopt, called holding it, remaps at the new
 * size while no transaction of this process is open, and holds it again. */
int lmdb_map_lock_init(pthread_rwlock_t *l);
void lmdb_map_hold(lmdb_env *e);
void lmdb_map_release(lmdb_env *e);
int lmdb_map_adopt(lmdb_env *e);

/* Begin a write transaction holding the map (release it after the commit
 * or abort); adopts a map another process grew. */
int lmdb_write_begin(lmdb_env *e, MDB_txn **txn);

/* lmdb.c: the live records of a LIST op from txn, into req->result.
 * Returns 0 or an MDB error. */
int lmdb_read_list(lmdb_env *e, MDB_txn *txn, idem_req *req);

/* lmdb_env.c: the monotonic clock in microseconds; a req's result emptied. */
int64_t lmdb_mono_us(void);
/* A mutex and a condition variable whose timed waits run on the monotonic
 * clock (the writer's and the checkpointer's): 0, or -1 with neither left
 * initialised. */
int lmdb_lock_init(pthread_mutex_t *m, pthread_cond_t *c);
/* The end of a thread made with them: *stop set under m and c signalled,
 * the thread joined, m and c destroyed. */
void lmdb_thread_stop(pthread_t t, pthread_mutex_t *m, pthread_cond_t *c, int *stop);
void lmdb_result_reset(idem_req *req);

/* lmdb_logbatch.c */
/* May this batch go to the log: is there room in the map for it and what
 * the log holds ahead of LMDB, and is it small enough? */
int lmdb_log_has_room(lmdb_env *e, idem_req **reqs, size_t n);
/* The batch through the log; finishes every req. */
void lmdb_log_run_batch(lmdb_env *e, idem_req **reqs, size_t n);
/* The writer: drop from the overlay what the last checkpoint put in LMDB,
 * if anything; before a batch's snapshot, and while the writer is idle. */
void lmdb_log_prune(lmdb_env *e);
/* Serve (and remove) the list ops of a batch; returns how many reqs remain. */
size_t lmdb_serve_lists(lmdb_env *e, idem_req **reqs, size_t n);
/* Finish reqs (with err, when not 0), one hand-back per loop. */
void lmdb_finish_all(lmdb_env *e, idem_req **reqs, size_t n, int err);

/* lmdb_writer.c */
int lmdb_writer_start(lmdb_env *e);
/* Queue a write (any op but get and list); the writer finishes it. */
void lmdb_writer_enqueue(lmdb_env *e, idem_req *req);
/* Drain the queue, finish every req, join the thread. */
void lmdb_writer_stop(lmdb_env *e);

/* lmdb_sweep.c */
/* Keep the expiry index in step with a record change inside txn: old is the
 * stored expiry (or INT64_MIN for none), new the one written (INT64_MIN for a
 * delete). Returns 0 or an MDB error. */
int lmdb_expiry_update(lmdb_env *e, MDB_txn *txn, const unsigned char *skey,
                       size_t skey_len, int64_t old_at, int64_t new_at);
/* Delete up to limit records whose retention ended at or before now, in txn.
 * *deleted gets how many; *more is set when expired records remain. Returns 0
 * or an MDB error. */
int lmdb_sweep(lmdb_env *e, MDB_txn *txn, int64_t now, size_t limit,
               size_t *deleted, int *more);

/* lmdb_env.c: map an MDB error to an IDEM_E code and count it. */
int lmdb_error(lmdb_env *e, int mdb_rc);

/* lmdb_ckpt.c */
/* Put (val) or delete (val NULL) key's record inside txn, with its expiry
 * index entry. Returns 0 or an MDB error. */
int lmdb_state_put(lmdb_env *e, MDB_txn *txn, const unsigned char *skey, size_t klen,
                   const unsigned char *val, size_t vlen, int64_t expires_at);
/* The last log batch LMDB holds (meta "logseq"; 0 when none). */
int lmdb_logseq_get(lmdb_env *e, MDB_txn *txn, uint64_t *seq);
int lmdb_logseq_put(lmdb_env *e, MDB_txn *txn, uint64_t seq);
int lmdb_ckpt_start(lmdb_env *e);
void lmdb_ckpt_stop(lmdb_env *e);
/* The writer flushed batch seq: a checkpoint may be due. */
void lmdb_ckpt_flushed(lmdb_env *e, uint64_t seq);
/* Wait until LMDB holds every batch flushed so far; 0 or an IDEM_E code. */
int lmdb_ckpt_sync(lmdb_env *e);

/* lmdb_log.c */
/* Open (creating) the log and try to own it; replays it when owned.
 * Leaves log_fd -1 (direct mode) when the file cannot be had. Returns 0 or
 * an IDEM_E code (a log that cannot be replayed). */
int lmdb_log_open(lmdb_env *e, char **errmsg);
void lmdb_log_close(lmdb_env *e);
/* A guest's writer takes ownership over (blocking): 0 or an IDEM_E code. */
int lmdb_log_acquire(lmdb_env *e);
/* The owner: does another process ask for the log? */
int lmdb_log_requested(lmdb_env *e);
/* The owner hands the log over: LMDB gets what it can, the overlay empties. */
void lmdb_log_yield(lmdb_env *e);
/* Append the sealed batch and flush it. 0 or an IDEM_E code. */
int lmdb_log_append(lmdb_env *e, const unsigned char *p, size_t len);

#endif

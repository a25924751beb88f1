/*
 * lmdb_env.h - internals shared by the LMDB store files, each using only
 * the ones listed after it:
 *   lmdb.c         URI, the process-wide registry of environments, handles,
 *                  the read path (answers that need no write)
 *   lmdb_writer.c  the one writer thread per environment: group commit
 *   lmdb_sweep.c   the expiry index and the retention sweep
 *   lmdb_env.c     the map lock, and MDB errors as IDEM_E codes
 *
 * LMDB allows one MDB_env per file per process, and the gateway opens one
 * store handle per loop, so handles on the same path share one lmdb_env and
 * its writer thread. Everything that writes goes through that thread, which
 * drains its queue into one write transaction and commits it with fsync
 * before any of the batch is acknowledged.
 */
#ifndef IDEM_STORE_LMDB_ENV_H
#define IDEM_STORE_LMDB_ENV_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "store/backend.h"
#include "store/lmdb.h"

/* Options from the URI, fixed by the first open of a path. */
typedef struct {
  uint64_t map_size;        /* bytes; the store refuses writes past it */
  size_t batch_max;         /* most operations in one commit (1: no grouping) */
  int64_t sweep_interval_ms; /* between background sweeps; 0: no sweeper */
  size_t sweep_batch;       /* most deletions in one sweep transaction */
  int create;               /* 0: refuse a path that holds no store yet */
} lmdb_options;

typedef struct lmdb_env lmdb_env;
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

  /* counters (idem_lmdb_stats), any thread */
  _Atomic uint64_t commits, commit_us, apply_us, handback_us, ops_written, ops_read, max_batch, swept,
      errors_full, errors_store;
};

/* lmdb_env.c: hold the map around each transaction (begin to commit, abort
 * or reset). When a begin says MDB_MAP_RESIZED (another process grew the map
 * past this one's), lmdb_map_adopt, called holding it, remaps at the new
 * size while no transaction of this process is open, and holds it again. */
int lmdb_map_lock_init(pthread_rwlock_t *l);
void lmdb_map_hold(lmdb_env *e);
void lmdb_map_release(lmdb_env *e);
int lmdb_map_adopt(lmdb_env *e);

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

#endif

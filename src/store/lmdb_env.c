/*
 * lmdb_env.c - what every part of the LMDB store does with an environment
 * it shares: hold its map around a transaction, adopt a map another process
 * grew, turn an MDB error into an IDEM_E code; and the clock and result
 * reset they share. lmdb.c (the handles and the read path), the writer,
 * checkpointer, log and sweep files use these; this file uses none of them.
 */
#include <errno.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "store/lmdb_env.h"

int64_t lmdb_mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void lmdb_result_reset(idem_req *req) {
  idem_result_clear(&req->result);
  memset(&req->result, 0, sizeof req->result);
}

int lmdb_map_lock_init(pthread_rwlock_t *l) {
  pthread_rwlockattr_t attr;
  if (pthread_rwlockattr_init(&attr))
    return -1;
  /* a remap must not wait behind an endless stream of replays */
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  int rc = pthread_rwlock_init(l, &attr);
  pthread_rwlockattr_destroy(&attr);
  return rc;
}

void lmdb_map_hold(lmdb_env *e) { pthread_rwlock_rdlock(&e->map_lock); }

void lmdb_map_release(lmdb_env *e) { pthread_rwlock_unlock(&e->map_lock); }

/* A second gateway restarted with a larger map_size (the cure for a full
 * map) writes past this process's map: adopt its size rather than fail
 * every operation until a restart. */
int lmdb_map_adopt(lmdb_env *e) {
  pthread_rwlock_unlock(&e->map_lock);
  pthread_rwlock_wrlock(&e->map_lock);
  int rc = mdb_env_set_mapsize(e->env, 0); /* 0: the size in the file's meta page */
  MDB_envinfo info;
  if (rc == 0 && mdb_env_info(e->env, &info) == 0 && info.me_mapsize > e->opt.map_size)
    e->opt.map_size = info.me_mapsize;
  pthread_rwlock_unlock(&e->map_lock);
  pthread_rwlock_rdlock(&e->map_lock);
  return rc;
}

int lmdb_write_begin(lmdb_env *e, MDB_txn **txn) {
  lmdb_map_hold(e);
  int rc = mdb_txn_begin(e->env, NULL, 0, txn);
  if (rc == MDB_MAP_RESIZED && (rc = lmdb_map_adopt(e)) == 0)
    rc = mdb_txn_begin(e->env, NULL, 0, txn);
  if (rc)
    lmdb_map_release(e);
  return rc;
}

/* LMDB reports a short write as EIO; on a disk that is (nearly) out of space
 * that is a full store, not a broken one. */
static int disk_full(const char *path) {
  struct statvfs sv;
  return statvfs(path, &sv) == 0 && (uint64_t)sv.f_bavail * sv.f_frsize < (UINT64_C(1) << 20);
}

int lmdb_error(lmdb_env *e, int rc) {
  if (rc == MDB_MAP_FULL || rc == MDB_TXN_FULL || rc == ENOSPC || rc == EDQUOT ||
      (rc == EIO && disk_full(e->path))) {
    atomic_fetch_add(&e->errors_full, 1);
    return IDEM_EFULL;
  }
  atomic_fetch_add(&e->errors_store, 1);
  return rc == ENOMEM ? IDEM_ENOMEM : IDEM_ESTORE;
}

int lmdb_lock_init(pthread_mutex_t *m, pthread_cond_t *c) {
  pthread_condattr_t attr;
  if (pthread_mutex_init(m, NULL))
    return -1;
  int bad = pthread_condattr_init(&attr);
  if (!bad) {
    bad = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) || pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
  }
  if (bad)
    pthread_mutex_destroy(m);
  return bad ? -1 : 0;
}

void lmdb_thread_stop(pthread_t t, pthread_mutex_t *m, pthread_cond_t *c, int *stop) {
  pthread_mutex_lock(m);
  *stop = 1;
  pthread_cond_signal(c);
  pthread_mutex_unlock(m);
  pthread_join(t, NULL);
  pthread_cond_destroy(c);
  pthread_mutex_destroy(m);
}

/*
 * lmdb_ckpt.c - the checkpointer: one thread per environment that owns a
 * log, copying the records the log holds ahead of LMDB (the overlay's
 * durable values) into LMDB with its ordinary durable commit, off the
 * request path.
 *
 * A checkpoint takes every durable value newer than the last checkpoint,
 * and the seq of the last batch flushed (the overlay hands both over under
 * one lock, so the values are exactly the state after that batch), writes
 * them and meta "logseq" = that seq in one write transaction, and commits
 * (data pages, fsync, meta page, fsync). After a crash the log is replayed
 * from the batch after logseq. One runs every CKPT_INTERVAL_MS while the
 * log is ahead, or at once when the writer needs LMDB to catch up (to reset
 * a full log, before gc, a list, a direct batch, or a hand-over).
 *
 * A failed checkpoint (a full map or disk) loses nothing: the log and the
 * overlay still hold it; the next try comes CKPT_RETRY_MS later, and until
 * one works the writer refuses new writes (lmdb_writer.c).
 */
#include <string.h>
#include <time.h>

#include "core/be64.h"
#include "store/lmdb_env.h"

/* Measured (lmdb_bench group 64, 3 paired runs each, a disk that flushes in
 * 0.15 ms): a checkpoint's two flushes delay the log batches queued behind
 * them on the same device. The pair p99 was 8.3 to 9.6 ms at 50 ms, 6.9 to
 * 7.8 at 250 ms, 5.6 to 6.6 at 1000 ms; pairs/s within the noise (46k to
 * 57k). Kept at 50: a longer interval holds more in the overlay and the log,
 * and gave no throughput in the gateway (0.99x at 250 ms). */
#define CKPT_INTERVAL_MS 50
#define CKPT_RETRY_MS 100

int lmdb_state_put(lmdb_env *e, MDB_txn *txn, const unsigned char *skey, size_t klen,
                   const unsigned char *val, size_t vlen, int64_t expires_at) {
  MDB_val k = {klen, (void *)skey}, v;
  int64_t old_at = INT64_MIN;
  int rc = mdb_get(txn, e->records, &k, &v);
  int had = rc == 0;
  if (rc == 0) {
    idem_record cur;
    if (idem_record_decode(v.mv_data, v.mv_size, &cur) == 0)
      old_at = cur.expires_at;
  } else if (rc != MDB_NOTFOUND) {
    return rc;
  }
  if ((rc = lmdb_expiry_update(e, txn, skey, klen, old_at, val ? expires_at : INT64_MIN)) != 0)
    return rc;
  if (!val)
    return had ? mdb_del(txn, e->records, &k, NULL) : 0;
  MDB_val nv = {vlen, (void *)val};
  return mdb_put(txn, e->records, &k, &nv, 0);
}

int lmdb_logseq_get(lmdb_env *e, MDB_txn *txn, uint64_t *seq) {
  MDB_val k = {6, "logseq"}, v;
  int rc = mdb_get(txn, e->meta, &k, &v);
  *seq = 0;
  if (rc == MDB_NOTFOUND)
    return 0;
  if (rc == 0 && v.mv_size == 8)
    *seq = idem_be64_get(v.mv_data);
  return rc;
}

int lmdb_logseq_put(lmdb_env *e, MDB_txn *txn, uint64_t seq) {
  unsigned char b[8];
  idem_be64_put(b, seq);
  MDB_val k = {6, "logseq"}, v = {8, b};
  return mdb_put(txn, e->meta, &k, &v, 0);
}

/* One checkpoint; *target gets the seq LMDB holds if it worked. */
static int checkpoint_once(lmdb_env *e, uint64_t *target) {
  lmdb_ov_item *items;
  long n = lmdb_overlay_collect(&e->ov, atomic_load(&e->ck_seq), &items, target);
  if (n < 0)
    return IDEM_ENOMEM;
  int64_t t0 = lmdb_mono_us();
  MDB_txn *txn;
  int rc = lmdb_write_begin(e, &txn);
  if (rc == 0) {
    for (long i = 0; i < n && rc == 0; i++) {
      lmdb_blob *b = items[i].val;
      rc = lmdb_state_put(e, txn, items[i].key, items[i].klen, b->del ? NULL : b->data, b->len,
                          b->expires_at);
    }
    if (rc == 0)
      rc = lmdb_logseq_put(e, txn, *target);
    if (rc == 0)
      rc = mdb_txn_commit(txn);
    else
      mdb_txn_abort(txn);
    lmdb_map_release(e);
  }
  lmdb_overlay_items_free(items, n);
  if (rc)
    return lmdb_error(e, rc);
  atomic_fetch_add(&e->checkpoints, 1);
  atomic_fetch_add(&e->checkpoint_us, (uint64_t)(lmdb_mono_us() - t0));
  return 0;
}

static void wait_ms(lmdb_env *e, int64_t until_us) {
  struct timespec ts = {.tv_sec = until_us / 1000000, .tv_nsec = (until_us % 1000000) * 1000};
  pthread_cond_timedwait(&e->ck_wake, &e->ck_lock, &ts);
}

static void *ckpt_main(void *arg) {
  lmdb_env *e = arg;
  pthread_setname_np(pthread_self(), "idem-lmdb-ckpt");
  int64_t next = 0; /* when the next timed checkpoint may run */
  pthread_mutex_lock(&e->ck_lock);
  while (!e->ck_stop) {
    uint64_t have = atomic_load(&e->ck_have), done = atomic_load(&e->ck_seq);
    /* only the owner checkpoints: a guest's LMDB writes could undo the
     * owner's (lmdb_log_yield waits for one under way) */
    int behind = have > done && atomic_load(&e->mode) == LMDB_OWNER;
    int now_due = behind && (e->ck_want > done || lmdb_mono_us() >= next);
    if (!now_due) {
      if (behind) {
        wait_ms(e, next);
      } else {
        e->ck_idle = 1;
        pthread_cond_wait(&e->ck_wake, &e->ck_lock);
        e->ck_idle = 0;
        /* a first batch: let others join it (a sync asks for one at once) */
        next = lmdb_mono_us() + CKPT_INTERVAL_MS * 1000;
      }
      continue;
    }
    e->ck_busy = 1;
    pthread_mutex_unlock(&e->ck_lock);
    uint64_t target = 0;
    int err = checkpoint_once(e, &target);
    pthread_mutex_lock(&e->ck_lock);
    e->ck_busy = 0;
    if (!err && target > atomic_load(&e->ck_seq))
      atomic_store(&e->ck_seq, target);
    atomic_store(&e->ck_err, err);
    e->ck_runs++;
    /* a failure waits before the next try, whoever asks */
    next = lmdb_mono_us() + (err ? CKPT_RETRY_MS : CKPT_INTERVAL_MS) * 1000;
    if (err)
      e->ck_want = 0;
    pthread_cond_broadcast(&e->ck_done);
  }
  pthread_mutex_unlock(&e->ck_lock);
  return NULL;
}

int lmdb_ckpt_start(lmdb_env *e) {
  if (lmdb_lock_init(&e->ck_lock, &e->ck_wake))
    return IDEM_ENOMEM;
  if (pthread_cond_init(&e->ck_done, NULL)) {
    pthread_cond_destroy(&e->ck_wake);
    pthread_mutex_destroy(&e->ck_lock);
    return IDEM_ENOMEM;
  }
  if (pthread_create(&e->ckpt, NULL, ckpt_main, e)) {
    pthread_cond_destroy(&e->ck_done);
    pthread_cond_destroy(&e->ck_wake);
    pthread_mutex_destroy(&e->ck_lock);
    return IDEM_ENOMEM;
  }
  e->ckpt_running = 1;
  return 0;
}

void lmdb_ckpt_stop(lmdb_env *e) {
  if (!e->ckpt_running)
    return;
  lmdb_thread_stop(e->ckpt, &e->ck_lock, &e->ck_wake, &e->ck_stop);
  pthread_cond_destroy(&e->ck_done);
  e->ckpt_running = 0;
}

void lmdb_ckpt_flushed(lmdb_env *e, uint64_t seq) {
  atomic_store(&e->ck_have, seq);
  /* the thread sleeps on its timer while LMDB is behind: wake it only when
   * it sleeps for want of work (one wake-up per checkpoint, not per batch) */
  pthread_mutex_lock(&e->ck_lock);
  if (e->ck_idle) {
    e->ck_idle = 0;
    pthread_cond_signal(&e->ck_wake);
  }
  pthread_mutex_unlock(&e->ck_lock);
}

int lmdb_ckpt_sync(lmdb_env *e) {
  if (!e->ckpt_running)
    return 0;
  pthread_mutex_lock(&e->ck_lock);
  uint64_t goal = atomic_load(&e->ck_have), runs = e->ck_runs;
  int err = 0;
  while (atomic_load(&e->ck_seq) < goal && atomic_load(&e->mode) == LMDB_OWNER) {
    if (e->ck_runs > runs && (err = atomic_load(&e->ck_err)) != 0)
      break; /* a try made after this call failed */
    if (e->ck_want < goal)
      e->ck_want = goal;
    e->ck_idle = 0;
    pthread_cond_signal(&e->ck_wake);
    pthread_cond_wait(&e->ck_done, &e->ck_lock);
  }
  pthread_mutex_unlock(&e->ck_lock);
  return err;
}

/*
 * lmdb_writer.c - the one writer thread of an LMDB environment: group commit.
 *
 * Handles on any loop queue their writes here. Each turn the writer takes
 * everything queued (up to batch_max) and makes it durable in one of two
 * ways before it finishes any of the reqs, so the cost of one flush is
 * shared by every request that arrived while the previous one ran:
 *
 * - log mode (the owner of the log, room in the map): log_batch applies the
 *   batch against the overlay and a read snapshot of LMDB, appends the new
 *   record states to the log with one write and one fdatasync (lmdb_log.c),
 *   promotes them in the overlay and hands every loop its results with one
 *   wake-up. LMDB gets them later from the checkpointer (lmdb_ckpt.c). The
 *   writer alone removes overlay entries LMDB holds (at the start of a
 *   batch, before its snapshot), so a miss in the overlay means the
 *   snapshot has the record.
 * - direct mode (log=off, near a full map, a huge batch, a broken log):
 *   apply_batch applies it in one write transaction and commits it (LMDB's
 *   default: data pages, fsync, meta page, fsync), after LMDB has caught up
 *   with the log. What follows about full maps and the measurements below
 *   are about this mode, the only one before the log.
 *
 * Either way the writer re-reads each record and re-runs idem_transition:
 * the caller's read snapshot may be stale.
 *
 * Gathering: right after a commit, the callers it acknowledged are busy
 * running callbacks and most will submit again within microseconds. Had the
 * writer started the next transaction on the first of them, it would commit
 * a batch of one and make the rest wait a whole fsync; so when fewer are
 * queued than the last batch held, it waits for them, at most a fraction of
 * the last commit's duration (GATHER_*). Under light load the last batch
 * was small and nothing waits.
 *
 * Zeroed space ahead: a commit that appends pages past the end of data.mdb
 * changes the file's size, and then its fdatasync must also commit the file
 * system's journal (measured on ext4: about 40% of the time of a commit of 64
 * operations). So between batches the writer keeps PREALLOC_AHEAD bytes of
 * written zeros past the last used page, a PREALLOC_STEP at a time, inside a
 * write transaction (which holds LMDB's writer lock against other processes
 * that might be appending pages). LMDB ignores what lies past its last page.
 * The writer does not stat the file to decide (see prealloc_held): a stat
 * would make every commit's fdatasync write the inode as well.
 *
 * A full map (MDB_MAP_FULL) fails the transaction as a whole; the writer
 * aborts it, refuses the operation that did not fit with IDEM_EFULL and
 * retries the rest, so one oversized response cannot take a batch down. (If
 * the commit itself runs out of room, every op of that batch gets IDEM_EFULL.)
 * A full disk is IDEM_EFULL too; every refusal is counted (idem_lmdb_stats).
 *
 * Between batches the writer runs retention: one chunk (sweep_batch records,
 * one short transaction) of an IDEM_OP_GC request or of the background sweep,
 * then serves the queue again, so a long sweep never stalls claims for more
 * than one chunk.
 *
 * Measured and not done (2-core shared machine, lmdb_bench group 64):
 * - A commit is one pwrite run of the dirty pages (about 12 pages for 64
 *   operations on a young store), one fdatasync, and the 120-byte meta page
 *   written through LMDB's O_DSYNC descriptor: two device flushes, both
 *   needed for a crash to find either the old or the new tree. That is the
 *   floor of a cycle.
 * - MDB_WRITEMAP: no gain beyond the noise (medians 19.0k vs 18.6k pairs/s
 *   over 4 alternating runs). liblmdb 0.9 then ftruncates data.mdb to the
 *   whole map size (a sparse 4 GiB file), so new pages land in holes and the
 *   zeroed space ahead no longer spares the journal commit; a full disk
 *   becomes SIGBUS in this thread instead of IDEM_EFULL; a stray write
 *   anywhere in the process can corrupt the store silently; and a process
 *   opening it without the flag defeats durability (LMDB's docs).
 * - MDB_NOMETASYNC, each batch acknowledged once the next commit's
 *   fdatasync has covered its meta page: every operation still waits for
 *   two flushes, and callers that submit again only when answered (the
 *   gateway's claim then complete) split into two alternating half batches:
 *   same throughput, one more moving part.
 * - No gather wait: 25 operations per commit instead of 63 and half the
 *   pairs/s; a window of half the last commit instead of a quarter: no
 *   difference.
 * - Opening the transaction on the first op and applying the others while
 *   gathering (so only the last few remain to apply when the batch is
 *   whole): within the noise (medians 28.6k vs 27.1k pairs/s over 6
 *   alternating runs); not worth the second code path it needs for a full
 *   map found mid-gather.
 * - Spinning (sched_yield) instead of sleeping while gathering: fewer
 *   operations per commit and fewer pairs/s; on two cores the spinner takes
 *   the CPU from the loop thread that is about to submit.
 * - Where a cycle of 64 goes outside LMDB's commit (timers in this loop,
 *   0.5-0.6 ms of 1.4-1.5 ms): waiting for the first op after handing the
 *   results back 0.18-0.27 ms, for the rest 0.10-0.15 ms, applying 0.13-
 *   0.15 ms, handing back 0.05-0.10 ms. The first wait is mostly a cross-CPU
 *   wake-up: with the bench pinned to one CPU it is 0.03 ms, and on this VM
 *   an eventfd ping-pong between two threads takes 8 us a round trip on one
 *   CPU but 200-290 us across the two. Pinning is the deployer's choice,
 *   not the library's.
 * - Handing a batch to each loop as one chain (one lock, one wake-up)
 *   instead of a req at a time: no difference (uv_async_send already
 *   coalesces the wake-ups).
 * - Measured again after the fstat fix (cycle 0.78-0.96 ms, of which LMDB's
 *   commit 0.53-0.64, applying 0.10-0.12, handing back 0.02, the rest waiting
 *   for the loop to run 64 callbacks): sleeping from the hand-back until the
 *   whole batch is back (one wake-up instead of two) together with the chain
 *   hand-back: mean +8% over 10 alternating rounds whose spread was +-30%,
 *   not kept. MDB_NOMETASYNC with a batch acknowledged by the next commit's
 *   flush, or by mdb_env_sync when nothing else is queued: 29 operations
 *   per commit and fewer pairs/s (a one-flush commit still costs 0.36-0.5
 *   ms). Applying operations as they arrive while spinning (no sleep) until
 *   the batch is back: 47 operations per commit, fewer pairs/s.
 * - With the log, a flusher thread (efe8751, reverted): the writer appends
 *   a batch and applies the next while a third thread flushes, one
 *   fdatasync for all it finds appended. Paired against the build before:
 *   0.91x gateway unique keys at 64 connections, 0.95x at 256, 0.94x
 *   lmdb_bench (bench/results/ab_pipelined_flush.md). Batches shrink, and
 *   the extra hand-off costs more than the overlap on two cores.
 * - The gather window at an eighth or a half of the last cycle instead of a
 *   quarter, on a disk that flushes in 0.15 ms (cycle 0.45 ms): 1.003x and
 *   0.999x the gateway's unique keys on LMDB at 64 connections (ab_bench,
 *   10 and 6 paired rounds). The window does not set the pace there.
 * - The bench now reports the ceiling these figures set: a batch commit
 *   costs about 1.2x a single one inside LMDB (same two flushes, twice the
 *   bytes), so even a writer that never waited for its callers would reach
 *   43x to 50x in the runs so far, and 50x leaves less time outside the
 *   commit than applying a batch of 64 takes.
 * - This thread at nice -10 (renice by thread id, root): the gateway's
 *   unique keys at 64 connections 0.90x to 1.05x over 4 paired rounds. Its
 *   wake-ups after a flush do not wait for a CPU; the flush itself sets
 *   the pace.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/scoped_key.h"
#include "store/lmdb_env.h"

/* how often an idle owner looks for a process asking for the log */
#define OWNER_POLL_MS 20
#define OWN_MIN_MS 20

#define PREALLOC_AHEAD (UINT64_C(4) << 20)
#define PREALLOC_STEP (UINT64_C(1) << 20)

/* the gather wait: a quarter of the last commit, and never above 2 ms */
#define GATHER_SHARE 4
#define GATHER_MAX_US 2000

static int64_t mono_ms(void) { return lmdb_mono_us() / 1000; }

/* Wait on the writer's condition until the monotonic time `until` (us). */
static void wait_until_us(lmdb_env *e, int64_t until) {
  struct timespec ts = {.tv_sec = until / 1000000, .tv_nsec = (until % 1000000) * 1000};
  pthread_cond_timedwait(&e->wake, &e->lock, &ts);
}

static int scratch_reserve(lmdb_env *e, size_t len) {
  if (len <= e->scratch_cap)
    return 0;
  size_t cap = e->scratch_cap ? e->scratch_cap : 4096;
  while (cap < len)
    cap *= 2;
  unsigned char *p = realloc(e->scratch, cap);
  if (!p)
    return ENOMEM;
  e->scratch = p;
  e->scratch_cap = cap;
  return 0;
}

/* Apply one operation inside txn. Outcomes that belong to the request (stale
 * fence, corrupt record, not found) go into req->result and return 0; an MDB
 * error that spoils the transaction is returned. */
static int apply_one(lmdb_env *e, MDB_txn *txn, idem_req *req, int64_t now) {
  const idem_op *op = &req->op;
  idem_result *res = &req->result;
  unsigned char skey[IDEM_SCOPED_KEY_MAX];
  MDB_val k = {idem_scoped_key_encode(op->scope, op->key, skey), skey}, v;
  idem_record cur, *curp = NULL;

  int rc = mdb_get(txn, e->records, &k, &v);
  if (rc == 0) {
    int err = idem_record_decode(v.mv_data, v.mv_size, &cur);
    if (err && op->kind != IDEM_OP_DELETE) {
      atomic_fetch_add(&e->errors_store, 1);
      res->err = err;
      return 0;
    }
    curp = err ? NULL : &cur;
    if (err) /* delete removes even an unreadable record */
      cur.expires_at = INT64_MIN;
  } else if (rc != MDB_NOTFOUND) {
    return rc;
  }

  if (op->kind == IDEM_OP_DELETE) {
    if (rc == MDB_NOTFOUND) {
      res->err = IDEM_ENOTFOUND;
      return 0;
    }
    if ((rc = lmdb_expiry_update(e, txn, skey, k.mv_size, cur.expires_at, INT64_MIN)) != 0)
      return rc;
    if ((rc = mdb_del(txn, e->records, &k, NULL)) != 0)
      return rc;
    res->count = 1;
    return 0;
  }

  idem_record next;
  int write = idem_transition(curp, op, now, &next, res);
  if (res->record) { /* borrowed from cur, which lives in the map: copy it */
    const idem_record *shown = res->record;
    res->record = NULL;
    if (idem_result_set_record(res, shown, op->scope, op->key)) {
      lmdb_result_reset(req);
      res->err = IDEM_ENOMEM;
      return 0;
    }
  }
  if (write != IDEM_WRITE_PUT || res->err)
    return 0;
  /* encode before touching the map: next borrows from cur */
  size_t len = idem_record_encoded_len(&next);
  if (scratch_reserve(e, len)) {
    lmdb_result_reset(req);
    res->err = IDEM_ENOMEM;
    return 0;
  }
  idem_record_encode(&next, e->scratch);
  int64_t old_at = curp ? cur.expires_at : INT64_MIN;
  if ((rc = lmdb_expiry_update(e, txn, skey, k.mv_size, old_at, next.expires_at)) != 0)
    return rc;
  MDB_val nv = {len, e->scratch};
  return mdb_put(txn, e->records, &k, &nv, 0);
}

/* After a failed log append, the refused batch may sit whole in the file
 * with the seq after LMDB's logseq: a replay (the next start, or a process
 * taking the log over) would lay it over what direct commits wrote since.
 * So the first of them moves logseq past it, in the same commit. LMDB holds
 * every batch before it by then (run_batch syncs the checkpointer first). */
static int pass_skipped_batch(lmdb_env *e, MDB_txn *txn) {
  uint64_t have;
  if (!e->skip_seq)
    return 0;
  int rc = lmdb_logseq_get(e, txn, &have);
  if (rc == 0 && have < e->skip_seq)
    rc = lmdb_logseq_put(e, txn, e->skip_seq);
  return rc;
}

/* One durable transaction for reqs[0..n); finishes every req. */
static void apply_batch(lmdb_env *e, idem_req **reqs, size_t n) {
  memset(e->refused, 0, n);
  for (;;) {
    MDB_txn *txn;
    int64_t t0 = lmdb_mono_us();
    int rc = lmdb_write_begin(e, &txn);
    size_t i = 0;
    if (rc == 0) {
      int64_t now = idem_now_ms();
      for (; i < n; i++) {
        if (e->refused[i])
          continue;
        lmdb_result_reset(reqs[i]);
        if ((rc = apply_one(e, txn, reqs[i], now)) != 0)
          break;
      }
      if (rc == MDB_MAP_FULL || rc == MDB_TXN_FULL) {
        /* the txn is spoilt: drop the op that did not fit, redo the rest */
        mdb_txn_abort(txn);
        lmdb_map_release(e);
        e->refused[i] = 1;
        idem_req_fail(reqs[i], lmdb_error(e, rc));
        continue;
      }
      if (rc == 0)
        rc = pass_skipped_batch(e, txn);
      if (rc == 0) {
        int64_t t1 = lmdb_mono_us();
        atomic_fetch_add(&e->apply_us, (uint64_t)(t1 - t0));
        rc = mdb_txn_commit(txn); /* frees txn, whatever it returns */
        atomic_fetch_add(&e->commit_us, (uint64_t)(lmdb_mono_us() - t1));
      } else
        mdb_txn_abort(txn);
      lmdb_map_release(e);
    }
    if (rc) {
      int err = lmdb_error(e, rc);
      for (i = 0; i < n; i++)
        if (!e->refused[i])
          idem_req_fail(reqs[i], err);
      return;
    }
    size_t done = 0;
    int64_t t2 = lmdb_mono_us();
    for (i = 0; i < n; i++)
      if (!e->refused[i]) {
        idem_req_finish(reqs[i]);
        done++;
      }
    atomic_fetch_add(&e->handback_us, (uint64_t)(lmdb_mono_us() - t2));
    atomic_fetch_add(&e->commits, 1);
    atomic_fetch_add(&e->ops_written, done);
    if (done > atomic_load(&e->max_batch))
      atomic_store(&e->max_batch, done);
    return;
  }
}

/* A batch in whichever mode fits it (see lmdb_env.h). */
static void run_batch(lmdb_env *e, idem_req **reqs, size_t n) {
  if (e->log_fd >= 0)
    n = lmdb_serve_lists(e, reqs, n);
  if (!n)
    return;
  int owner = atomic_load(&e->mode) == LMDB_OWNER;
  if (owner && !e->log_broken && !atomic_load(&e->ck_err) && lmdb_log_has_room(e, reqs, n)) {
    lmdb_log_run_batch(e, reqs, n);
    return;
  }
  if (owner) { /* direct, after LMDB holds everything the log does */
    int err = lmdb_ckpt_sync(e);
    if (err) {
      lmdb_finish_all(e, reqs, n, err);
      return;
    }
    lmdb_overlay_prune(&e->ov, atomic_load(&e->ck_seq));
  }
  apply_batch(e, reqs, n);
}

/* Keep zeroed space past the last used page (see the top); one step per
 * call. Failures (a full disk) only mean commits that grow the file.
 *
 * The check after each commit uses the size this thread last saw, not an
 * fstat: on Linux 6.13+ (multigrain timestamps) a stat makes the next write
 * stamp the file with a fine-grained mtime, so every commit's fdatasync
 * would also write the inode (measured: one inode write per commit). A
 * size grown meanwhile by another process only costs a needless look. */
static void prealloc_held(lmdb_env *e) {
  MDB_envinfo info;
  MDB_stat st;
  mdb_filehandle_t fd;
  struct stat fst;
  if (mdb_env_info(e->env, &info) || mdb_env_stat(e->env, &st) || mdb_env_get_fd(e->env, &fd))
    return;
  uint64_t used = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
  if (e->file_size >= used + PREALLOC_AHEAD || e->file_size + PREALLOC_STEP > e->opt.map_size)
    return;
  MDB_txn *txn; /* the writer lock: no other process appends pages meanwhile */
  if (mdb_txn_begin(e->env, NULL, 0, &txn))
    return;
  if (mdb_env_info(e->env, &info) == 0 && fstat(fd, &fst) == 0) {
    used = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    uint64_t size = (uint64_t)fst.st_size, off;
    if (size < used)
      size = used;
    e->file_size = size;
    if (size < used + PREALLOC_AHEAD && size + PREALLOC_STEP <= e->opt.map_size) {
      static const char zeros[65536];
      for (off = size; off < size + PREALLOC_STEP; off += sizeof zeros)
        if (pwrite(fd, zeros, sizeof zeros, (off_t)off) != (ssize_t)sizeof zeros)
          break;
      e->file_size = off;
    }
  }
  mdb_txn_abort(txn);
}

static void prealloc_step(lmdb_env *e) {
  lmdb_map_hold(e); /* env info reads the map */
  prealloc_held(e);
  lmdb_map_release(e);
}

/* One retention chunk in its own transaction. Returns 0 or an IDEM_E code. */
static int sweep_chunk(lmdb_env *e, size_t limit, size_t *deleted, int *more) {
  MDB_txn *txn;
  *deleted = 0;
  *more = 0;
  int rc = lmdb_write_begin(e, &txn);
  if (rc)
    return lmdb_error(e, rc);
  rc = lmdb_sweep(e, txn, idem_now_ms(), limit, deleted, more);
  if (rc || *deleted == 0)
    mdb_txn_abort(txn); /* nothing changed: no need to sync */
  else
    rc = mdb_txn_commit(txn);
  lmdb_map_release(e);
  if (rc) {
    *deleted = 0;
    return lmdb_error(e, rc);
  }
  atomic_fetch_add(&e->swept, *deleted);
  return 0;
}

/* Serve one chunk of the oldest IDEM_OP_GC request; finish it when done. */
static void gc_step(lmdb_env *e, idem_req *gc) {
  /* what the log holds ahead of LMDB may have expired too */
  int cerr = e->log_fd >= 0 ? lmdb_ckpt_sync(e) : 0;
  size_t limit = gc->op.limit ? gc->op.limit : 1000;
  size_t want = limit - gc->result.count, deleted;
  if (want > e->opt.sweep_batch)
    want = e->opt.sweep_batch;
  int more = 0;
  int err = cerr ? cerr : sweep_chunk(e, want, &deleted, &more);
  if (cerr)
    deleted = 0;
  gc->result.count += deleted;
  if (!err && more && gc->result.count < limit)
    return; /* next turn */
  pthread_mutex_lock(&e->lock);
  idem_queue_remove(&gc->node);
  pthread_mutex_unlock(&e->lock);
  if (err)
    idem_req_fail(gc, err);
  else
    idem_req_finish(gc);
}

/* Another process asks for the log, and this one has had it long enough
 * to have served a few batches: processes that write at once then take
 * turns of OWN_MIN_MS rather than of one batch (each turn costs a
 * checkpoint). The lock table is asked at most every OWNER_POLL_MS: under
 * load the writer turns thousands of times a second, and the answer can
 * wait that long. */
static int handover_due(lmdb_env *e) {
  if (atomic_load(&e->mode) != LMDB_OWNER || atomic_load(&e->ck_err))
    return 0; /* LMDB cannot take the log in (lmdb_log_yield) */
  int64_t now = mono_ms();
  if (now - e->owned_since < OWN_MIN_MS || now - e->asked_at < OWNER_POLL_MS)
    return 0;
  e->asked_at = now;
  return lmdb_log_requested(e);
}

/* What the writer thread remembers from one turn to the next. */
typedef struct {
  int64_t interval;   /* sweep_interval_ms; 0: no sweeper */
  int64_t next_sweep; /* mono_ms() of the next sweep */
  int sweeping;
  size_t last_batch;
  int64_t last_commit_us;
} writer_state;

/* Under e->lock: wait until there is work (a batch, a gc, a sweep due, a
 * stop). Returns 1 when another process asks for the log instead. */
static int wait_for_work(lmdb_env *e, const writer_state *w) {
  while (idem_queue_empty(&e->queue) && idem_queue_empty(&e->gc) && !w->sweeping &&
         !e->stopping) {
    e->wake_at = 1;
    int owner = atomic_load(&e->mode) == LMDB_OWNER;
    if (!w->interval && !owner) {
      pthread_cond_wait(&e->wake, &e->lock);
      continue;
    }
    if (w->interval && mono_ms() >= w->next_sweep)
      return 0; /* the sweep is due: the top of the loop starts it */
    int64_t until = w->interval ? w->next_sweep * 1000 : INT64_MAX;
    if (owner && lmdb_mono_us() + OWNER_POLL_MS * 1000 < until)
      until = lmdb_mono_us() + OWNER_POLL_MS * 1000;
    wait_until_us(e, until);
    if (owner && handover_due(e))
      return 1;
    if (owner && atomic_load(&e->ck_seq) > e->pruned_at) {
      /* idle, and a checkpoint since the last prune: what LMDB now holds
       * need not stay in memory (the lock is dropped only then) */
      pthread_mutex_unlock(&e->lock);
      lmdb_log_prune(e);
      pthread_mutex_lock(&e->lock);
    }
  }
  return 0;
}

/* Under e->lock: gather the callers the last commit acknowledged (see the
 * top), then take up to batch_max requests into e->batch: how many. */
static size_t take_batch(lmdb_env *e, const writer_state *w) {
  if (e->queue_len && e->queue_len < w->last_batch && !e->stopping) {
    int64_t window = w->last_commit_us / GATHER_SHARE;
    int64_t until = lmdb_mono_us() + (window < GATHER_MAX_US ? window : GATHER_MAX_US);
    e->wake_at = w->last_batch < e->opt.batch_max ? w->last_batch : e->opt.batch_max;
    while (e->queue_len < e->wake_at && !e->stopping && lmdb_mono_us() < until)
      wait_until_us(e, until);
  }
  e->wake_at = SIZE_MAX; /* busy: enqueue need not signal */
  size_t n = 0;
  while (n < e->opt.batch_max && !idem_queue_empty(&e->queue))
    e->batch[n++] = idem_req_of(idem_queue_pop(&e->queue));
  e->queue_len -= n;
  return n;
}

/* A guest with work takes the log first (waiting for the owning process);
 * when it cannot, the batch and the gc request fail with its error. */
static void own_for_work(lmdb_env *e, size_t *n, idem_req **gc) {
  if ((!*n && !*gc) || atomic_load(&e->mode) != LMDB_GUEST)
    return;
  int err = lmdb_log_acquire(e);
  e->owned_since = mono_ms();
  if (!err)
    return;
  lmdb_finish_all(e, e->batch, *n, err);
  *n = 0;
  if (*gc) {
    pthread_mutex_lock(&e->lock);
    idem_queue_remove(&(*gc)->node);
    pthread_mutex_unlock(&e->lock);
    idem_req_fail(*gc, err);
    *gc = NULL;
  }
}

/* One turn's work, outside the lock: the batch, then a gc step or a sweep
 * step. */
static void do_work(lmdb_env *e, writer_state *w, size_t n, idem_req *gc) {
  if (n) {
    int64_t t0 = lmdb_mono_us();
    run_batch(e, e->batch, n);
    w->last_commit_us = lmdb_mono_us() - t0;
    w->last_batch = n;
    prealloc_step(e);
  }
  if (gc) {
    gc_step(e, gc);
  } else if (w->sweeping) {
    size_t deleted;
    int more;
    if (sweep_chunk(e, e->opt.sweep_batch, &deleted, &more) || !more) {
      w->sweeping = 0;
      w->next_sweep = mono_ms() + w->interval;
    }
  }
  if (handover_due(e))
    lmdb_log_yield(e);
}

/* Closing, under e->lock (released here): LMDB made whole, and a gc
 * request still running reports what it deleted so far. */
static void writer_end(lmdb_env *e) {
  if (atomic_load(&e->mode) == LMDB_OWNER)
    lmdb_ckpt_sync(e); /* not needed for safety (the log is replayed), but a
                          closed store's LMDB is then whole for other programs */
  idem_queue gcs;
  idem_queue_move(&e->gc, &gcs);
  pthread_mutex_unlock(&e->lock);
  idem_req *gc;
  while ((gc = idem_req_of(idem_queue_pop(&gcs))))
    idem_req_finish(gc);
}

static void *writer_main(void *arg) {
  lmdb_env *e = arg;
  pthread_setname_np(pthread_self(), "idem-lmdb-write"); /* 15 chars at most */
  writer_state w = {.interval = e->opt.sweep_interval_ms};
  w.next_sweep = mono_ms() + w.interval;
  pthread_mutex_lock(&e->lock);
  for (;;) {
    if (w.interval && !w.sweeping && mono_ms() >= w.next_sweep) {
      w.sweeping = 1;
      /* reader slots of processes killed mid-read (an `idem keys` under
       * kill -9) pin old pages and make the file grow: free them */
      int dead;
      mdb_reader_check(e->env, &dead);
    }
    if (wait_for_work(e, &w)) { /* another process waits for the log */
      pthread_mutex_unlock(&e->lock);
      lmdb_log_yield(e);
      pthread_mutex_lock(&e->lock);
      continue;
    }
    if (e->stopping && idem_queue_empty(&e->queue))
      break;
    size_t n = take_batch(e, &w);
    idem_req *gc = idem_req_of(idem_queue_head(&e->gc));
    pthread_mutex_unlock(&e->lock);
    own_for_work(e, &n, &gc);
    do_work(e, &w, n, gc);
    pthread_mutex_lock(&e->lock);
  }
  writer_end(e);
  return NULL;
}

int lmdb_writer_start(lmdb_env *e) {
  idem_queue_init(&e->queue);
  idem_queue_init(&e->gc);
  e->batch = calloc(e->opt.batch_max, sizeof *e->batch);
  e->refused = calloc(e->opt.batch_max, 1);
  e->staged = calloc(e->opt.batch_max, sizeof *e->staged);
  if (!e->batch || !e->refused || !e->staged)
    goto fail;
  if (e->log_fd >= 0 && lmdb_ckpt_start(e))
    goto fail;
  if (lmdb_lock_init(&e->lock, &e->wake))
    goto fail_ckpt;
  e->wake_at = 1;
  if (pthread_create(&e->writer, NULL, writer_main, e)) {
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->lock);
    goto fail_ckpt;
  }
  return 0;
fail_ckpt:
  lmdb_ckpt_stop(e);
fail:
  free(e->batch);
  free(e->refused);
  free(e->staged);
  e->batch = NULL;
  e->refused = NULL;
  e->staged = NULL;
  return IDEM_ENOMEM;
}

void lmdb_writer_enqueue(lmdb_env *e, idem_req *req) {
  pthread_mutex_lock(&e->lock);
  int wake;
  if (req->op.kind == IDEM_OP_GC) {
    idem_queue_insert_tail(&e->gc, &req->node);
    wake = 1;
  } else {
    idem_queue_insert_tail(&e->queue, &req->node);
    wake = ++e->queue_len >= e->wake_at;
  }
  /* one wake-up per gathered batch, not one per request */
  if (wake)
    pthread_cond_signal(&e->wake);
  pthread_mutex_unlock(&e->lock);
}

void lmdb_writer_stop(lmdb_env *e) {
  lmdb_thread_stop(e->writer, &e->lock, &e->wake, &e->stopping);
  lmdb_ckpt_stop(e);
  if (e->wrtxn)
    mdb_txn_abort(e->wrtxn);
  e->wrtxn = NULL;
  free(e->batch);
  free(e->refused);
  free(e->staged);
  free(e->scratch);
}

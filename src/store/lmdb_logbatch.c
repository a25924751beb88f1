/*
 * lmdb_logbatch.c - a batch through the log (the writer's log mode, see
 * lmdb_writer.c): applied against the overlay and a read snapshot of LMDB,
 * appended to the log with one write and one fdatasync, promoted in the
 * overlay, and handed back to each loop at once. Also when a batch may go
 * this way (room in the map), and the list ops that reach the writer.
 */
#include <string.h>

#include "core/scoped_key.h"
#include "store/lmdb_env.h"

/* Room LMDB must have before a batch may go to the log: what the overlay
 * and the batch will need when checkpointed, doubled (copy-on-write pages,
 * the expiry index), plus a margin. Below it batches are direct, so a full
 * map is refused per operation, before anything is acknowledged. Space LMDB
 * freed inside the file is not counted: near its high-water mark a store is
 * direct. */
#define ROOM_PER_OP (UINT64_C(16) << 10)
#define ROOM_MARGIN (UINT64_C(16) << 20)
/* a batch bigger than this goes direct rather than fill the log */
#define LOG_BATCH_BYTES_MAX (UINT64_C(16) << 20)

static uint64_t batch_bytes(idem_req **reqs, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i++)
    sum += 600 + reqs[i]->op.response.headers_len + reqs[i]->op.response.body_len;
  return sum;
}

int lmdb_log_has_room(lmdb_env *e, idem_req **reqs, size_t n) {
  uint64_t bytes = batch_bytes(reqs, n);
  if (bytes > LOG_BATCH_BYTES_MAX)
    return 0;
  MDB_envinfo info;
  MDB_stat st;
  lmdb_map_hold(e);
  int rc = mdb_env_info(e->env, &info) || mdb_env_stat(e->env, &st);
  lmdb_map_release(e);
  if (rc)
    return 0;
  uint64_t used = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
  uint64_t map = info.me_mapsize;
  pthread_mutex_lock(&e->ov.lock);
  uint64_t need = 2 * (e->ov.bytes + bytes) + (e->ov.count + n) * ROOM_PER_OP + ROOM_MARGIN;
  pthread_mutex_unlock(&e->ov.lock);
  return used < map && map - used >= need;
}

/* The record of a key as the writer must see it: the overlay's latest
 * value, else LMDB's. *blob holds a reference to unref after use; *found is
 * 0 when there is no record. Returns 0 or an MDB error. */
static int log_read(lmdb_env *e, const unsigned char *skey, size_t klen, lmdb_blob **blob,
                    MDB_val *v, int *found) {
  *blob = lmdb_overlay_latest(&e->ov, skey, klen);
  if (*blob) {
    *found = !(*blob)->del;
    v->mv_data = (*blob)->data;
    v->mv_size = (*blob)->len;
    return 0;
  }
  MDB_val k = {klen, (void *)skey};
  int rc = mdb_get(e->wrtxn, e->records, &k, v);
  *found = rc == 0;
  return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Log one record state and stage it in the overlay (the overlay takes b). */
static int log_stage(lmdb_env *e, const unsigned char *skey, size_t klen, lmdb_blob *b,
                     size_t *nstaged) {
  size_t len = e->logbuf.len;
  uint32_t count = e->logbuf.count;
  if (lmdb_log_buf_add(&e->logbuf, b->del ? LMDB_LOG_DEL : LMDB_LOG_PUT, skey, klen,
                       b->del ? NULL : b->data, b->len, b->expires_at)) {
    lmdb_blob_unref(b);
    return IDEM_ENOMEM;
  }
  lmdb_ov_entry *en = lmdb_overlay_stage(&e->ov, skey, klen, b);
  if (!en) {
    e->logbuf.len = len; /* not logged either */
    e->logbuf.count = count;
    lmdb_blob_unref(b);
    return IDEM_ENOMEM;
  }
  e->staged[(*nstaged)++] = en;
  return 0;
}

/* What apply_one does, against the overlay and the writer's snapshot, the
 * change going to the log batch instead of a write transaction. */
static int log_apply_one(lmdb_env *e, idem_req *req, int64_t now, size_t *nstaged) {
  const idem_op *op = &req->op;
  idem_result *res = &req->result;
  unsigned char skey[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode(op->scope, op->key, skey);
  lmdb_blob *held;
  MDB_val v;
  int found;
  int rc = log_read(e, skey, klen, &held, &v, &found);
  if (rc)
    return rc;
  idem_record cur, *curp = NULL;
  int err = found ? idem_record_decode(v.mv_data, v.mv_size, &cur) : 0;
  if (found && !err)
    curp = &cur;
  if (err && op->kind != IDEM_OP_DELETE) {
    atomic_fetch_add(&e->errors_store, 1);
    res->err = err;
    goto out;
  }
  if (op->kind == IDEM_OP_DELETE) {
    lmdb_blob *b = found ? lmdb_blob_new(0) : NULL;
    if (!found)
      res->err = IDEM_ENOTFOUND;
    else if (!b)
      res->err = IDEM_ENOMEM;
    else {
      b->del = 1;
      b->expires_at = INT64_MIN;
      if ((res->err = log_stage(e, skey, klen, b, nstaged)) == 0)
        res->count = 1;
    }
    goto out;
  }
  idem_record next;
  int write = idem_transition(curp, op, now, &next, res);
  if (res->record) { /* borrowed from cur: copy it */
    const idem_record *shown = res->record;
    res->record = NULL;
    if (idem_result_set_record(res, shown, op->scope, op->key)) {
      lmdb_result_reset(req);
      res->err = IDEM_ENOMEM;
      goto out;
    }
  }
  if (write == IDEM_WRITE_PUT && !res->err) {
    lmdb_blob *b = lmdb_blob_new(idem_record_encoded_len(&next));
    if (b) {
      idem_record_encode(&next, b->data);
      b->expires_at = next.expires_at;
    }
    int serr = b ? log_stage(e, skey, klen, b, nstaged) : IDEM_ENOMEM;
    if (serr) {
      lmdb_result_reset(req);
      res->err = serr;
    }
  }
out:
  lmdb_blob_unref(held);
  return 0;
}

/* The writer's snapshot of LMDB for a log batch (map held until release). */
static int log_snapshot(lmdb_env *e) {
  lmdb_map_hold(e);
  int rc = e->wrtxn ? mdb_txn_renew(e->wrtxn) : MDB_BAD_TXN;
  if (rc) {
    if (e->wrtxn)
      mdb_txn_abort(e->wrtxn);
    e->wrtxn = NULL;
    rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &e->wrtxn);
    if (rc == MDB_MAP_RESIZED && (rc = lmdb_map_adopt(e)) == 0)
      rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &e->wrtxn);
  }
  if (rc) {
    e->wrtxn = NULL;
    lmdb_map_release(e);
  }
  return rc;
}

/* Hand reqs[0..n) back to their loops: one lock and one wake-up per loop
 * (store handle) for the whole batch, rather than one per req, in the
 * order of reqs. As in idem_req_finish, the wake-up is sent before the
 * unlock, and a req once handed is never touched again (its loop may have
 * freed it, and its store): done[] marks them. */
static void hand_back(lmdb_env *e, idem_req **reqs, size_t n) {
  unsigned char *done = e->refused; /* free in log mode */
  memset(done, 0, n);
  for (size_t i = 0; i < n; i++) {
    if (done[i])
      continue;
    idem_store *store = reqs[i]->store;
    pthread_mutex_lock(&store->done_lock);
    for (size_t j = i; j < n; j++)
      if (!done[j] && reqs[j]->store == store) {
        idem_queue_insert_tail(&store->done, &reqs[j]->node);
        done[j] = 1;
      }
    uv_async_send(&store->done_async);
    pthread_mutex_unlock(&store->done_lock);
  }
}

void lmdb_finish_all(lmdb_env *e, idem_req **reqs, size_t n, int err) {
  int64_t t0 = lmdb_mono_us();
  for (size_t i = 0; err && i < n; i++) {
    lmdb_result_reset(reqs[i]);
    reqs[i]->result.err = err;
  }
  hand_back(e, reqs, n);
  atomic_fetch_add(&e->handback_us, (uint64_t)(lmdb_mono_us() - t0));
  if (!err) {
    atomic_fetch_add(&e->ops_written, n);
    if (n > atomic_load(&e->max_batch))
      atomic_store(&e->max_batch, n);
  }
}

void lmdb_log_prune(lmdb_env *e) {
  uint64_t ck = atomic_load(&e->ck_seq);
  if (ck > e->pruned_at) { /* LMDB holds more: drop it from memory */
    lmdb_overlay_prune(&e->ov, ck);
    e->pruned_at = ck;
  }
}

/* One batch through the log: apply against the overlay, append, one
 * fdatasync, promote, acknowledge. */
void lmdb_log_run_batch(lmdb_env *e, idem_req **reqs, size_t n) {
  int64_t t0 = lmdb_mono_us();
  lmdb_log_prune(e);
  int rc = log_snapshot(e);
  if (rc) {
    lmdb_finish_all(e, reqs, n, lmdb_error(e, rc));
    return;
  }
  lmdb_log_buf_reset(&e->logbuf);
  size_t nstaged = 0;
  int64_t now = idem_now_ms();
  for (size_t i = 0; i < n; i++) {
    lmdb_result_reset(reqs[i]);
    if ((rc = log_apply_one(e, reqs[i], now, &nstaged)) != 0)
      reqs[i]->result.err = lmdb_error(e, rc);
  }
  mdb_txn_reset(e->wrtxn);
  lmdb_map_release(e);
  int64_t t1 = lmdb_mono_us();
  atomic_fetch_add(&e->apply_us, (uint64_t)(t1 - t0));
  if (e->logbuf.count) {
    uint64_t seq = e->last_seq + 1;
    lmdb_log_buf_seal(&e->logbuf, seq);
    int err = lmdb_log_append(e, e->logbuf.p, e->logbuf.len);
    atomic_fetch_add(&e->commit_us, (uint64_t)(lmdb_mono_us() - t1));
    if (err) {
      lmdb_overlay_unstage(&e->ov, e->staged, nstaged);
      e->log_broken = 1; /* what the file holds is unknown now: go direct */
      e->skip_seq = seq;
      lmdb_finish_all(e, reqs, n, err);
      return;
    }
    e->last_seq = seq;
    lmdb_overlay_promote(&e->ov, e->staged, nstaged, seq);
    lmdb_ckpt_flushed(e, seq);
    atomic_fetch_add(&e->commits, 1);
  }
  lmdb_finish_all(e, reqs, n, 0);
}

/* LIST ops reach the writer only from a guest (that now owns the log):
 * LMDB gets everything first, then they read it. Returns how many reqs
 * remain in reqs[], in order. */
size_t lmdb_serve_lists(lmdb_env *e, idem_req **reqs, size_t n) {
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    idem_req *req = reqs[i];
    if (req->op.kind != IDEM_OP_LIST) {
      reqs[kept++] = req;
      continue;
    }
    int err = lmdb_ckpt_sync(e);
    MDB_txn *txn;
    int rc = err ? 0 : log_snapshot(e);
    if (!err && rc == 0) {
      txn = e->wrtxn;
      lmdb_result_reset(req);
      rc = lmdb_read_list(e, txn, req);
      mdb_txn_reset(txn);
      lmdb_map_release(e);
    }
    if (!err && rc)
      err = lmdb_error(e, rc);
    if (err)
      idem_req_fail(req, err);
    else
      idem_req_finish(req);
  }
  return kept;
}

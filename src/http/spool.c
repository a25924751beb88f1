/* spool.c - durable answers while the store is away (see spool.h). */
#include "http/spool.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lmdb.h>

#include "core/be64.h"
#include "core/scoped_key.h"
#include "core/sha256.h"
#include "http/metrics.h"
#include "http/policy.h"
#include "store/store_id.h"

/* Sparse: the file holds only what is written. An answer is at most
 * --max-response (4 GiB at the very most), and the spool holds the answers
 * of the requests in flight when a store fails, so this is room to spare;
 * past it a put fails and the client gets 503, the lease held. */
#define SPOOL_MAP_SIZE (8ull << 30)
#define STORE_ID_LEN 8 /* bytes of SHA-256(store URI) that prefix every key */
#define KEY_MAX (STORE_ID_LEN + IDEM_SCOPED_KEY_MAX)
#define DRAIN_BATCH 64
#define ENTRY_VERSION 1
#define ENTRY_HEAD 10 /* version, kind, 8-byte ttl_ms; the encoded record follows */

struct gw_spool {
  MDB_env *env;
  MDB_dbi dbi;
  unsigned char store_id[STORE_ID_LEN];
  atomic_size_t depth;
  /* the last key a drain round took (the drainer's alone): the next round
   * starts after it, so that entries failing every round (a store timeout
   * too short for their answers), however many, hold back none behind them */
  unsigned char resume[KEY_MAX];
  size_t resume_len;
};

/* ---- entries ---- */

static size_t entry_key(const gw_spool *sp, const char *scope, const char *key,
                        unsigned char out[KEY_MAX]) {
  memcpy(out, sp->store_id, STORE_ID_LEN);
  return STORE_ID_LEN + idem_scoped_key_encode(scope, key, out + STORE_ID_LEN);
}

/* A decoded entry: rec points into the bytes it was decoded from. */
typedef struct {
  idem_op_kind kind;
  int64_t ttl_ms;
  idem_record rec;
} spool_entry;

static int entry_decode(const unsigned char *p, size_t len, spool_entry *e) {
  if (len < ENTRY_HEAD || p[0] != ENTRY_VERSION ||
      (p[1] != IDEM_OP_COMPLETE && p[1] != IDEM_OP_RELEASE))
    return IDEM_ECORRUPT;
  e->kind = p[1];
  e->ttl_ms = (int64_t)idem_be64_get(p + 2);
  return idem_record_decode(p + ENTRY_HEAD, len - ENTRY_HEAD, &e->rec);
}

/* The entry of op as bytes: malloc'd, *len set. */
static unsigned char *entry_encode(const idem_op *op, const uint8_t *fingerprint, size_t *len) {
  int64_t now = idem_now_ms();
  idem_record rec = {0};
  rec.state = op->kind == IDEM_OP_COMPLETE ? IDEM_STATE_COMPLETED : IDEM_STATE_UNSEEN;
  if (fingerprint)
    memcpy(rec.fingerprint, fingerprint, IDEM_FINGERPRINT_LEN);
  rec.fence = op->fence;
  rec.created_at = rec.updated_at = now;
  rec.expires_at = now + op->ttl_ms;
  if (op->kind == IDEM_OP_COMPLETE)
    rec.response = op->response;
  size_t rlen = idem_record_encoded_len(&rec);
  unsigned char *buf = malloc(ENTRY_HEAD + rlen);
  if (!buf)
    return NULL;
  buf[0] = ENTRY_VERSION;
  buf[1] = (unsigned char)op->kind;
  idem_be64_put(buf + 2, (uint64_t)op->ttl_ms);
  idem_record_encode(&rec, buf + ENTRY_HEAD);
  *len = ENTRY_HEAD + rlen;
  return buf;
}

static int mdb_to_idem(int rc) {
  return rc == MDB_MAP_FULL || rc == ENOSPC || rc == EDQUOT ? IDEM_EFULL : IDEM_ESTORE;
}

/* Entries of this store in txn (a cursor walk over its prefix: the spool
 * holds a handful of entries, or none). */
static size_t count_entries(gw_spool *sp, MDB_txn *txn) {
  MDB_cursor *cur;
  if (mdb_cursor_open(txn, sp->dbi, &cur))
    return atomic_load(&sp->depth);
  size_t n = 0;
  MDB_val k = {STORE_ID_LEN, sp->store_id}, v;
  int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  while (!rc && k.mv_size > STORE_ID_LEN && !memcmp(k.mv_data, sp->store_id, STORE_ID_LEN)) {
    n++;
    rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
  }
  mdb_cursor_close(cur);
  return n;
}

static void set_depth(gw_spool *sp, size_t n) {
  atomic_store(&sp->depth, n);
  gw_metrics_spool_depth(n);
}

/* ---- open, close ---- */

/* Entries written for other stores: they stay until a gateway on their own
 * store starts on this directory, and their keys stay locked until their
 * leases end meanwhile; a start that finds some says so. */
static size_t count_others(gw_spool *sp, MDB_txn *txn) {
  MDB_stat st;
  size_t all = mdb_stat(txn, sp->dbi, &st) ? 0 : st.ms_entries, mine = atomic_load(&sp->depth);
  return all > mine ? all - mine : 0;
}

/* The first STORE_ID_LEN bytes of SHA-256(id) into out; -1 out of memory. */
static int store_id_of(const char *id, unsigned char out[STORE_ID_LEN]) {
  unsigned char digest[IDEM_SHA256_LEN];
  if (idem_sha256_digest(id, strlen(id), digest))
    return -1;
  memcpy(out, digest, STORE_ID_LEN);
  return 0;
}

/* Entries spooled under the written identity of store_uri, by a gateway
 * from before store_identity, become this store's: moved under its id in
 * one write transaction (an entry already there under the new id stays).
 * An LMDB error, or 0. */
static int adopt_written(gw_spool *sp, const char *store_uri) {
  char id[4200];
  unsigned char old[STORE_ID_LEN];
  idem_store_written_identity(store_uri, id, sizeof id);
  if (store_id_of(id, old) || !memcmp(old, sp->store_id, STORE_ID_LEN))
    return 0;
  MDB_txn *txn;
  MDB_cursor *cur;
  MDB_dbi dbi;
  int rc = mdb_txn_begin(sp->env, NULL, 0, &txn);
  if (rc)
    return rc;
  if (!(rc = mdb_dbi_open(txn, NULL, 0, &dbi)) && !(rc = mdb_cursor_open(txn, dbi, &cur))) {
    for (;;) {
      MDB_val k = {STORE_ID_LEN, old}, v;
      if (mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE) || k.mv_size <= STORE_ID_LEN ||
          k.mv_size > KEY_MAX || memcmp(k.mv_data, old, STORE_ID_LEN))
        break; /* no more of them */
      unsigned char was[KEY_MAX], now[KEY_MAX], *val = malloc(v.mv_size ? v.mv_size : 1);
      if (!val) {
        rc = ENOMEM;
        break;
      }
      memcpy(val, v.mv_data, v.mv_size); /* the map's bytes change under a put */
      memcpy(was, k.mv_data, k.mv_size);
      memcpy(now, sp->store_id, STORE_ID_LEN);
      memcpy(now + STORE_ID_LEN, was + STORE_ID_LEN, k.mv_size - STORE_ID_LEN);
      MDB_val ok = {k.mv_size, was}, nk = {k.mv_size, now}, nv = {v.mv_size, val};
      rc = mdb_put(txn, dbi, &nk, &nv, MDB_NOOVERWRITE);
      free(val);
      if ((rc && rc != MDB_KEYEXIST) || (rc = mdb_del(txn, dbi, &ok, NULL)))
        break;
    }
    mdb_cursor_close(cur);
  }
  if (rc) {
    mdb_txn_abort(txn);
    return rc;
  }
  return mdb_txn_commit(txn);
}

int gw_spool_open(const char *dir, const char *store_uri, gw_spool **out, char *err,
                  size_t errlen) {
  gw_spool *sp = calloc(1, sizeof *sp);
  char id[4200];
  idem_store_identity(store_uri, id, sizeof id);
  if (!sp || store_id_of(id, sp->store_id)) {
    free(sp);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  const char *what = "mkdir";
  int rc = mkdir(dir, 0700) && errno != EEXIST ? errno : 0;
  MDB_txn *txn = NULL;
  if (!rc && !(rc = mdb_env_create(&sp->env))) {
    what = "open";
    mdb_env_set_mapsize(sp->env, SPOOL_MAP_SIZE);
    /* NOTLS: reads run on several loops and writes on the thread pool */
    if (!(rc = mdb_env_open(sp->env, dir, MDB_NOTLS, 0600)) &&
        !(rc = adopt_written(sp, store_uri)) &&
        !(rc = mdb_txn_begin(sp->env, NULL, MDB_RDONLY, &txn)) &&
        !(rc = mdb_dbi_open(txn, NULL, 0, &sp->dbi))) {
      set_depth(sp, count_entries(sp, txn));
      size_t others = count_others(sp, txn);
      if (others)
        fprintf(stderr,
                "idem serve: spool %s: %zu entries were written for another store (another "
                "URI, database, prefix or path than %s) and wait for a gateway on it\n",
                dir, others, id);
    }
    if (txn)
      mdb_txn_abort(txn);
  }
  if (rc) {
    snprintf(err, errlen, "spool %s: cannot %s: %s", dir, what, mdb_strerror(rc));
    if (sp->env)
      mdb_env_close(sp->env);
    free(sp);
    return -1;
  }
  *out = sp;
  return 0;
}

void gw_spool_close(gw_spool *sp) {
  if (!sp)
    return;
  mdb_env_close(sp->env);
  free(sp);
}

size_t gw_spool_depth(const gw_spool *sp) { return atomic_load(&sp->depth); }

/* ---- writes, on the thread pool ---- */

typedef struct {
  uv_work_t work;
  gw_spool *sp;
  unsigned char key[KEY_MAX];
  size_t key_len;
  unsigned char *val; /* put: the entry; remove: NULL */
  size_t val_len;
  uint64_t fence; /* remove, or a put with replace: only over the entry under this fence */
  int replace;    /* put: only where the entry still has w->fence (a drain's re-claim) */
  int err;
  gw_spool_cb cb;
  void *arg;
} spool_write;

/* Whether the entry stored under w->key is the one w removes: a put of a
 * newer fence (the key claimed again after a drain) must survive. */
static int same_fence(MDB_txn *txn, const spool_write *w) {
  MDB_val k = {w->key_len, (void *)w->key}, v;
  spool_entry e;
  if (mdb_get(txn, w->sp->dbi, &k, &v))
    return 0;
  return !entry_decode(v.mv_data, v.mv_size, &e) && e.rec.fence == w->fence;
}

static void write_work(uv_work_t *req) {
  spool_write *w = req->data;
  gw_spool *sp = w->sp;
  MDB_txn *txn;
  MDB_val k = {w->key_len, w->key}, v = {w->val_len, w->val};
  int rc = mdb_txn_begin(sp->env, NULL, 0, &txn);
  if (rc) {
    w->err = mdb_to_idem(rc);
    return;
  }
  if (w->val && (!w->replace || same_fence(txn, w)))
    rc = mdb_put(txn, sp->dbi, &k, &v, 0);
  else if (!w->val && same_fence(txn, w))
    rc = mdb_del(txn, sp->dbi, &k, NULL);
  size_t n = count_entries(sp, txn);
  if (rc) {
    mdb_txn_abort(txn);
  } else if (!(rc = mdb_txn_commit(txn))) { /* durable: fsync before it returns */
    set_depth(sp, n);
  }
  w->err = rc ? mdb_to_idem(rc) : 0;
}

static void write_done(uv_work_t *req, int status) {
  spool_write *w = req->data;
  int err = status ? IDEM_ESTORE : w->err;
  gw_spool_cb cb = w->cb;
  void *arg = w->arg;
  free(w->val);
  free(w);
  cb(arg, err);
}

static int queue_write(gw_spool *sp, uv_loop_t *loop, spool_write *w) {
  w->sp = sp;
  w->work.data = w;
  if (uv_queue_work(loop, &w->work, write_work, write_done)) {
    free(w->val);
    free(w);
    return IDEM_ESTORE;
  }
  return 0;
}

int gw_spool_put(gw_spool *sp, uv_loop_t *loop, const idem_op *op, const uint8_t *fingerprint,
                 gw_spool_cb cb, void *arg) {
  spool_write *w = calloc(1, sizeof *w);
  if (!w)
    return IDEM_ENOMEM;
  w->key_len = entry_key(sp, op->scope, op->key, w->key);
  w->val = entry_encode(op, fingerprint, &w->val_len);
  if (!w->val) {
    free(w);
    return IDEM_ENOMEM;
  }
  w->cb = cb;
  w->arg = arg;
  gw_metrics_spool_write();
  return queue_write(sp, loop, w);
}

/* ---- reads ---- */

int gw_spool_find(gw_spool *sp, const char *scope, const char *key, idem_record *rec) {
  if (!atomic_load_explicit(&sp->depth, memory_order_relaxed))
    return 0;
  unsigned char kb[KEY_MAX];
  MDB_val k = {entry_key(sp, scope, key, kb), kb}, v;
  MDB_txn *txn;
  spool_entry e;
  int found = 0;
  if (mdb_txn_begin(sp->env, NULL, MDB_RDONLY, &txn))
    return 0;
  if (!mdb_get(txn, sp->dbi, &k, &v) && !entry_decode(v.mv_data, v.mv_size, &e) &&
      e.kind == IDEM_OP_COMPLETE)
    found = !idem_record_copy(rec, &e.rec);
  mdb_txn_abort(txn);
  return found;
}

/* ---- draining into the store ---- */

typedef struct {
  gw_spool *sp;
  uv_loop_t *loop;
  idem_store *store;
  size_t pending, failed;
  gw_spool_drain_cb done;
  void *arg;
} drain_round;

typedef struct {
  drain_round *round;
  unsigned char key[KEY_MAX];
  size_t key_len;
  unsigned char *val; /* the entry's bytes: e.rec points into them */
  spool_entry e;
  char scope[IDEM_SCOPE_MAX + 1], name[IDEM_KEY_MAX + 1];
  gw_buf marker_headers, marker_body; /* a complete the store found too big */
  uint64_t reclaimed; /* the fence of a claim made to keep it (on_reclaimed) */
} drain_item;

static void item_finish(drain_item *it, int drained) {
  drain_round *r = it->round;
  if (!drained)
    r->failed++;
  gw_buf_free(&it->marker_headers);
  gw_buf_free(&it->marker_body);
  free(it->val);
  free(it);
  if (--r->pending == 0) {
    r->done(r->arg, r->failed);
    free(r);
  }
}

static void on_removed(void *arg, int err) {
  drain_item *it = arg;
  if (err)
    fprintf(stderr, "idem serve: spool: removing the drained entry of key '%s' failed: %s; "
                    "it drains again (the store refuses it as stale)\n",
            it->name, idem_strerror(err));
  else
    gw_metrics_spool_drained();
  item_finish(it, 1);
}

/* A write of the item's entry that applies only while the spool still holds it
 * under it->e.rec.fence: val NULL removes it, else val (malloc'd, taken)
 * replaces it. cb runs on the loop once done. 0, or nonzero when it could not
 * be queued (val freed). */
static int item_write(drain_item *it, unsigned char *val, size_t val_len, gw_spool_cb cb) {
  spool_write *w = calloc(1, sizeof *w);
  if (!w) {
    free(val);
    return -1;
  }
  memcpy(w->key, it->key, it->key_len);
  w->key_len = it->key_len;
  w->val = val;
  w->val_len = val_len;
  w->replace = val != NULL;
  w->fence = it->e.rec.fence;
  w->cb = cb;
  w->arg = it;
  return queue_write(it->round->sp, it->round->loop, w);
}

static void item_remove(drain_item *it) {
  if (item_write(it, NULL, 0, on_removed))
    item_finish(it, 0);
}

static void item_submit(drain_item *it);

/* A lease long enough for the complete that follows the claim at once. */
#define RECLAIM_LEASE_MS 60000

static void on_refenced(void *arg, int err) {
  drain_item *it = arg;
  (void)err; /* not rewritten: the complete is tried all the same */
  item_submit(it);
}

/* The entry now stands for the re-claimed fence: rewritten in the spool
 * before its complete is sent, so that a complete that fails (the store
 * away again, this gateway killed) is tried again under that fence by the
 * next round or the next start, instead of being refused as stale and then
 * dropped for the lease this very re-claim holds. */
static void item_refence(drain_item *it, uint64_t fence) {
  idem_op op = {.kind = IDEM_OP_COMPLETE, .scope = it->scope, .key = it->name,
                .fence = fence, .ttl_ms = it->e.ttl_ms, .response = it->e.rec.response};
  size_t len;
  unsigned char *val = entry_encode(&op, it->e.rec.fingerprint, &len);
  int queued = val && item_write(it, val, len, on_refenced) == 0;
  it->reclaimed = fence;
  it->e.rec.fence = fence; /* removed under it once drained */
  if (!queued)
    item_submit(it); /* not rewritten: the complete is tried all the same */
}

/* A complete refused as stale: the store has this answer already, or another
 * request took the key, or the record's retention ended while the store was
 * away (an outage longer than --ttl, or twice --lock-ttl) and the key is
 * free. Claimed again with the answer's fingerprint: in the last case the
 * answer is kept under the new fence, so no retry runs the request again. */
static void on_reclaimed(idem_store *st, const idem_result *res, void *arg) {
  drain_item *it = arg;
  (void)st;
  if (res->err) {
    item_finish(it, 0); /* the next round tries again */
    return;
  }
  if (res->outcome == IDEM_CLAIMED) {
    item_refence(it, res->fence);
    return;
  }
  if (res->outcome == IDEM_BUSY) {
    /* Kept for the next round: the holder may release the key or let its
     * lease end (then this answer is kept), or keep an answer of its own
     * (then a replay drops this entry). The holder may also be this
     * gateway's own re-claim, made just before it was killed. */
    item_finish(it, 0);
    return;
  }
  if (res->outcome == IDEM_MISMATCH)
    fprintf(stderr, "idem serve: spool: key '%s' (fence %llu): the key was used again with "
                    "another request; entry dropped\n",
            it->name, (unsigned long long)it->e.rec.fence);
  else if (res->record && res->record->fence != it->e.rec.fence)
    fprintf(stderr, "idem serve: spool: key '%s' (fence %llu): another request ran it again "
                    "(fence %llu) and its answer is kept; entry dropped\n",
            it->name, (unsigned long long)it->e.rec.fence,
            (unsigned long long)res->record->fence);
  item_remove(it);
}

/* op on the round's store; a submit it refuses reaches cb at once. */
static void item_run(drain_item *it, const idem_op *op, idem_cb cb) {
  int rc = idem_store_submit(it->round->store, op, cb, it);
  if (rc) {
    idem_result res = {.err = rc};
    cb(it->round->store, &res, it);
  }
}

static void item_reclaim(drain_item *it) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = it->scope, .key = it->name,
                .lease_ms = RECLAIM_LEASE_MS, .ttl_ms = it->e.ttl_ms};
  memcpy(op.fingerprint, it->e.rec.fingerprint, IDEM_FINGERPRINT_LEN);
  item_run(it, &op, on_reclaimed);
}

static void on_drained(idem_store *st, const idem_result *res, void *arg) {
  drain_item *it = arg;
  (void)st;
  if (res->err == IDEM_ESTALE && it->e.kind == IDEM_OP_COMPLETE && !it->reclaimed) {
    item_reclaim(it);
    return;
  }
  switch (res->err) {
  case 0:
    item_remove(it);
    return;
  case IDEM_ESTALE: /* the store has it already, or the lease moved on */
  case IDEM_ENOTFOUND:
  case IDEM_EINVAL: /* would never drain: say so and drop it */
    if (res->err != IDEM_ESTALE || it->e.kind == IDEM_OP_RELEASE)
      fprintf(stderr, "idem serve: spool: key '%s' (fence %llu): %s; entry dropped\n", it->name,
              (unsigned long long)it->e.rec.fence, idem_strerror(res->err));
    item_remove(it);
    return;
  case IDEM_EFULL:
  case IDEM_ETOOBIG:
    if (it->e.kind == IDEM_OP_COMPLETE && !it->marker_body.len &&
        !policy_not_kept(&it->marker_headers, &it->marker_body, it->e.rec.response.status,
                         policy_not_kept_why(res->err))) {
      it->e.rec.response.status = 502;
      it->e.rec.response.headers = it->marker_headers.p;
      it->e.rec.response.headers_len = it->marker_headers.len;
      it->e.rec.response.body = it->marker_body.p;
      it->e.rec.response.body_len = it->marker_body.len;
      item_submit(it);
      return;
    }
    /* fall through */
  default:
    item_finish(it, 0);
  }
}

static void item_submit(drain_item *it) {
  idem_op op = {0};
  op.kind = it->e.kind;
  op.scope = it->scope;
  op.key = it->name;
  op.fence = it->reclaimed ? it->reclaimed : it->e.rec.fence;
  op.ttl_ms = it->e.ttl_ms;
  op.response = it->e.rec.response;
  item_run(it, &op, on_drained);
}

/* A copy of the entry under the cursor, or NULL (not this store's, damaged:
 * left where it is, and counted as not drained). */
static drain_item *item_take(const MDB_val *k, const MDB_val *v) {
  drain_item *it = calloc(1, sizeof *it);
  if (!it || !(it->val = malloc(v->mv_size ? v->mv_size : 1))) {
    free(it);
    return NULL;
  }
  memcpy(it->key, k->mv_data, k->mv_size);
  it->key_len = k->mv_size;
  memcpy(it->val, v->mv_data, v->mv_size);
  if (entry_decode(it->val, v->mv_size, &it->e) ||
      idem_scoped_key_decode(it->key + STORE_ID_LEN, it->key_len - STORE_ID_LEN, it->scope,
                             it->name)) {
    fprintf(stderr, "idem serve: spool: a damaged entry was left in place\n");
    free(it->val);
    free(it);
    return NULL;
  }
  return it;
}

/* Copy this store's entries from start (or the first one after it, with
 * after) on, up to stop (NULL: to the last), into items up to DRAIN_BATCH. */
static size_t take_range(gw_spool *sp, MDB_cursor *cur, MDB_val start, int after,
                         const MDB_val *stop, drain_item **items, size_t n) {
  MDB_txn *txn = mdb_cursor_txn(cur);
  MDB_val k = start, v;
  int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  if (!rc && after && !mdb_cmp(txn, sp->dbi, &k, &start))
    rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
  while (!rc && n < DRAIN_BATCH && k.mv_size > STORE_ID_LEN &&
         !memcmp(k.mv_data, sp->store_id, STORE_ID_LEN) &&
         (!stop || mdb_cmp(txn, sp->dbi, &k, stop) <= 0)) {
    if ((items[n] = item_take(&k, &v)))
      n++;
    rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
  }
  return n;
}

/* Copy up to DRAIN_BATCH entries of this store out of the spool, so that no
 * read transaction stays open while the store works: those after the last
 * one the round before took, then from the first on (up to that one). */
static size_t take_batch(gw_spool *sp, drain_item **items) {
  MDB_txn *txn;
  MDB_cursor *cur;
  size_t n = 0;
  if (mdb_txn_begin(sp->env, NULL, MDB_RDONLY, &txn))
    return 0;
  set_depth(sp, count_entries(sp, txn));
  if (!mdb_cursor_open(txn, sp->dbi, &cur)) {
    MDB_val first = {STORE_ID_LEN, sp->store_id};
    if (sp->resume_len) {
      MDB_val resume = {sp->resume_len, sp->resume};
      n = take_range(sp, cur, resume, 1, NULL, items, n);
      n = take_range(sp, cur, first, 0, &resume, items, n);
    } else {
      n = take_range(sp, cur, first, 0, NULL, items, n);
    }
    mdb_cursor_close(cur);
  }
  mdb_txn_abort(txn);
  sp->resume_len = n ? items[n - 1]->key_len : 0;
  if (n)
    memcpy(sp->resume, items[n - 1]->key, sp->resume_len);
  return n;
}

void gw_spool_drain(gw_spool *sp, uv_loop_t *loop, idem_store *store, gw_spool_drain_cb done,
                    void *arg) {
  drain_round *r = calloc(1, sizeof *r);
  drain_item *items[DRAIN_BATCH];
  size_t n = r && store ? take_batch(sp, items) : 0;
  if (!n) {
    free(r);
    done(arg, atomic_load(&sp->depth) ? 1 : 0);
    return;
  }
  *r = (drain_round){sp, loop, store, n, 0, done, arg};
  for (size_t i = 0; i < n; i++) {
    items[i]->round = r;
    item_submit(items[i]);
  }
}

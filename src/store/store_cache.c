/*
 * store_cache.c - a store with the cache tier in front (cache.h): what a
 * req asks of the cache before its store sees it, and what its answer
 * teaches the cache after, through the two hooks it sets on the store
 * (store.c never names this file). Loop thread only.
 *
 * A claim is answered from the cache only when idem_transition, run on the
 * cached finished record, answers it without writing: a replay or a
 * mismatch. Everything else (a new key, a takeover of an expired or failed
 * record) needs the store of record, which alone can decide who runs; so
 * does a replay of a failed record, which such a takeover elsewhere changes.
 *
 * Two kinds of cache: memory: (store->cache holds the records) and a Redis
 * shared by gateways (store->cache_store, a redis:// store spoken to with
 * the IDEM_OP_CACHE_* operations; store->cache then only remembers this
 * process's claims, for their completes). A shared cache that fails or is
 * slow only costs its answer: the claim goes to the store.
 */
#include <stdlib.h>
#include <string.h>

#include "store/backend.h"
#include "store/cache.h"
#include "store/store_cache.h"

#define PENDING_BYTES (16u << 20) /* claims remembered for a shared cache */
#define PENDING_TTL_MS (3600 * 1000)

/* ---- opening ---------------------------------------------------------------- */

static int answer(idem_store *store, idem_req *req);
static void learn(idem_store *store, const idem_req *req);

static int attach(idem_store *store, const char *cache_uri, char **errmsg) {
  store->cache_answer = answer;
  store->cache_learn = learn;
  if (strncmp(cache_uri, "redis://", 8))
    return idem_cache_open(cache_uri, store->identity, &store->cache, errmsg);
  store->cache = idem_cache_for_claims(cache_uri, store->identity, PENDING_BYTES, PENDING_TTL_MS);
  if (!store->cache)
    return IDEM_ENOMEM;
  /* a Redis that is down opens all the same, and connects when it can */
  return idem_store_open(store->loop, cache_uri, &store->cache_store, errmsg);
}

int idem_store_open_cached(struct uv_loop_s *loop, const char *uri, const char *cache_uri,
                           idem_store **out, char **errmsg) {
  if (!cache_uri)
    return idem_store_open(loop, uri, out, errmsg);
  int err = idem_cache_uri_check(cache_uri, errmsg);
  if (err || (err = idem_store_open(loop, uri, out, errmsg)))
    return err;
  if ((err = attach(*out, cache_uri, errmsg))) {
    idem_store_close(*out, NULL, NULL); /* closes on the loop's next run */
    *out = NULL;
  }
  return err;
}

/* ---- answering a claim -------------------------------------------------------- */

/* Whether rec answers req's claim without the store: then req->result is set. */
static int answers(idem_req *req, const idem_record *rec) {
  idem_record next;
  idem_result res;
  memset(&res, 0, sizeof res);
  int write = idem_transition(rec, &req->op, req->submitted, &next, &res);
  /* A failed record is not final (a claim through another process takes it
   * over and completes it), so its replay by flag asks the store; a
   * mismatch on it stands, as a takeover keeps the fingerprint. */
  int replays_failure = res.outcome == IDEM_REPLAY && rec->state == IDEM_STATE_FAILED;
  if (write != IDEM_WRITE_NONE || res.err || replays_failure ||
      (res.outcome != IDEM_REPLAY && res.outcome != IDEM_MISMATCH) ||
      idem_result_set_record(&res, rec, req->op.scope, req->op.key)) {
    res.record = NULL; /* borrowed from rec by the transition, if set */
    idem_result_clear(&res);
    return 0;
  }
  req->result = res;
  req->from_cache = 1;
  return 1;
}

static void on_shared_get(idem_store *cache_store, const idem_result *res, void *arg) {
  idem_req *req = arg;
  idem_store *store = req->store;
  (void)cache_store;
  int hit = !res->err && res->record && answers(req, res->record);
  idem_cache_count(store->cache, hit);
  if (hit)
    idem_req_finish(req);
  else /* even while closing: the backend closes after the cache (store.c) */
    store->backend->submit(store, req);
}

static void ignore(idem_store *s, const idem_result *res, void *arg) {
  (void)s, (void)res, (void)arg;
}

/* The shared cache's copy of (scope, key) goes; after a delete, under a
 * tombstone (backend.h). */
static void shared_forget(idem_store *store, const idem_op *op) {
  if (!store->cache_store)
    return;
  idem_op del = {.kind = op->kind == IDEM_OP_DELETE ? IDEM_OP_CACHE_BURY : IDEM_OP_CACHE_DEL,
                 .scope = op->scope, .key = op->key};
  idem_store_submit_internal(store->cache_store, &del, ignore, NULL);
}

/* A delete reaches the store only once the shared cache's copy is gone: a
 * cache that cannot drop it (away, refusing) would replay the deleted record
 * until its expiry, so the delete fails instead, and deletes nothing. */
static void on_shared_dropped(idem_store *cache_store, const idem_result *res, void *arg) {
  idem_req *req = arg;
  idem_store *store = req->store;
  (void)cache_store;
  if (res->err)
    idem_req_fail(req, res->err == IDEM_ETIMEDOUT ? IDEM_ETIMEDOUT : IDEM_ESTORE);
  else /* even while closing: the backend closes after the cache (store.c) */
    store->backend->submit(store, req);
}

static int answer(idem_store *store, idem_req *req) {
  req->submitted = idem_now_ms();
  if (req->op.kind == IDEM_OP_DELETE) { /* now: no claim after it may replay */
    idem_cache_bury(store->cache, req->op.scope, req->op.key, req->submitted);
    if (!store->cache_store)
      return 0;
    idem_op del = {.kind = IDEM_OP_CACHE_BURY, .scope = req->op.scope, .key = req->op.key};
    if (idem_store_submit_internal(store->cache_store, &del, on_shared_dropped, req) == 0)
      return 1;
    idem_req_fail(req, IDEM_ESTORE);
    return 1;
  }
  if (req->op.kind != IDEM_OP_CLAIM)
    return 0;
  if (store->cache_store) {
    idem_op get = {.kind = IDEM_OP_CACHE_GET, .scope = req->op.scope, .key = req->op.key};
    return idem_store_submit_internal(store->cache_store, &get, on_shared_get, req) == 0;
  }
  idem_record cached;
  int answered = 0;
  if (idem_cache_get(store->cache, req->op.scope, req->op.key, req->submitted, &cached)) {
    answered = answers(req, &cached);
    idem_record_clear(&cached);
  }
  idem_cache_count(store->cache, answered);
  if (answered)
    idem_req_finish(req); /* delivered from the loop, as the store's answers are */
  return answered;
}

/* ---- learning from the store's answers --------------------------------------- */

/* A finished record, as the store answered it to a request submitted at
 * read_at or as a complete made it. */
static void keep(idem_store *store, const char *scope, const char *key, const idem_record *rec,
                 int64_t read_at) {
  int64_t now = idem_now_ms();
  if (!store->cache_store) {
    idem_cache_put(store->cache, scope, key, rec, now, read_at);
    return;
  }
  if (rec->state != IDEM_STATE_COMPLETED && rec->state != IDEM_STATE_FAILED)
    return;
  if (rec->expires_at <= now)
    return;
  size_t len = idem_record_encoded_len(rec);
  uint8_t *blob = malloc(len);
  if (!blob)
    return;
  idem_record_encode(rec, blob);
  idem_op put = {.kind = IDEM_OP_CACHE_PUT, .scope = scope, .key = key,
                 .ttl_ms = rec->expires_at - now,
                 .response = {.body = (const char *)blob, .body_len = len}};
  idem_store_submit_internal(store->cache_store, &put, ignore, NULL);
  free(blob);
}

static void finished(idem_store *store, const idem_op *op, int64_t started) {
  if (!store->cache_store) {
    idem_cache_finished(store->cache, op, started);
    return;
  }
  idem_record rec;
  if (idem_cache_take_finished(store->cache, op, started, &rec)) {
    keep(store, op->scope, op->key, &rec, started);
    idem_record_clear(&rec);
  }
}

static void learn(idem_store *store, const idem_req *req) {
  const idem_op *op = &req->op;
  const idem_result *res = &req->result;
  if (req->from_cache)
    return;
  switch (op->kind) {
  case IDEM_OP_CLAIM:
    if (!res->err && res->outcome == IDEM_CLAIMED)
      idem_cache_claimed(store->cache, op->scope, op->key, op, res->fence, req->submitted);
    else if (!res->err && res->record)
      keep(store, op->scope, op->key, res->record, req->submitted);
    break;
  case IDEM_OP_COMPLETE:
  case IDEM_OP_FAIL:
    if (!res->err) {
      finished(store, op, req->submitted);
      break;
    }
    /* a complete the store refused leaves nothing to trust */
    /* fall through */
  case IDEM_OP_RELEASE:
    idem_cache_forget(store->cache, op->scope, op->key);
    shared_forget(store, op);
    break;
  case IDEM_OP_DELETE:
    /* buried again now it is done (a replay read before it may still come
     * in) by store.c, in every cache of the process on this store */
    shared_forget(store, op);
    break;
  case IDEM_OP_GET:
    if (!res->err && res->record)
      keep(store, op->scope, op->key, res->record, req->submitted);
    break;
  default:
    break;
  }
}

int idem_store_cache_counts(const idem_store *store, uint64_t *hits, uint64_t *misses) {
  if (!store->cache)
    return -1;
  idem_cache_counts(store->cache, hits, misses);
  return 0;
}

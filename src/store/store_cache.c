/*
 * store_cache.c - a store with the cache tier in front (cache.h): what a
 * req asks of the cache before its store sees it, and what its answer
 * teaches the cache after. store.c calls these on the loop thread.
 *
 * A claim is answered here only when idem_transition, run on the cached
 * finished record, answers it without writing: a replay or a mismatch.
 * Everything else (a new key, a takeover of an expired or failed record)
 * needs the store of record, which alone can decide who runs.
 */
#include <string.h>

#include "store/backend.h"
#include "store/cache.h"
#include "store/store_cache.h"

int idem_store_cache_answer(idem_store *store, idem_req *req) {
  req->submitted = idem_now_ms();
  if (req->op.kind == IDEM_OP_DELETE) /* now: no claim after it may replay */
    idem_cache_forget(store->cache, req->op.scope, req->op.key);
  if (req->op.kind != IDEM_OP_CLAIM)
    return 0;
  idem_record cached;
  if (!idem_cache_get(store->cache, req->op.scope, req->op.key, req->submitted, &cached))
    return 0;
  idem_record next;
  idem_result res;
  memset(&res, 0, sizeof res);
  int write = idem_transition(&cached, &req->op, req->submitted, &next, &res);
  int answered = write == IDEM_WRITE_NONE && !res.err &&
                 (res.outcome == IDEM_REPLAY || res.outcome == IDEM_MISMATCH) &&
                 idem_result_set_record(&res, &cached, req->op.scope, req->op.key) == 0;
  idem_record_clear(&cached);
  if (!answered) {
    idem_result_clear(&res);
    return 0;
  }
  req->result = res;
  req->from_cache = 1;
  return 1;
}

void idem_store_cache_learn(idem_store *store, const idem_req *req) {
  const idem_op *op = &req->op;
  const idem_result *res = &req->result;
  idem_cache *c = store->cache;
  if (req->from_cache)
    return;
  switch (op->kind) {
  case IDEM_OP_CLAIM:
    if (res->err)
      break;
    if (res->outcome == IDEM_CLAIMED)
      idem_cache_claimed(c, op->scope, op->key, op, res->fence, req->submitted);
    else if (res->record)
      idem_cache_put(c, op->scope, op->key, res->record, idem_now_ms());
    break;
  case IDEM_OP_COMPLETE:
  case IDEM_OP_FAIL:
    if (!res->err)
      idem_cache_finished(c, op, req->submitted);
    else
      idem_cache_forget(c, op->scope, op->key);
    break;
  case IDEM_OP_GET:
    if (!res->err && res->record)
      idem_cache_put(c, op->scope, op->key, res->record, idem_now_ms());
    break;
  case IDEM_OP_RELEASE:
  case IDEM_OP_DELETE:
    idem_cache_forget(c, op->scope, op->key);
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

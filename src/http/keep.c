/*
 * keep.c - keeping the answer of a claimed request (see gateway.h).
 *
 * A claimed request ran. Its answer reaches the client only once it is kept
 * somewhere durable: in the store (complete); when the store is full, the
 * small marker in its place (a 502 saying so: retries replay it and never
 * run the request again); when the store fails, in the spool (spool.h),
 * which the engine replays from and which drains into the store once it
 * answers. ex->keep.kept then hears whether anything kept it; when nothing
 * could, the engine answers 503 and the lease holds until it ends, as
 * after a 504. A release goes the same way, minus the marker: a release the
 * store failed is spooled so the key runs again as soon as it drains, and
 * the answer goes out whatever happens (it promised nothing).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "http/gateway.h"
#include "http/metrics.h"
#include "http/policy.h"
#include "http/spool.h"

static uint64_t since_us(uint64_t ns) { return (uv_hrtime() - ns) / 1000; }

static void keep_submit(gw_exchange *ex);

/* Submit op on ex's claimed key (scope, key, fence filled in here), timed
 * for the latency histogram; a submit the store refuses reaches done at
 * once with its error. */
static void submit_claimed(gw_exchange *ex, idem_op *op, idem_cb done) {
  idem_store *st = ex->w->store;
  op->scope = ex->idem.scope;
  op->key = ex->idem.key;
  op->fence = ex->idem.fence;
  ex->op_started_ns = uv_hrtime();
  int rc = st ? idem_store_submit(st, op, done, ex) : IDEM_ESTORE;
  if (rc) {
    idem_result res = {0};
    res.err = rc;
    done(st, &res, ex);
  }
}

/* An operation on ex's claimed key, under the fence it holds. */
static idem_op claimed_op(const gw_exchange *ex, idem_op_kind kind) {
  idem_op op = {0};
  op.kind = kind;
  op.scope = ex->idem.scope;
  op.key = ex->idem.key;
  op.fence = ex->idem.fence;
  op.ttl_ms = ex->route->policy.ttl_ms;
  return op;
}

static idem_op keep_op(gw_exchange *ex) {
  idem_op op = claimed_op(ex, IDEM_OP_COMPLETE);
  op.response.status = ex->keep.status;
  op.response.headers = ex->keep.headers->p ? ex->keep.headers->p : "";
  op.response.headers_len = ex->keep.headers->len;
  op.response.body = ex->keep.body->p ? ex->keep.body->p : "";
  op.response.body_len = ex->keep.body->len;
  return op;
}

static void on_spooled(void *arg, int err) {
  gw_exchange *ex = arg;
  gw_metrics_leases(-1);
  if (!err)
    fprintf(stderr, "idem serve: the answer of key '%s' (fence %" PRIu64
                    ") waits in the spool for the store\n", ex->idem.key, ex->idem.fence);
  else
    fprintf(stderr, "idem serve: keeping the answer of key '%s' (fence %" PRIu64
                    ") failed in the store and in the spool (%s); 503, the key stays locked "
                    "until its lease ends\n", ex->idem.key, ex->idem.fence, idem_strerror(err));
  ex->keep.kept(ex, !err);
}

static void spool_answer(gw_exchange *ex) {
  idem_op op = keep_op(ex);
  gw_spool *sp = ex->w->spool;
  int rc = sp ? gw_spool_put(sp, &ex->w->loop, &op, ex->idem.fp, on_spooled, ex) : IDEM_ESTORE;
  if (rc)
    on_spooled(ex, rc);
}

/* The answer did not fit in the store (why): keep the marker instead. */
static int keep_marker(gw_exchange *ex, const char *why) {
  gw_buf *h = &ex->out_hdrs, *b = &ex->out_body;
  h->len = b->len = 0;
  if (policy_not_kept(h, b, ex->keep.status, why))
    return -1;
  fprintf(stderr, "idem serve: the answer of key '%s' (fence %" PRIu64 ", status %d) %s; a "
                  "502 marker is kept in its place\n",
          ex->idem.key, ex->idem.fence, ex->keep.status, why);
  ex->keep.status = 502;
  ex->keep.headers = h;
  ex->keep.body = b;
  ex->keep.is_marker = 1;
  keep_submit(ex);
  return 0;
}

/* A complete refused as stale: the lease ended while the upstream ran, and
 * then another request took the key over, or the record's retention ended.
 * The key is claimed again with this request's fingerprint: if it is free
 * (that request released it, or its lease ended too), this answer is kept
 * under the new fence, and the upstream is not called again. Otherwise the
 * answer kept is the other run's (or will be): this client must not get
 * one that nobody kept, so it gets 503 answer-not-kept, and its retry the
 * kept answer. */
static void on_reclaimed(idem_store *st, const idem_result *res, void *arg) {
  gw_exchange *ex = arg;
  (void)st;
  if (!res->err && res->outcome == IDEM_CLAIMED) {
    gw_metrics_leases(1);
    ex->idem.fence = res->fence;
    ex->idem.lease_end_ns = uv_hrtime() + (uint64_t)ex->route->policy.lock_ttl_ms * 1000000u;
    keep_submit(ex);
    return;
  }
  fprintf(stderr, "idem serve: the answer of key '%s' came after its lease was taken over "
                  "(%s); the answer kept is another run's: 503\n",
          ex->idem.key, res->err ? idem_strerror(res->err) : "the key is held");
  ex->keep.kept(ex, 0);
}

static void reclaim(gw_exchange *ex) {
  idem_op op = claimed_op(ex, IDEM_OP_CLAIM); /* a claim's fence is the store's to give */
  op.lease_ms = ex->route->policy.lock_ttl_ms;
  memcpy(op.fingerprint, ex->idem.fp, IDEM_FINGERPRINT_LEN);
  ex->keep.reclaimed = 1;
  submit_claimed(ex, &op, on_reclaimed);
}

static void on_kept(idem_store *st, const idem_result *res, void *arg) {
  gw_exchange *ex = arg;
  (void)st;
  gw_metrics_observe(GW_HIST_COMPLETE, since_us(ex->op_started_ns));
  if (!res->err) {
    gw_metrics_leases(-1);
    ex->keep.kept(ex, 1);
    return;
  }
  gw_metrics_complete_failed();
  fprintf(stderr, "idem serve: storing the answer of key '%s' (fence %" PRIu64 ") failed: %s\n",
          ex->idem.key, ex->idem.fence, idem_strerror(res->err));
  if (res->err == IDEM_ESTALE) { /* the lease is lost: not this run's key any more */
    gw_metrics_leases(-1);
    if (ex->keep.reclaimed)
      ex->keep.kept(ex, 0);
    else
      reclaim(ex);
    return;
  }
  const char *why = policy_not_kept_why(res->err);
  if (why && !ex->keep.is_marker && !keep_marker(ex, why))
    return;
  spool_answer(ex);
}

static void keep_submit(gw_exchange *ex) {
  idem_op op = keep_op(ex);
  submit_claimed(ex, &op, on_kept);
}

void gw_keep(gw_exchange *ex, int status, const gw_buf *headers, const gw_buf *body,
             int is_marker, void (*kept)(gw_exchange *ex, int ok)) {
  ex->keep.status = status;
  ex->keep.headers = headers;
  ex->keep.body = body;
  ex->keep.is_marker = is_marker;
  ex->keep.kept = kept;
  keep_submit(ex);
}

/* ---- release ---- */

/* A release the store failed is worth a spool entry: the key runs again
 * as soon as it drains, not only once the lease ends. Not a promise to the
 * client, so the answer goes out whatever the spool says. */
static void on_release_spooled(void *arg, int err) {
  gw_exchange *ex = arg;
  if (err)
    fprintf(stderr, "idem serve: spooling the release of key '%s' failed too: %s\n", ex->idem.key,
            idem_strerror(err));
  ex->keep.released(ex);
}

static void on_release(idem_store *st, const idem_result *res, void *arg) {
  gw_exchange *ex = arg;
  (void)st;
  gw_metrics_observe(GW_HIST_RELEASE, since_us(ex->op_started_ns));
  gw_metrics_leases(-1);
  if (res->err) {
    gw_metrics_release_failed();
    fprintf(stderr, "idem serve: releasing key '%s' (fence %" PRIu64 ") failed: %s\n", ex->idem.key,
            ex->idem.fence, idem_strerror(res->err));
  }
  if (!res->err || res->err == IDEM_ESTALE || !ex->w->spool) {
    ex->keep.released(ex);
    return;
  }
  idem_op op = claimed_op(ex, IDEM_OP_RELEASE);
  if (gw_spool_put(ex->w->spool, &ex->w->loop, &op, NULL, on_release_spooled, ex))
    on_release_spooled(ex, IDEM_ENOMEM);
}

void gw_keep_release(gw_exchange *ex, void (*released)(gw_exchange *ex)) {
  idem_op op = {0};
  op.kind = IDEM_OP_RELEASE;
  ex->keep.released = released;
  submit_claimed(ex, &op, on_release);
}


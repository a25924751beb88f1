/*
 * consume.c - the flow of one message (flow.h; the consumer's start and
 * stop are consume_run.c's).
 *
 *   message ─key─► claim ─CLAIMED─► handler ─kept status─► complete ─► ack
 *                    │                 └─408/409/425/429/431/5xx, unreachable,
 *                    │                   timeout─► release ─► later(backoff)
 *                    │                   (the last allowed delivery: fail,
 *                    │                    then dead letter)
 *                    ├─REPLAY─► ack         ├─BUSY─► later(lease left)
 *                    ├─MISMATCH─► dead      └─store down─► hold, claim again
 *
 * The claim takes none of the --concurrency slots: a message is claimed as
 * soon as it is taken (the broker's credit bounds how many are), waits in
 * f->ready for a slot, and holds it from its handler request until its
 * answer is durable (without a record, or on the other ways out, until it
 * is settled). So neither a claim's round trip nor an ack's leaves a slot
 * idle, and a consumer killed between a handler's answer and its durable
 * record has at most --concurrency such messages (they run again, with a
 * higher fence).
 *
 * Nothing is acked before its record is durable: a complete the store
 * fails is tried again while the lease lasts, and then the message is left
 * to the broker (not acked) to come again: it replays if the store got the
 * answer after all, or runs again once the lease has ended.
 */
#include "consume/flow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consume/cs_metrics.h"
#include "consume/handler.h"
#include "http/policy.h"
#include "http/upstream.h"

typedef struct cs_job {
  cs_flow *f;
  cs_msg *m;
  char key[IDEM_KEY_MAX + 1];
  uint8_t fp[IDEM_FINGERPRINT_LEN];
  uint64_t fence;
  int bypass; /* no record: --on-store-error open, or the bench forwarder */
  uint64_t t0_ns, op_ns;
  uint64_t lease_end; /* uv_now() ms when the lease ends */
  uint64_t kept_at;   /* uv_now() ms when the broker last heard it stays here */
  int settling;       /* ack, later or dead asked of the broker */
  int reclaimed;      /* its answer came back stale once and it claimed again */
  unsigned store_tries; /* store failures in a row, for the backoff */
  uint64_t claim_sent;  /* uv_now() ms of the last claim's submit */
  int lease_renewed;    /* claimed again for a lease long enough to run on */
  gw_buf head;
  uv_buf_t bufs[2];
  upstream_response up;
  upstream_stream stream;
  int too_large;
  gw_buf kept_hdrs, marker_hdrs, marker_body;
  int keep_status, keep_marker;
  const gw_buf *keep_h, *keep_b;
  uv_timer_t timer;
  int timer_on;
  int parked; /* busy behind a job of this consumer with the same key */
  void (*on_timer)(struct cs_job *j);
  idem_queue linked; /* in f->jobs */
  idem_queue queued; /* in f->ready while it waits for a slot, else alone */
  uint64_t reclaim_until; /* a stale answer's claim is asked again until then */
  uint64_t busy_until;    /* ... and, while another delivery holds the key, until then */
  int at_handler;    /* holds one of the --concurrency slots */
} cs_job;


static void set_parked(cs_job *j, int parked) {
  if (j->parked != parked)
    j->f->nparked += parked ? 1u : (unsigned)-1;
  j->parked = parked;
}

static uint64_t since_us(uint64_t ns) { return (uv_hrtime() - ns) / 1000; }

static int64_t backoff_ms(const cs_config *cfg, unsigned n) {
  int64_t d = cfg->retry_delay_ms;
  for (unsigned i = 1; i < n && d < cfg->max_retry_delay_ms; i++)
    d *= 2;
  return d < cfg->max_retry_delay_ms ? d : cfg->max_retry_delay_ms;
}

/* The deliveries that count toward --max-deliveries and the backoff: the
 * broker's count, but no more than the times the key was claimed (its
 * fence, once this delivery claimed it). Redis and NATS count every
 * redelivery, also those that found the key busy on another consumer,
 * which never reached the handler; every delivery that did claimed the key. */
static unsigned deliveries_counted(const cs_job *j) {
  unsigned n = j->m->deliveries;
  return j->fence && j->fence < n ? (unsigned)j->fence : n;
}

static idem_store *flow_store(cs_flow *f) {
  if (f->store)
    return f->store;
  uint64_t now = uv_now(&f->loop);
  if (now < f->store_retry_at)
    return NULL;
  f->store_retry_at = now + 1000;
  char *msg = NULL;
  int rc = idem_store_open(&f->loop, f->cfg->store_uri, &f->store, &msg);
  if (rc) {
    fprintf(stderr, "idem consume: store %s: %s%s%s\n", f->cfg->store_uri, idem_strerror(rc),
            msg ? ": " : "", msg ? msg : "");
    free(msg);
    f->store = NULL;
  }
  return f->store;
}

/* ---- the end of a message: settles ---- */

static void job_freed(uv_handle_t *h) { free(h->data); }

/* The broker may hand over as many messages as fill the slots and the
 * prefetch: a fetch's round trip, and the claims of the messages taken,
 * then overlap the work in the slots instead of leaving them idle. */
void cs_flow_give_credit(cs_flow *f) {
  unsigned window = (unsigned)f->cfg->concurrency + (unsigned)f->cfg->prefetch;
  f->broker->vt->credit(f->broker, f->stopping || f->njobs >= window ? 0 : window - f->njobs);
}

static void claim(cs_job *j);
static void handler_done(cs_job *j);

static void job_end(cs_job *j) {
  cs_flow *f = j->f;
  handler_done(j);
  set_parked(j, 0);
  idem_queue_remove(&j->linked);
  /* duplicates waiting for this one claim again now: they replay (the scan
   * only when some wait: it is per message, over every job in flight) */
  idem_queue *node;
  IDEM_QUEUE_FOREACH(node, &f->jobs) {
    if (!f->nparked)
      break;
    cs_job *p = IDEM_QUEUE_DATA(node, cs_job, linked);
    if (p->parked && !strcmp(p->key, j->key)) {
      set_parked(p, 0);
      uv_timer_stop(&p->timer);
      claim(p);
    }
  }
  gw_buf_free(&j->head);
  gw_buf_free(&j->kept_hdrs);
  gw_buf_free(&j->marker_hdrs);
  gw_buf_free(&j->marker_body);
  upstream_response_free(&j->up);
  if (j->timer_on)
    uv_close((uv_handle_t *)&j->timer, job_freed);
  else
    free(j);
  f->njobs--;
  cs_flow_give_credit(f);
}

static void on_settled(void *arg, cs_msg *m, int ok) {
  cs_job *j = arg;
  (void)m;
  if (!ok)
    cs_metrics_settle_failed();
  cs_metrics_observe(CS_HIST_MESSAGE, since_us(j->t0_ns));
  job_end(j);
}

static void settle_ack(cs_job *j, const cs_answer *answer, cs_outcome o) {
  j->settling = 1;
  if (!j->bypass)
    handler_done(j); /* the answer is durable: its ack needs no slot */
  cs_metrics_outcome(o);
  j->f->broker->vt->ack(j->f->broker, j->m, answer, on_settled, j);
}

/* The answer being kept (keep()'s), for ack. */
static cs_answer kept_answer(const cs_job *j) {
  cs_answer a = {.status = j->keep_status, .body = j->keep_b->p ? j->keep_b->p : "",
                 .body_len = j->keep_b->len};
  return a;
}

/* The kept answer a replay carries, in *a: a, or NULL when it has none. */
static const cs_answer *replayed_answer(const idem_result *res, cs_answer *a) {
  if (!res->record)
    return NULL;
  const idem_response *rr = &res->record->response;
  *a = (cs_answer){.status = rr->status, .body = rr->body, .body_len = rr->body_len,
                   .replayed = 1};
  return a;
}

/* ran: whether this delivery reached the handler (see cs_broker_vt.later) */
static void settle_later(cs_job *j, int64_t delay_ms, cs_outcome o, int ran) {
  j->settling = 1;
  if (o != CS_OUT_BUSY)
    cs_metrics_outcome(o);
  j->f->broker->vt->later(j->f->broker, j->m, delay_ms, ran, on_settled, j);
}

/* The handler failed this delivery: it comes again after the backoff. */
static void settle_retry(cs_job *j) {
  settle_later(j, backoff_ms(j->f->cfg, deliveries_counted(j)), CS_OUT_RETRY, 1);
}

static void settle_dead(cs_job *j, const char *reason, cs_outcome o) {
  j->settling = 1;
  cs_metrics_outcome(o);
  fprintf(stderr, "idem consume: message %s%s%s goes to the dead letters: %s\n", j->m->id,
          j->key[0] ? " key " : "", j->key, reason);
  j->f->broker->vt->dead(j->f->broker, j->m, reason, on_settled, j);
}

/* ---- messages held without a lease ---- */

/* A message this consumer holds with no lease in the store (its claim in
 * flight, held while the store is away, parked behind a duplicate, or run
 * without a record) must not go to another consumer, nor come back here as
 * a new delivery: each redelivery counts towards --max-deliveries. So the
 * broker hears that it stays here once it has been held for half the
 * broker's takeover time (--lock-ttl). A claimed message needs nothing:
 * the broker's takeover comes with the end of its lease. */
/* When j's lease ends, by this consumer's clock: the lease counts from the
 * store's receipt of the claim, which is after its submit. */
static uint64_t lease_end_of(const cs_job *j) {
  return j->claim_sent + (uint64_t)j->f->cfg->lock_ttl_ms;
}

/* The broker hears that j stays here: its takeover clock (Redis idle time,
 * NATS AckWait) starts again now. */
static void keep_at_broker(cs_job *j) {
  j->f->broker->vt->keep(j->f->broker, j->m);
  j->kept_at = uv_now(&j->f->loop);
}

/* A lease that starts well after the broker's takeover clock did (the
 * message was held without one: the store away, parked behind a duplicate,
 * waiting for its lease to end) would end after the broker hands the
 * message out again: a new delivery beside a valid lease, counted against
 * --max-deliveries. So a claim that long after the last keep keeps it too. */
static void align_takeover_clock(cs_job *j) {
  if (j->claim_sent > j->kept_at + (uint64_t)j->f->cfg->lock_ttl_ms / 10 && !j->settling)
    keep_at_broker(j);
}

void cs_flow_keep_held(cs_flow *f) {
  uint64_t now = uv_now(&f->loop), due = (uint64_t)f->cfg->lock_ttl_ms / 2;
  idem_queue *node;
  IDEM_QUEUE_FOREACH(node, &f->jobs) {
    cs_job *j = IDEM_QUEUE_DATA(node, cs_job, linked);
    /* a job with a lease is kept too while it waits for a slot: its lease
     * is checked before its handler runs (start_handlers) */
    if ((j->fence && idem_queue_empty(&j->queued)) || j->settling || now - j->kept_at < due)
      continue;
    keep_at_broker(j);
  }
}

/* ---- waiting on the loop ---- */

static void on_hold(uv_timer_t *t) {
  cs_job *j = t->data;
  /* a parked duplicate whose wait ran out claims now: it must not also be
   * woken by the end of the job it waited for (that would claim twice) */
  set_parked(j, 0);
  j->on_timer(j);
}

static void hold(cs_job *j, int64_t ms, void (*then)(cs_job *j)) {
  if (!j->timer_on) {
    uv_timer_init(&j->f->loop, &j->timer);
    j->timer.data = j;
    j->timer_on = 1;
  }
  j->on_timer = then;
  uv_timer_start(&j->timer, on_hold, (uint64_t)ms, 0);
}

/* ---- store operations ---- */

static void submit(cs_job *j, idem_op *op, idem_cb cb) {
  op->scope = j->f->cfg->scope;
  op->key = j->key;
  op->fence = j->fence;
  j->op_ns = uv_hrtime();
  idem_store *st = flow_store(j->f);
  int rc = st ? idem_store_submit(st, op, cb, j) : IDEM_ESTORE;
  if (rc) {
    idem_result res = {0};
    res.err = rc;
    cb(st, &res, j);
  }
}

static void note_store(cs_flow *f, int err) {
  if (err && !f->store_down)
    fprintf(stderr, "idem consume: store %s: %s; messages wait (not acked)%s\n",
            f->cfg->store_uri, idem_strerror(err),
            f->cfg->fail_open ? ", or go to the handler without a record (open)" : "");
  else if (!err && f->store_down)
    fprintf(stderr, "idem consume: store %s answers again\n", f->cfg->store_uri);
  f->store_down = err != 0;
}

static void to_handler(cs_job *j);

/* ---- failing for good: the record is marked failed, the message dead ---- */

typedef struct {
  cs_job *j;
  char reason[300];
} dead_ctx;

static void on_failed(idem_store *st, const idem_result *res, void *arg) {
  dead_ctx *d = arg;
  (void)st;
  if (res->err && res->err != IDEM_ESTALE)
    fprintf(stderr, "idem consume: marking key '%s' failed: %s (its lease runs out instead)\n",
            d->j->key, idem_strerror(res->err));
  settle_dead(d->j, d->reason, CS_OUT_DEAD);
  free(d);
}

static void fail_dead(cs_job *j, int status, const char *reason) {
  dead_ctx *d = calloc(1, sizeof *d);
  if (!d) {
    settle_retry(j);
    return;
  }
  d->j = j;
  snprintf(d->reason, sizeof d->reason, "%s", reason);
  j->marker_body.len = 0;
  policy_problem(&j->marker_body, status, "message-failed", "Message failed", reason);
  idem_op op = {.kind = IDEM_OP_FAIL, .ttl_ms = j->f->cfg->ttl_ms};
  op.response.status = status;
  op.response.headers = "Content-Type: application/problem+json\r\n";
  op.response.headers_len = strlen(op.response.headers);
  op.response.body = j->marker_body.p ? j->marker_body.p : "";
  op.response.body_len = j->marker_body.len;
  j->op_ns = uv_hrtime();
  op.scope = j->f->cfg->scope;
  op.key = j->key;
  op.fence = j->fence;
  idem_store *st = flow_store(j->f);
  if (!st || idem_store_submit(st, &op, on_failed, d)) {
    idem_result res = {.err = IDEM_ESTORE};
    on_failed(st, &res, d);
  }
}

/* ---- keeping the answer ---- */

static void keep(cs_job *j);
static void claim_then(cs_job *j, idem_cb cb);

/* A store operation after the handler failed: then(j) again after a
 * backoff, if that is before until (ms, uv_now) and the flow is not
 * stopping. 1 when so held; 0 when the caller must give up. */
static int retry_store_until(cs_job *j, uint64_t until, void (*then)(cs_job *j)) {
  cs_flow *f = j->f;
  int64_t wait = backoff_ms(f->cfg, ++j->store_tries);
  uint64_t now = uv_now(&f->loop);
  if (f->stopping || now + 20 >= until)
    return 0;
  /* a backoff that would pass the end tries again before it instead: an
   * outage shorter than the lease must not cost a second run for want of
   * a try once the store is back */
  if (now + (uint64_t)wait >= until)
    wait = (int64_t)(until - now) / 2;
  hold(j, wait, then);
  return 1;
}

/* After a stale answer (the lease ran out while the handler ran, and
 * another delivery took the key): if the key is free again (that delivery
 * released it, or its lease ran out too), this run's answer is kept under
 * a new claim, with no second handler call. That delivery may have been
 * this very message (a takeover hands out the same entry), which the ack
 * then settles: without this, a takeover that failed after the stale ack
 * left the first run's effect done and no answer kept. Otherwise the other
 * holder's answer stands. */
static void reclaim(cs_job *j);

static void on_reclaimed(idem_store *st, const idem_result *res, void *arg) {
  cs_job *j = arg;
  cs_flow *f = j->f;
  (void)st;
  if (res->err) {
    /* not known whether the key is free: never an ack with no answer kept.
     * Asked again for a lease's time, then the message comes again and the
     * record decides. */
    note_store(f, res->err == IDEM_ESTORE || res->err == IDEM_ETIMEDOUT ? res->err : 0);
    if (retry_store_until(j, j->reclaim_until, reclaim))
      return;
    fprintf(stderr, "idem consume: key '%s': the handler's answer came back after its lease and "
                    "could not be kept (%s); not acked, the message comes again\n",
            j->key, idem_strerror(res->err));
    settle_later(j, f->cfg->retry_delay_ms, CS_OUT_STORE_ERROR, 1);
    return;
  }
  note_store(f, 0);
  if (res->outcome == IDEM_CLAIMED) {
    j->fence = res->fence;
    j->lease_end = lease_end_of(j);
    j->store_tries = 0;
    keep(j);
    return;
  }
  if (res->outcome == IDEM_BUSY) {
    /* another delivery holds the key (often the takeover of this very
     * message): its answer is not kept yet, and it may still fail or die.
     * An ack now would leave the key with no answer and the message gone:
     * ask again as its lease ends; past a few leases, leave the message
     * to the broker (not acked): it replays once an answer is kept. */
    uint64_t now = uv_now(&f->loop);
    int64_t wait = res->retry_after_ms > 0 && res->retry_after_ms < f->cfg->retry_delay_ms
                       ? res->retry_after_ms
                       : f->cfg->retry_delay_ms;
    if (wait > f->cfg->lock_ttl_ms / 4) /* kept at the broker each quarter lease */
      wait = f->cfg->lock_ttl_ms / 4;
    if (!f->stopping && now + (uint64_t)wait < j->busy_until) {
      keep_at_broker(j); /* held here meanwhile, as any job with no lease */
      hold(j, wait + 1, reclaim);
      return;
    }
    settle_later(j, wait, CS_OUT_BUSY, 1);
    return;
  }
  /* the other delivery's answer is kept: it is this message's answer too
   * (reply_to gets it, as on any replay) */
  cs_answer a;
  settle_ack(j, res->outcome == IDEM_REPLAY ? replayed_answer(res, &a) : NULL, CS_OUT_EXECUTED);
}

static void reclaim(cs_job *j) { claim_then(j, on_reclaimed); }

static void on_kept(idem_store *st, const idem_result *res, void *arg) {
  cs_job *j = arg;
  cs_flow *f = j->f;
  (void)st;
  cs_metrics_observe(CS_HIST_COMPLETE, since_us(j->op_ns));
  note_store(f, res->err == IDEM_ESTORE || res->err == IDEM_ETIMEDOUT ? res->err : 0);
  if (res->err == IDEM_ESTALE) {
    /* the lease was taken over: claim again (on_reclaimed); never an ack
     * with no answer kept */
    uint64_t now = uv_now(&f->loop);
    if (!j->reclaimed) {
      /* a lease's time for the store to answer; a holder found busy is
       * waited for up to a few of its leases (on_reclaimed) */
      j->reclaimed = 1;
      j->reclaim_until = now + (uint64_t)f->cfg->lock_ttl_ms;
      j->busy_until = now + 4 * (uint64_t)f->cfg->lock_ttl_ms;
    }
    if (!f->stopping && now < j->reclaim_until) {
      reclaim(j);
      return;
    }
    settle_later(j, f->cfg->retry_delay_ms, CS_OUT_BUSY, 1);
    return;
  }
  if (!res->err) {
    cs_answer a = kept_answer(j);
    settle_ack(j, &a, CS_OUT_EXECUTED);
    return;
  }
  const char *why = policy_not_kept_why(res->err);
  if (why && !j->keep_marker) {
    j->marker_hdrs.len = j->marker_body.len = 0;
    if (!policy_not_kept(&j->marker_hdrs, &j->marker_body, j->keep_status, why)) {
      fprintf(stderr, "idem consume: the answer for key '%s' %s; a 502 marker is kept in its "
                      "place\n", j->key, why);
      j->keep_status = 502;
      j->keep_h = &j->marker_hdrs;
      j->keep_b = &j->marker_body;
      j->keep_marker = 1;
      keep(j);
      return;
    }
  }
  /* the lease still keeps duplicates out: try again while it lasts */
  if (retry_store_until(j, j->lease_end, keep))
    return;
  /* not kept, not acked: it comes again once the lease is over */
  uint64_t now = uv_now(&f->loop);
  settle_later(j, j->lease_end > now ? (int64_t)(j->lease_end - now) : 0, CS_OUT_STORE_ERROR, 1);
}

static void keep(cs_job *j) {
  idem_op op = {.kind = IDEM_OP_COMPLETE, .ttl_ms = j->f->cfg->ttl_ms};
  op.response.status = j->keep_status;
  op.response.headers = j->keep_h->p ? j->keep_h->p : "";
  op.response.headers_len = j->keep_h->len;
  op.response.body = j->keep_b->p ? j->keep_b->p : "";
  op.response.body_len = j->keep_b->len;
  submit(j, &op, on_kept);
}

/* ---- the handler ---- */

static void on_released(idem_store *st, const idem_result *res, void *arg) {
  cs_job *j = arg;
  (void)st;
  if (res->err && res->err != IDEM_ESTALE)
    fprintf(stderr, "idem consume: releasing key '%s' failed: %s (its lease runs out instead)\n",
            j->key, idem_strerror(res->err));
  settle_retry(j);
}

static void handler_failed(cs_job *j, int status, const char *what) {
  const cs_config *cfg = j->f->cfg;
  if (j->bypass) {
    settle_retry(j);
    return;
  }
  unsigned delivery = deliveries_counted(j);
  if (delivery < (unsigned)cfg->max_deliveries) {
    idem_op op = {.kind = IDEM_OP_RELEASE};
    submit(j, &op, on_released);
    return;
  }
  char reason[200];
  snprintf(reason, sizeof reason, "the handler %s on delivery %u of %d (--max-deliveries)", what,
           delivery, cfg->max_deliveries);
  fail_dead(j, status, reason);
}

/* Whether the handler's answer is kept as the message's (or, past
 * --max-response, the marker in its place). Not a 431: the headers it
 * refused are the ones this consumer made of the message's fields
 * (handler.c), so its application never saw the message; it is retried,
 * then dead-lettered, rather than kept for good. A status that is not kept
 * (5xx, 429, ...) is retried whatever its size, as serve releases it. */
static int answer_kept(const upstream_response *r) {
  return r->kind == UP_OK && r->status != 431 && policy_status_stored(r->status);
}

static void on_answer(void *arg, upstream_response *r) {
  cs_job *j = arg;
  cs_metrics_observe(CS_HIST_HANDLER, since_us(j->op_ns));
  char what[64];
  if (answer_kept(r)) {
    if (j->bypass) {
      cs_answer a = {.status = r->status, .body = r->body.p ? r->body.p : "",
                     .body_len = r->body.len};
      settle_ack(j, &a, j->f->cfg->no_store ? CS_OUT_FORWARDED : CS_OUT_BYPASS);
      return;
    }
    j->keep_status = r->status;
    j->keep_marker = 0;
    j->keep_h = &j->kept_hdrs;
    j->keep_b = &r->body;
    if (j->too_large) {
      policy_not_kept(&j->marker_hdrs, &j->marker_body, r->status, "was larger than --max-response");
      j->keep_status = 502;
      j->keep_h = &j->marker_hdrs;
      j->keep_b = &j->marker_body;
      j->keep_marker = 1;
    } else if (cs_handler_kept_headers(r, &j->kept_hdrs)) {
      handler_failed(j, 502, "answered, but its headers could not be held (out of memory)");
      return;
    }
    keep(j);
    return;
  }
  static const char *const kinds[] = {"answered", "was unreachable", "timed out (--handler-timeout)",
                                      "broke the connection", "answered with invalid HTTP"};
  if (r->kind == UP_OK)
    snprintf(what, sizeof what, "answered %d", r->status);
  else
    snprintf(what, sizeof what, "%s", kinds[r->kind]);
  handler_failed(j, r->kind == UP_OK ? r->status : r->kind == UP_TIMEOUT ? 504 : 502, what);
}

static void on_head(void *arg, upstream_response *r) {
  cs_job *j = arg;
  (void)r;
  j->too_large = 1; /* past --max-response: the rest is dropped, a marker kept */
}

static void on_data(void *arg, const char *data, size_t len) {
  (void)arg;
  (void)data;
  (void)len;
}

static void call_handler(cs_job *j) {
  j->head.len = 0;
  j->too_large = 0;
  if (cs_handler_head(j->f->cfg, j->m, j->key, j->bypass ? 0 : j->fence, &j->head)) {
    handler_failed(j, 502, "could not be sent the message (out of memory)");
    return;
  }
  j->bufs[0] = uv_buf_init(j->head.p, (unsigned)j->head.len);
  j->bufs[1] = uv_buf_init(j->m->body, (unsigned)j->m->body_len);
  j->stream = (upstream_stream){.on_head = on_head, .on_data = on_data, .past_limit = 1};
  j->op_ns = uv_hrtime();
  upstream_send(j->f->pool, j->bufs, 2, 0, 0, &j->stream, &j->up, on_answer, j);
}

/* ---- the handler's slots ---- */

/* Whether j waited so long for a slot that too little of its lease is left
 * for its handler: less than --handler-timeout, so that a handler within
 * its timeout ends within the lease; with a --handler-timeout that is not
 * below --lock-ttl (no lease could promise it), or once j has claimed
 * again for this reason (no second round for a timeout a fresh lease only
 * just covers), less than half the lease. Run on a lease that ends first,
 * the handler could run beside a takeover (another delivery of the key
 * claims it once the lease ends). */
static int lease_too_short(const cs_job *j) {
  const cs_config *cfg = j->f->cfg;
  if (!j->fence || j->bypass)
    return 0;
  uint64_t need = (uint64_t)cfg->handler_timeout_ms;
  if (cfg->handler_timeout_ms >= cfg->lock_ttl_ms || j->lease_renewed)
    need = need < (uint64_t)cfg->lock_ttl_ms / 2 ? need : (uint64_t)cfg->lock_ttl_ms / 2;
  return uv_now(&j->f->loop) + need > j->lease_end;
}

/* There is no extending a lease: j lets its own run out, then claims
 * again, a takeover with the next fence (or a replay, or busy, if another
 * delivery came first). Meanwhile it holds no lease, and is kept at the
 * broker as any job that holds none. */
static void claim_after_lease(cs_job *j) {
  uint64_t now = uv_now(&j->f->loop);
  j->fence = 0;
  j->lease_renewed = 1;
  keep_at_broker(j); /* its takeover clock must not run out first */
  hold(j, j->lease_end > now ? (int64_t)(j->lease_end - now) + 1 : 0, claim);
}

/* Start handler requests for the ready jobs while slots are free. Not
 * re-entered: a job settled from inside call_handler (handler_done) only
 * frees its slot, and this loop takes the next job. */
static void start_handlers(cs_flow *f) {
  if (f->starting_handlers)
    return;
  f->starting_handlers = 1;
  while (!idem_queue_empty(&f->ready) && f->at_handler < (unsigned)f->cfg->concurrency) {
    cs_job *j = IDEM_QUEUE_DATA(idem_queue_pop(&f->ready), cs_job, queued);
    if (lease_too_short(j)) {
      claim_after_lease(j);
      continue;
    }
    j->at_handler = 1;
    f->at_handler++;
    call_handler(j);
  }
  f->starting_handlers = 0;
}

/* j is due at the handler: now if a slot is free, else in its turn. */
static void to_handler(cs_job *j) {
  idem_queue_insert_tail(&j->f->ready, &j->queued);
  start_handlers(j->f);
}

/* j's answer is durable, or j is settled: its slot, if it had one, goes to
 * the next ready job. */
static void handler_done(cs_job *j) {
  if (!j->at_handler)
    return;
  j->at_handler = 0;
  j->f->at_handler--;
  start_handlers(j->f);
}

/* ---- the claim ---- */

static void store_failed(cs_job *j, int err) {
  cs_flow *f = j->f;
  note_store(f, err);
  if (f->cfg->fail_open) {
    j->bypass = 1;
    to_handler(j);
    return;
  }
  int64_t wait = backoff_ms(f->cfg, ++j->store_tries);
  if (f->stopping) {
    settle_later(j, wait, CS_OUT_STORE_ERROR, 0); /* the claim failed: nothing ran */
    return;
  }
  cs_metrics_outcome(CS_OUT_STORE_ERROR);
  hold(j, wait, claim); /* held here, not redelivered: outages cost no delivery */
}

/* Whether another message in flight here has j's key. */
static int held_here(const cs_job *j) {
  const idem_queue *node;
  IDEM_QUEUE_FOREACH(node, &j->f->jobs) {
    const cs_job *o = IDEM_QUEUE_DATA(node, const cs_job, linked);
    if (o != j && !o->parked && !strcmp(o->key, j->key))
      return 1;
  }
  return 0;
}

static void on_claim(idem_store *st, const idem_result *res, void *arg) {
  cs_job *j = arg;
  cs_flow *f = j->f;
  (void)st;
  cs_metrics_observe(CS_HIST_CLAIM, since_us(j->op_ns));
  if (res->err) {
    store_failed(j, res->err);
    return;
  }
  note_store(f, 0);
  switch (res->outcome) {
  case IDEM_CLAIMED:
    j->fence = res->fence;
    j->lease_end = lease_end_of(j);
    j->store_tries = 0; /* the store answers: a later failure backs off afresh */
    align_takeover_clock(j);
    unsigned delivery = deliveries_counted(j);
    if (delivery > (unsigned)f->cfg->max_deliveries) {
      char reason[200];
      snprintf(reason, sizeof reason, "delivered %u times, more than --max-deliveries %d, with no "
               "answer kept (consumers stopped while it ran?)", delivery, f->cfg->max_deliveries);
      fail_dead(j, 502, reason);
      return;
    }
    to_handler(j);
    return;
  case IDEM_REPLAY: {
    cs_answer a;
    settle_ack(j, replayed_answer(res, &a), CS_OUT_REPLAYED);
    return;
  }
  case IDEM_BUSY:
    cs_metrics_outcome(CS_OUT_BUSY);
    if (held_here(j)) {
      /* a duplicate of a message this consumer runs: wait for it here (it
       * replays as soon as that one ends), at most the lease's time left */
      set_parked(j, 1);
      hold(j, res->retry_after_ms > 0 ? res->retry_after_ms : 1, claim);
      return;
    }
    settle_later(j, res->retry_after_ms > 0 ? res->retry_after_ms : f->cfg->retry_delay_ms,
                 CS_OUT_BUSY, 0);
    return;
  case IDEM_MISMATCH:
    settle_dead(j, "the key was used before by a message with another body", CS_OUT_MISMATCH);
    return;
  }
}

static void claim_then(cs_job *j, idem_cb cb) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .lease_ms = j->f->cfg->lock_ttl_ms,
                .ttl_ms = j->f->cfg->ttl_ms};
  j->claim_sent = uv_now(&j->f->loop);
  memcpy(op.fingerprint, j->fp, sizeof j->fp);
  submit(j, &op, cb);
}

static void claim(cs_job *j) { claim_then(j, on_claim); }

static void start_job(cs_job *j) {
  cs_flow *f = j->f;
  cs_msg *m = j->m;
  idem_queue_insert_head(&f->jobs, &j->linked);
  f->njobs++;
  if (f->cfg->no_store) {
    j->bypass = 1;
    snprintf(j->key, sizeof j->key, "%s", m->id);
    to_handler(j);
    return;
  }
  char why[300];
  if (cs_msg_key(&f->cfg->key, m, j->key, why, sizeof why)) {
    j->key[0] = 0;
    settle_dead(j, why, CS_OUT_NO_KEY);
    return;
  }
  idem_fingerprint("POST", f->cfg->to_path, m->body, m->body_len, 0, j->fp);
  claim(j);
}

/* A message's claim starts at once; the credit given to the broker keeps
 * the messages here within --concurrency plus --prefetch. */
void cs_flow_on_message(void *arg, cs_msg *m) {
  cs_flow *f = arg;
  cs_job *j = calloc(1, sizeof *j);
  if (!j) {
    f->broker->vt->later(f->broker, m, f->cfg->retry_delay_ms, 0, NULL, NULL);
    return;
  }
  j->f = f;
  j->m = m;
  idem_queue_init(&j->queued);
  j->t0_ns = uv_hrtime();
  j->kept_at = uv_now(&f->loop);
  start_job(j);
}

/* Stopping: a message held here for the store (or parked behind a
 * duplicate) goes back to the broker now instead of waiting. */
void cs_flow_hand_back_held(cs_flow *f) {
  idem_queue *node;
  IDEM_QUEUE_FOREACH(node, &f->jobs) {
    cs_job *j = IDEM_QUEUE_DATA(node, cs_job, linked);
    if (!j->timer_on || !uv_is_active((uv_handle_t *)&j->timer))
      continue;
    if (j->on_timer == claim) {
      uv_timer_stop(&j->timer);
      cs_outcome o = j->parked ? CS_OUT_BUSY : CS_OUT_STORE_ERROR;
      set_parked(j, 0);
      settle_later(j, f->cfg->retry_delay_ms, o, 0);
    } else if (j->on_timer == reclaim) { /* a stale answer waiting for the key: not kept */
      uv_timer_stop(&j->timer);
      settle_later(j, f->cfg->retry_delay_ms, CS_OUT_BUSY, 1);
    }
  }
}

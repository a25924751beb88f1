/*
 * postgres.c - the postgres:// store: libpq in non-blocking pipeline mode on
 * the store's libuv loop.
 *
 * A small pool of connections (pool=N, default 2), each in pipeline mode.
 * Operations submitted during one turn of the loop are sent together, at
 * the end of that turn, as one batch: their statements back to back and one
 * sync, so they share a round trip and one commit (one WAL flush) instead
 * of one each. Callbacks run only once the batch has committed. Each
 * operation is still one statement, atomic on its own; batching only lets
 * several commit together (batch=N caps a batch; batch=1 commits every
 * operation alone).
 *
 * Two things follow from sharing a transaction, and are handled here:
 *  - row locks are held until the batch commits, so two batches (of two
 *    connections or two gateways) taking the same keys in opposite orders
 *    could deadlock. Every batch takes its keys in one global order, sorted
 *    by (scope, key), stably so that the operations of one key keep theirs.
 *  - one failing statement aborts its whole batch: nothing of it is
 *    committed, so its operations are sent again one per transaction, and
 *    only the one that fails on its own reports the error.
 * (gc, whose row locks follow the expiry index, always runs alone.)
 *
 * A lost connection, or one silent for timeout= (default 10s) while it owes
 * answers, fails the operations it carried with IDEM_ESTORE (their
 * fate is unknown to us: the batch may have committed) and comes back with
 * capped exponential backoff, jittered (backoff.h) so that gateways that lost
 * the same server do not all reconnect at once. While no connection is up, new operations fail
 * at once with IDEM_ESTORE instead of waiting: the gateway answers 503 and
 * the client retries.
 *
 * Opening connects once, blocking, to check the schema (IDEM_ESCHEMA with a
 * sentence telling to run `idem migrate`, or migrate=1 to migrate on open);
 * every later (re)connection is asynchronous and checks it again
 * (postgres_conn.c, which also looks host names up off the loop).
 *
 * Retention: every sweep_interval= (default 5s) each handle deletes expired
 * records, SWEEP_BATCH at a time (the gc statement: SKIP LOCKED, so handles
 * and gateways sweeping at once never wait on each other), at once again
 * while a chunk comes back full. Without it the table kept every key ever
 * seen unless `idem gc` ran from cron.
 */
#include <stdlib.h>
#include <string.h>

#include "store/postgres_env.h"

#define MAX_IN_FLIGHT 1024 /* operations sent and not answered, per connection */
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000
#define SWEEP_BATCH 1000 /* deletions per sweep statement */

static void dispatch(pgs_store *st);

/* ---- results ----------------------------------------------------------- */

static int is_error(const PGresult *r) {
  ExecStatusType st = PQresultStatus(r);
  return st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK;
}

/* The batch at the head has its sync: it committed, or nothing of it did. */
static void batch_done(pgs_conn *c) {
  batch *b = pgs_oldest_batch(c);
  idem_queue_remove(&b->node);
  c->in_flight -= (size_t)b->n;
  pgs_store *st = c->st;
  if (!b->failed) {
    for (int i = 0; i < b->n; i++) {
      idem_req *req = b->reqs[i];
      if (idem_pg_result_fill(&req->op, b->res[i], &req->result, NULL))
        pgs_push(&st->pending, req); /* a claim to send again */
      else
        idem_req_finish(req);
    }
  } else if (b->n == 1) {
    idem_req_fail(b->reqs[0], b->err);
  } else {
    /* rolled back as a whole: each goes again in a transaction of its own */
    for (int i = 0; i < b->n; i++)
      pgs_push(&st->solo, b->reqs[i]);
  }
  pgs_batch_free(b);
}

/* Take every result that has arrived. A batch sends n statements and a
 * sync: each statement's result, then a NULL; then PIPELINE_SYNC. After an
 * error the rest of the batch comes back PIPELINE_ABORTED. */
static void take_results(pgs_conn *c) {
  int nulls = 0;
  while (c->pg && (c->state == C_SETUP || !idem_queue_empty(&c->sent))) {
    if (PQisBusy(c->pg))
      break;
    PGresult *r = PQgetResult(c->pg);
    if (!r) {
      if (++nulls > 1)
        break;
      batch *b = pgs_oldest_batch(c);
      if (c->state != C_SETUP && b->got < b->n)
        b->got++;
      continue;
    }
    nulls = 0;
    if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
      PQclear(r);
      if (c->state == C_SETUP)
        pgs_setup_done(c);
      else
        batch_done(c);
    } else if (c->state == C_SETUP) {
      if (!c->setup || !is_error(c->setup)) { /* the last, or the first error */
        PQclear(c->setup);
        c->setup = r;
      } else {
        PQclear(r);
      }
    } else {
      batch *b = pgs_oldest_batch(c);
      if (is_error(r)) {
        if (!b->failed) {
          b->failed = 1;
          b->err = idem_pg_error_code(r);
        }
        PQclear(r);
      } else if (b->got < b->n && !b->res[b->got]) {
        b->res[b->got] = r;
      } else {
        PQclear(r);
      }
    }
    if (c->pg && PQstatus(c->pg) == CONNECTION_BAD) {
      pgs_conn_fail(c, PQerrorMessage(c->pg));
      return;
    }
  }
}

/* While closing: a connection with nothing left to carry closes. */
static void close_idle(pgs_store *st) {
  if (!st->closing || st->pending.n || st->solo.n)
    return;
  for (int i = 0; i < st->nconns; i++)
    if (st->conns[i].state == C_READY && idem_queue_empty(&st->conns[i].sent))
      pgs_conn_close(&st->conns[i]);
}

static void on_poll(uv_poll_t *handle, int status, int events) {
  pgs_conn *c = handle->data;
  if (c->poll != handle)
    return;
  if (c->state == C_CONNECTING) {
    pgs_conn_advance(c);
    return;
  }
  if (status < 0) {
    pgs_conn_fail(c, uv_strerror(status));
    return;
  }
  if ((events & UV_READABLE) && !PQconsumeInput(c->pg)) {
    pgs_conn_fail(c, PQerrorMessage(c->pg));
    return;
  }
  if (pgs_flush(c)) {
    pgs_conn_fail(c, PQerrorMessage(c->pg));
    return;
  }
  take_results(c);
  pgs_watchdog(c, events & UV_READABLE);
  pgs_store *st = c->st;
  dispatch(st);
  close_idle(st);
}

/* ---- sending ----------------------------------------------------------- */

static pgs_conn *least_loaded(pgs_store *st) {
  pgs_conn *best = NULL;
  for (int i = 0; i < st->nconns; i++) {
    pgs_conn *c = &st->conns[i];
    if (c->state == C_READY && c->in_flight < MAX_IN_FLIGHT &&
        (!best || c->in_flight < best->in_flight))
      best = c;
  }
  return best;
}

static const char *or_empty(const char *s) { return s ? s : ""; }

/* The global lock order: (scope, key), then submission order. */
static int by_scope_key(const void *x, const void *y) {
  const idem_req *a = *(idem_req *const *)x, *b = *(idem_req *const *)y;
  int c = strcmp(or_empty(a->op.scope), or_empty(b->op.scope));
  if (!c)
    c = strcmp(or_empty(a->op.key), or_empty(b->op.key));
  return c;
}

static void sort_stable(idem_req **reqs, int n) {
  /* insertion sort: batches are small, and it keeps equal keys in order */
  for (int i = 1; i < n; i++) {
    idem_req *r = reqs[i];
    int j = i;
    while (j > 0 && by_scope_key(&reqs[j - 1], &r) > 0) {
      reqs[j] = reqs[j - 1];
      j--;
    }
    reqs[j] = r;
  }
}

/* Send n operations from q on c as one batch. */
static void send_batch(pgs_conn *c, req_queue *q, int n) {
  batch *b = calloc(1, sizeof *b + (size_t)n * (sizeof *b->reqs + sizeof *b->res));
  if (!b) {
    for (int i = 0; i < n; i++)
      idem_req_fail(pgs_pop(q), IDEM_ENOMEM);
    return;
  }
  b->reqs = (idem_req **)(b + 1);
  b->res = (PGresult **)(b->reqs + n);
  b->n = n;
  for (int i = 0; i < n; i++)
    b->reqs[i] = pgs_pop(q);
  sort_stable(b->reqs, n);
  idem_queue_insert_tail(&c->sent, &b->node);
  c->in_flight += (size_t)n;
  int ok = 1;
  for (int i = 0; ok && i < n; i++) {
    idem_pg_params p;
    ok = idem_pg_params_build(&b->reqs[i]->op, &p) == 0;
    const idem_pg_statement *s = &idem_pg_statements[p.stmt];
    ok = ok && PQsendQueryPrepared(c->pg, s->name, p.n, p.values, p.lengths, p.formats, 1);
  }
  if (!ok || !PQpipelineSync(c->pg) || pgs_flush(c))
    pgs_conn_fail(c, PQerrorMessage(c->pg));
  else
    pgs_watchdog(c, 0);
}

static void dispatch(pgs_store *st) {
  pgs_conn *c;
  while (st->solo.n && (c = least_loaded(st)))
    send_batch(c, &st->solo, 1);
  while (st->pending.n && (c = least_loaded(st))) {
    /* one batch takes all it may: fewer, larger commits; the other
     * connections carry the next turns' batches meanwhile */
    size_t n = st->pending.n;
    if (n > (size_t)st->uri.batch)
      n = (size_t)st->uri.batch;
    if (n > MAX_IN_FLIGHT - c->in_flight)
      n = MAX_IN_FLIGHT - c->in_flight;
    send_batch(c, &st->pending, (int)n);
  }
}

static void on_prepare(uv_prepare_t *prepare) {
  uv_prepare_stop(prepare);
  dispatch(prepare->data);
}

/* ---- retention ------------------------------------------------------- */

static void on_sweep_timer(uv_timer_t *t);

static void on_swept(idem_store *store, const idem_result *res, void *arg) {
  (void)arg;
  if (store->closing)
    return; /* the backend may be gone already */
  pgs_store *st = store->impl;
  st->sweeping = 0;
  /* a full chunk: more has expired, go on; otherwise wait for the next round */
  int more = !res->err && res->count >= SWEEP_BATCH;
  uv_timer_start(&st->sweep, on_sweep_timer, more ? 0 : (uint64_t)st->uri.sweep_interval_ms, 0);
}

static void on_sweep_timer(uv_timer_t *t) {
  pgs_store *st = t->data;
  idem_op op = {.kind = IDEM_OP_GC, .limit = SWEEP_BATCH};
  if (st->closing || st->sweeping)
    return;
  if (!pgs_available(st) || idem_store_submit_internal(st->store, &op, on_swept, NULL)) {
    uv_timer_start(&st->sweep, on_sweep_timer, (uint64_t)st->uri.sweep_interval_ms, 0);
    return;
  }
  st->sweeping = 1;
}

/* ---- the backend ------------------------------------------------------- */

static void pgs_submit(idem_store *store, idem_req *req) {
  pgs_store *st = store->impl;
  int err = idem_pg_op_check(&req->op); /* refused here: in a batch it would fail the batch */
  if (err || !pgs_available(st)) {
    idem_req_fail(req, err ? err : IDEM_ESTORE);
    return;
  }
  /* gc locks its rows in expiry order, not key order: alone it cannot
   * take part in a deadlock with a batch */
  pgs_push(req->op.kind == IDEM_OP_GC ? &st->solo : &st->pending, req);
  /* sent at the end of this turn of the loop, with whatever else comes */
  uv_prepare_start(&st->prepare, on_prepare);
}

/* Operations already submitted still run; connections close as they drain. */
static void pgs_close(idem_store *store) {
  pgs_store *st = store->impl;
  st->closing = 1;
  uv_close((uv_handle_t *)&st->sweep, pgs_handle_closed);
  for (int i = 0; i < st->nconns; i++) {
    pgs_conn *c = &st->conns[i];
    if (c->state == C_DOWN || c->state == C_CONNECTING)
      pgs_conn_close(c);
  }
  if (!pgs_available(st)) {
    pgs_fail_queue(&st->solo, IDEM_ECLOSED);
    pgs_fail_queue(&st->pending, IDEM_ECLOSED);
  }
  close_idle(st);
  pgs_maybe_closed(st);
}

static int pgs_open(idem_store *store, const char *uri, char **errmsg) {
  idem_pg_uri u;
  int err = idem_pg_uri_parse(uri, &u, errmsg);
  if (err)
    return err;
  PGconn *pg = PQconnectdb(u.conninfo);
  if (!pg || PQstatus(pg) != CONNECTION_OK) {
    if (errmsg)
      *errmsg = idem_pg_message("postgres", pg ? PQerrorMessage(pg) : "out of memory");
    PQfinish(pg);
    free(u.conninfo);
    return IDEM_ESTORE;
  }
  /* this connection goes on serving as the pool's first: its notices (a
   * migrate=1's, a trigger's) are logged as every connection's are */
  idem_pg_log_notices(pg, "idem");
  int version = 0;
  if (u.migrate)
    err = idem_pg_migrate(pg, NULL, errmsg);
  else if (!(err = idem_pg_schema_version(pg, &version, errmsg)))
    err = idem_pg_schema_check(version, errmsg);
  pgs_store *st = err ? NULL : calloc(1, sizeof *st);
  pgs_conn *conns = st ? calloc((size_t)u.pool, sizeof *conns) : NULL;
  if (!conns) {
    free(st);
    PQfinish(pg);
    free(u.conninfo);
    return err ? err : IDEM_ENOMEM;
  }
  st->store = store;
  st->uri = u;
  /* names only: with numeric hosts alone libpq looks nothing up */
  if (idem_pg_hosts_parse(u.conninfo, &st->hosts) && !idem_pg_hosts_looked_up(&st->hosts))
    idem_pg_hosts_free(&st->hosts);
  st->nconns = u.pool;
  st->conns = conns;
  idem_queue_init(&st->pending.reqs);
  idem_queue_init(&st->solo.reqs);
  store->impl = st;
  uv_prepare_init(store->loop, &st->prepare);
  st->prepare.data = st;
  st->handles++;
  uv_timer_init(store->loop, &st->sweep);
  st->sweep.data = st;
  st->handles++;
  if (u.sweep_interval_ms)
    uv_timer_start(&st->sweep, on_sweep_timer, (uint64_t)u.sweep_interval_ms, 0);
  st->on_poll = on_poll;
  for (int i = 0; i < st->nconns; i++) {
    pgs_conn *c = &conns[i];
    c->st = st;
    idem_queue_init(&c->sent);
    idem_backoff_init(&c->backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS, idem_backoff_seed(c));
    uv_timer_init(store->loop, &c->timer);
    c->timer.data = c;
    st->handles++;
  }
  conns[0].pg = pg;
  pgs_conn_setup(&conns[0]);
  for (int i = 1; i < st->nconns; i++)
    pgs_conn_start(&conns[i]);
  return 0;
}

static int pgs_check(const char *uri, char **errmsg) {
  idem_pg_uri u;
  int err = idem_pg_uri_parse(uri, &u, errmsg);
  if (!err)
    free(u.conninfo);
  return err;
}

const idem_backend idem_backend_postgres = {"postgres", pgs_check, pgs_open, pgs_submit,
                                            pgs_close, IDEM_PG_ANSWER_MAX};

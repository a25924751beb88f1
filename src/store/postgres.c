/*
 * postgres.c - the postgres:// store: libpq in non-blocking pipeline mode on
 * the store's libuv loop.
 *
 * A small pool of connections (pool=N, default 2). Each runs in pipeline
 * mode: an operation is one prepared statement followed by a sync, so it is
 * its own transaction (one failure never takes others with it) while up to
 * MAX_IN_FLIGHT of them share the socket and its round trips. Results come
 * back in the order sent, so each connection keeps its operations in a FIFO.
 *
 * A lost connection fails the operations it carried with IDEM_ESTORE (their
 * outcome is unknown to us: the statement may have committed) and comes
 * back with capped exponential backoff. While no connection is up, new
 * operations fail at once with IDEM_ESTORE instead of waiting: the gateway
 * answers 503 and the client retries.
 *
 * Opening connects once, blocking, to check the schema (IDEM_ESCHEMA with a
 * sentence telling to run `idem migrate`, or migrate=1 to migrate on open);
 * every later (re)connection is asynchronous and checks it again.
 */
#include <stdlib.h>
#include <string.h>

#include "store/backend.h"
#include "store/postgres.h"

#define MAX_IN_FLIGHT 256
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000

enum { C_DOWN, C_CONNECTING, C_SETUP, C_READY, C_CLOSED };

typedef struct pg_store pg_store;

typedef struct {
  pg_store *st;
  int state;
  PGconn *pg;
  uv_poll_t *poll; /* own allocation: it outlives a reconnect while closing */
  int poll_fd;
  int poll_events;
  uv_timer_t timer; /* reconnect backoff */
  unsigned backoff_ms;
  idem_req *head, *tail; /* sent, waiting for their results, in order */
  size_t in_flight;
  PGresult *cur; /* the result of the statement at head, kept until its sync */
} pg_conn_t;

struct pg_store {
  idem_store *store;
  idem_pg_uri uri;
  int nconns;
  pg_conn_t *conns;
  idem_req *pending, *pending_tail; /* submitted, not yet sent */
  int closing;
  int handles; /* libuv handles not yet closed */
  char *last_error;
};

static void conn_fail(pg_conn_t *c, const char *why);
static void dispatch(pg_store *st);
static void on_poll(uv_poll_t *handle, int status, int events);

/* ---- small helpers ----------------------------------------------------- */

static int available(const pg_store *st) {
  for (int i = 0; i < st->nconns; i++)
    if (st->conns[i].state == C_READY || st->conns[i].state == C_SETUP)
      return 1;
  return 0;
}

static void set_error(pg_store *st, const char *why) {
  free(st->last_error);
  st->last_error = idem_pg_message("postgres", why);
}

static void fail_list(idem_req *req, int err) {
  while (req) {
    idem_req *next = req->next;
    idem_req_fail(req, err);
    req = next;
  }
}

static void fail_pending(pg_store *st, int err) {
  idem_req *req = st->pending;
  st->pending = st->pending_tail = NULL;
  fail_list(req, err);
}

static void maybe_closed(pg_store *st) {
  if (!st->closing || st->handles > 0 || st->closing == 2)
    return;
  for (int i = 0; i < st->nconns; i++)
    if (st->conns[i].state != C_CLOSED)
      return;
  st->closing = 2;
  idem_store *store = st->store;
  free(st->uri.conninfo);
  free(st->last_error);
  free(st->conns);
  free(st);
  idem_backend_closed(store);
}

/* ---- socket watching --------------------------------------------------- */

static void on_poll_closed(uv_handle_t *handle) {
  pg_conn_t *c = handle->data;
  free(handle);
  c->st->handles--;
  maybe_closed(c->st);
}

static void unwatch(pg_conn_t *c) {
  if (c->poll) {
    uv_close((uv_handle_t *)c->poll, on_poll_closed);
    c->poll = NULL;
  }
}

/* Poll the connection's socket for events. libpq may switch sockets while
 * connecting, and a new socket may reuse the old number, so while
 * connecting the watch is always registered afresh. */
static int watch(pg_conn_t *c, int events) {
  int fd = PQsocket(c->pg);
  if (fd < 0)
    return -1;
  if (c->poll && c->poll_fd != fd)
    unwatch(c);
  if (!c->poll) {
    c->poll = malloc(sizeof *c->poll);
    if (!c->poll)
      return -1;
    if (uv_poll_init_socket(c->st->store->loop, c->poll, fd)) {
      free(c->poll);
      c->poll = NULL;
      return -1;
    }
    c->poll->data = c;
    c->st->handles++;
    c->poll_fd = fd;
    c->poll_events = 0;
  } else if (c->state == C_CONNECTING) {
    uv_poll_stop(c->poll);
    c->poll_events = 0;
  }
  if (events != c->poll_events) {
    if (uv_poll_start(c->poll, events, on_poll))
      return -1;
    c->poll_events = events;
  }
  return 0;
}

/* Push buffered output; watch for writability while some is left. */
static int flush(pg_conn_t *c) {
  int r = PQflush(c->pg);
  if (r < 0)
    return -1;
  return watch(c, UV_READABLE | (r == 1 ? UV_WRITABLE : 0));
}

/* ---- connection life --------------------------------------------------- */

static void on_timer_closed(uv_handle_t *handle) {
  pg_conn_t *c = handle->data;
  c->st->handles--;
  maybe_closed(c->st);
}

static void conn_close(pg_conn_t *c) {
  unwatch(c);
  PQclear(c->cur);
  c->cur = NULL;
  if (c->pg)
    PQfinish(c->pg);
  c->pg = NULL;
  c->state = C_CLOSED;
  uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

static void conn_start(pg_conn_t *c);

static void on_timer(uv_timer_t *timer) { conn_start(timer->data); }

static void conn_fail(pg_conn_t *c, const char *why) {
  pg_store *st = c->st;
  set_error(st, why);
  idem_req *lost = c->head;
  c->head = c->tail = NULL;
  c->in_flight = 0;
  if (st->closing) {
    conn_close(c);
  } else {
    unwatch(c);
    PQclear(c->cur);
    c->cur = NULL;
    if (c->pg)
      PQfinish(c->pg);
    c->pg = NULL;
    c->state = C_DOWN;
    uv_timer_start(&c->timer, on_timer, c->backoff_ms, 0);
    c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
  }
  /* their statements may or may not have committed: the caller must know */
  fail_list(lost, IDEM_ESTORE);
  if (!available(st))
    fail_pending(st, st->closing ? IDEM_ECLOSED : IDEM_ESTORE);
  maybe_closed(st);
}

/* Prepare every statement and check the schema, in one pipelined round. */
static void conn_setup(pg_conn_t *c) {
  PGconn *pg = c->pg;
  int ok = PQsetnonblocking(pg, 1) == 0 && PQenterPipelineMode(pg);
  for (int i = 0; ok && i < IDEM_PG_NSTMT; i++) {
    const idem_pg_statement *s = &idem_pg_statements[i];
    ok = PQsendPrepare(pg, s->name, s->sql, s->nparams, s->types);
  }
  ok = ok && PQsendQueryParams(pg, idem_pg_version_sql, 0, NULL, NULL, NULL, NULL, 0) &&
       PQpipelineSync(pg);
  c->state = C_SETUP;
  if (!ok || flush(c))
    conn_fail(c, PQerrorMessage(pg));
}

static void connect_step(pg_conn_t *c, PostgresPollingStatusType want) {
  switch (want) {
  case PGRES_POLLING_READING:
    if (watch(c, UV_READABLE))
      conn_fail(c, "cannot watch the connection's socket");
    return;
  case PGRES_POLLING_WRITING:
    if (watch(c, UV_WRITABLE))
      conn_fail(c, "cannot watch the connection's socket");
    return;
  case PGRES_POLLING_OK:
    conn_setup(c);
    return;
  default:
    conn_fail(c, PQerrorMessage(c->pg));
    return;
  }
}

static void conn_start(pg_conn_t *c) {
  c->pg = PQconnectStart(c->st->uri.conninfo);
  c->state = C_CONNECTING;
  if (!c->pg || PQstatus(c->pg) == CONNECTION_BAD) {
    conn_fail(c, c->pg ? PQerrorMessage(c->pg) : "out of memory");
    return;
  }
  connect_step(c, PGRES_POLLING_WRITING);
}

/* ---- results ----------------------------------------------------------- */

static void setup_done(pg_conn_t *c) {
  PGresult *r = c->cur;
  c->cur = NULL;
  char *msg = NULL;
  int ok = r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
  if (ok && idem_pg_schema_check(atoi(PQgetvalue(r, 0, 0)), &msg))
    ok = 0;
  if (!ok && !msg)
    msg = idem_pg_message("postgres", r ? PQresultErrorMessage(r) : "setup failed");
  PQclear(r);
  if (!ok) {
    conn_fail(c, msg && !strncmp(msg, "postgres: ", 10) ? msg + 10 : "setup failed");
    free(msg);
    return;
  }
  c->state = C_READY;
  c->backoff_ms = BACKOFF_MIN_MS;
}

static void req_done(pg_conn_t *c) {
  idem_req *req = c->head;
  if (!req)
    return;
  c->head = req->next;
  if (!c->head)
    c->tail = NULL;
  c->in_flight--;
  idem_pg_result_fill(&req->op, c->cur, &req->result, NULL);
  PQclear(c->cur);
  c->cur = NULL;
  idem_req_finish(req);
}

static int is_error(const PGresult *r) {
  ExecStatusType st = PQresultStatus(r);
  return st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK;
}

/* Take every result that has arrived. Each unit sent ends with a sync: the
 * statement's results (the first error wins), a NULL, then PIPELINE_SYNC. */
static void take_results(pg_conn_t *c) {
  int nulls = 0;
  while (c->pg && (c->state == C_SETUP || c->head)) {
    if (PQisBusy(c->pg))
      break;
    PGresult *r = PQgetResult(c->pg);
    if (!r) {
      if (++nulls > 1)
        break;
      continue;
    }
    nulls = 0;
    if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
      PQclear(r);
      if (c->state == C_SETUP)
        setup_done(c);
      else
        req_done(c);
    } else if (!c->cur || !is_error(c->cur)) { /* the last, or the first error */
      PQclear(c->cur);
      c->cur = r;
    } else {
      PQclear(r);
    }
    if (c->pg && PQstatus(c->pg) == CONNECTION_BAD) {
      conn_fail(c, PQerrorMessage(c->pg));
      return;
    }
  }
}

/* While closing: a connection with nothing left to carry closes. */
static void close_idle(pg_store *st) {
  if (!st->closing || st->pending)
    return;
  for (int i = 0; i < st->nconns; i++)
    if (st->conns[i].state == C_READY && !st->conns[i].head)
      conn_close(&st->conns[i]);
}

static void on_poll(uv_poll_t *handle, int status, int events) {
  pg_conn_t *c = handle->data;
  if (c->poll != handle)
    return;
  if (c->state == C_CONNECTING) {
    connect_step(c, PQconnectPoll(c->pg));
    return;
  }
  if (status < 0) {
    conn_fail(c, uv_strerror(status));
    return;
  }
  if ((events & UV_READABLE) && !PQconsumeInput(c->pg)) {
    conn_fail(c, PQerrorMessage(c->pg));
    return;
  }
  if (flush(c)) {
    conn_fail(c, PQerrorMessage(c->pg));
    return;
  }
  take_results(c);
  pg_store *st = c->st;
  dispatch(st);
  close_idle(st);
}

/* ---- sending ----------------------------------------------------------- */

static pg_conn_t *least_loaded(pg_store *st) {
  pg_conn_t *best = NULL;
  for (int i = 0; i < st->nconns; i++) {
    pg_conn_t *c = &st->conns[i];
    if (c->state == C_READY && c->in_flight < MAX_IN_FLIGHT &&
        (!best || c->in_flight < best->in_flight))
      best = c;
  }
  return best;
}

static void dispatch(pg_store *st) {
  pg_conn_t *c;
  while (st->pending && (c = least_loaded(st))) {
    idem_req *req = st->pending;
    st->pending = req->next;
    if (!st->pending)
      st->pending_tail = NULL;
    req->next = NULL;
    if (c->tail)
      c->tail->next = req;
    else
      c->head = req;
    c->tail = req;
    c->in_flight++;
    idem_pg_params p;
    if (idem_pg_params_build(&req->op, &p)) {
      conn_fail(c, "unknown operation");
      continue;
    }
    const idem_pg_statement *s = &idem_pg_statements[p.stmt];
    if (!PQsendQueryPrepared(c->pg, s->name, p.n, p.values, p.lengths, p.formats, 1) ||
        !PQpipelineSync(c->pg) || flush(c))
      conn_fail(c, PQerrorMessage(c->pg));
  }
}

/* ---- the backend ------------------------------------------------------- */

static void pg_submit(idem_store *store, idem_req *req) {
  pg_store *st = store->impl;
  if (!available(st)) {
    idem_req_fail(req, IDEM_ESTORE);
    return;
  }
  req->next = NULL;
  if (st->pending_tail)
    st->pending_tail->next = req;
  else
    st->pending = req;
  st->pending_tail = req;
  dispatch(st);
}

/* Operations already submitted still run; connections close as they drain. */
static void pg_close(idem_store *store) {
  pg_store *st = store->impl;
  st->closing = 1;
  for (int i = 0; i < st->nconns; i++) {
    pg_conn_t *c = &st->conns[i];
    if (c->state == C_DOWN || c->state == C_CONNECTING)
      conn_close(c);
  }
  if (!available(st))
    fail_pending(st, IDEM_ECLOSED);
  close_idle(st);
  maybe_closed(st);
}

static int pg_open(idem_store *store, const char *uri, char **errmsg) {
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
  int version = 0;
  if (u.migrate)
    err = idem_pg_migrate(pg, NULL, errmsg);
  else if (!(err = idem_pg_schema_version(pg, &version, errmsg)))
    err = idem_pg_schema_check(version, errmsg);
  pg_store *st = err ? NULL : calloc(1, sizeof *st);
  pg_conn_t *conns = st ? calloc((size_t)u.pool, sizeof *conns) : NULL;
  if (!conns) {
    free(st);
    PQfinish(pg);
    free(u.conninfo);
    return err ? err : IDEM_ENOMEM;
  }
  st->store = store;
  st->uri = u;
  st->nconns = u.pool;
  st->conns = conns;
  store->impl = st;
  for (int i = 0; i < st->nconns; i++) {
    pg_conn_t *c = &conns[i];
    c->st = st;
    c->backoff_ms = BACKOFF_MIN_MS;
    uv_timer_init(store->loop, &c->timer);
    c->timer.data = c;
    st->handles++;
  }
  conns[0].pg = pg;
  conn_setup(&conns[0]);
  for (int i = 1; i < st->nconns; i++)
    conn_start(&conns[i]);
  return 0;
}

const idem_backend idem_backend_postgres = {
    .scheme = "postgres",
    .open = pg_open,
    .submit = pg_submit,
    .close = pg_close,
};

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
 * every later (re)connection is asynchronous and checks it again. libpq
 * looks a host name up inside PQconnectStart, on the calling thread: a slow
 * DNS server would stall the loop and every request on it. So a connection
 * to hosts given by name (one, or a list such as a primary and its
 * standby: postgres_hosts.c) starts with uv_getaddrinfo on the thread pool,
 * and libpq gets the addresses as hostaddr, tried in order (host and port
 * repeated per address: host serves TLS and .pgpass). libpq moves to the
 * next address only when one refuses; one that stays silent until
 * timeout= is tried after the others next time (idem_slow_addrs), shared
 * by the store's connections.
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/backend.h"
#include "store/backoff.h"
#include "store/lookup.h"
#include "store/postgres.h"

#define MAX_IN_FLIGHT 1024 /* operations sent and not answered, per connection */
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000

enum { C_DOWN, C_CONNECTING, C_SETUP, C_READY, C_CLOSED };

typedef struct pgs_store pgs_store;

/* Operations sent with one sync: one transaction. */
typedef struct batch {
  idem_queue node; /* in its connection's sent */
  int n;      /* operations */
  int got;    /* statements whose results are all in */
  int failed; /* an error came: nothing of the batch committed */
  int err;    /* IDEM_E* of the first error */
  idem_req **reqs;
  PGresult **res;
} batch;

/* Not pg_conn: that is libpq's own struct, the one behind PGconn, and
 * defining it here would give PGconn this layout in this file. The pgs_
 * prefix (PostgreSQL store) keeps out of libpq's pg_ names. */
typedef struct pgs_conn pgs_conn;

/* The owner of one host's lookup: which connection, which host. */
typedef struct {
  pgs_conn *c;
  int host;
} pgs_lookup;

struct pgs_conn {
  pgs_store *st;
  int state;
  PGconn *pg;
  uv_poll_t *poll; /* own allocation: closing it outlives a reconnect */
  int poll_fd;
  int poll_events;
  uv_timer_t timer; /* reconnect backoff; while connected, the watchdog */
  int watching;
  idem_backoff backoff;
  idem_queue sent;    /* batches waiting for their results, in order */
  size_t in_flight;   /* operations in those batches */
  PGresult *setup;    /* C_SETUP: the last result, or the first error */
  /* the hosts' lookups (see the top): one round at a time */
  int lookups_out;    /* of this round, not yet called back */
  int addrs_ready;    /* the last round ended after its attempt: unused */
  pgs_lookup lookup[IDEM_PG_HOSTS_MAX];
  idem_pg_found found[IDEM_PG_HOSTS_MAX];
  char lookup_error[200]; /* the round's first failure */
  idem_pg_lists lists;    /* what libpq gets */
};

typedef struct {
  idem_queue reqs;
  size_t n;
} req_queue;

struct pgs_store {
  idem_store *store;
  idem_pg_uri uri;
  int nconns;
  pgs_conn *conns;
  req_queue pending; /* submitted, not yet sent */
  req_queue solo;    /* one per transaction: gc, and a failed batch again */
  uv_prepare_t prepare; /* sends what this turn of the loop submitted */
  int prepare_closed;
  int closing; /* 1: closing, 2: freed */
  int handles; /* libuv handles not yet closed */
  char *last_error;
  idem_pg_hosts hosts; /* looked up before each connection (n: 0, by libpq) */
  int lookups;       /* uv_getaddrinfo requests not yet called back */
  idem_slow_addrs slow; /* their addresses that timed out: tried last */
};

static void conn_fail(pgs_conn *c, const char *why);
static void maybe_closed(pgs_store *st);
static void dispatch(pgs_store *st);
static void on_poll(uv_poll_t *handle, int status, int events);

/* ---- small helpers ----------------------------------------------------- */

static void push(req_queue *q, idem_req *req) {
  idem_queue_insert_tail(&q->reqs, &req->node);
  q->n++;
}

static idem_req *pop(req_queue *q) {
  idem_req *req = idem_req_of(idem_queue_pop(&q->reqs));
  if (req)
    q->n--;
  return req;
}

static void fail_queue(req_queue *q, int err) {
  idem_req *req;
  while ((req = pop(q)))
    idem_req_fail(req, err);
}

static int available(const pgs_store *st) {
  for (int i = 0; i < st->nconns; i++)
    if (st->conns[i].state == C_READY || st->conns[i].state == C_SETUP)
      return 1;
  return 0;
}

static void set_error(pgs_store *st, const char *why) {
  free(st->last_error);
  st->last_error = idem_pg_message("postgres", why);
}

/* The oldest batch c has sent and not yet had answered, or NULL. */
static batch *oldest_batch(const pgs_conn *c) {
  idem_queue *node = idem_queue_head(&c->sent);
  return node ? IDEM_QUEUE_DATA(node, batch, node) : NULL;
}

static void batch_free(batch *b) {
  for (int i = 0; i < b->n; i++)
    PQclear(b->res[i]);
  free(b);
}

static void on_handle_closed(uv_handle_t *handle) {
  pgs_store *st = handle->data;
  st->handles--;
  maybe_closed(st);
}

/* When closing and every connection is closed: close the prepare handle,
 * then, once every handle is gone, free and tell the generic layer. */
static void maybe_closed(pgs_store *st) {
  if (st->closing != 1)
    return;
  for (int i = 0; i < st->nconns; i++)
    if (st->conns[i].state != C_CLOSED)
      return;
  if (!st->prepare_closed) {
    st->prepare_closed = 1;
    uv_close((uv_handle_t *)&st->prepare, on_handle_closed);
    return;
  }
  if (st->handles > 0 || st->lookups > 0)
    return;
  st->closing = 2;
  idem_store *store = st->store;
  free(st->uri.conninfo);
  idem_pg_hosts_free(&st->hosts);
  free(st->last_error);
  free(st->conns);
  free(st);
  idem_backend_closed(store);
}

/* ---- socket watching --------------------------------------------------- */

static void on_poll_closed(uv_handle_t *handle) {
  pgs_store *st = handle->data;
  free(handle);
  st->handles--;
  maybe_closed(st);
}

static void unwatch(pgs_conn *c) {
  if (c->poll) {
    c->poll->data = c->st; /* the close callback only needs the store */
    uv_close((uv_handle_t *)c->poll, on_poll_closed);
    c->poll = NULL;
  }
}

/* Poll the connection's socket for events. libpq may switch sockets while
 * connecting, and a new socket may reuse the old number, so while
 * connecting the watch is always registered afresh. */
static int watch(pgs_conn *c, int events) {
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
static int flush(pgs_conn *c) {
  int r = PQflush(c->pg);
  if (r < 0)
    return -1;
  return watch(c, UV_READABLE | (r == 1 ? UV_WRITABLE : 0));
}

/* ---- connection life --------------------------------------------------- */

/* Drop the connection and everything it carried (failed with IDEM_ESTORE). */
static void conn_drop(pgs_conn *c) {
  unwatch(c);
  c->watching = 0;
  PQclear(c->setup);
  c->setup = NULL;
  if (c->pg)
    PQfinish(c->pg);
  c->pg = NULL;
  c->in_flight = 0;
  batch *b;
  while ((b = oldest_batch(c))) {
    idem_queue_remove(&b->node);
    /* the batch may or may not have committed: the caller must know */
    for (int i = 0; i < b->n; i++)
      idem_req_fail(b->reqs[i], IDEM_ESTORE);
    batch_free(b);
  }
}

static void conn_close(pgs_conn *c) {
  conn_drop(c);
  c->state = C_CLOSED;
  c->timer.data = c->st;
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

static void conn_start(pgs_conn *c);

static void on_timer(uv_timer_t *timer) { conn_start(timer->data); }

static void conn_fail(pgs_conn *c, const char *why) {
  pgs_store *st = c->st;
  set_error(st, why);
  if (st->closing) {
    conn_close(c);
  } else {
    conn_drop(c);
    c->state = C_DOWN;
    uv_timer_start(&c->timer, on_timer, idem_backoff_next(&c->backoff), 0);
  }
  if (!available(st)) {
    fail_queue(&st->solo, st->closing ? IDEM_ECLOSED : IDEM_ESTORE);
    fail_queue(&st->pending, st->closing ? IDEM_ECLOSED : IDEM_ESTORE);
  }
  maybe_closed(st);
}

/* A server that stops answering (a hung host, a network that drops
 * packets) would hold operations forever: no answer within timeout= while
 * something is outstanding fails the connection, and with it them. */
static void on_watchdog(uv_timer_t *timer) {
  pgs_conn *c = timer->data;
  char why[160];
  const char *addr = c->pg && c->st->hosts.n ? PQhostaddr(c->pg) : NULL;
  if (addr && *addr && (c->state == C_CONNECTING || c->state == C_SETUP)) {
    /* the next attempt tries this address after the name's others */
    idem_slow_addrs_note(&c->st->slow, addr);
    snprintf(why, sizeof why, "no answer from %.60s within %lld ms", addr,
             (long long)c->st->uri.timeout_ms);
  } else {
    snprintf(why, sizeof why, "no answer from the server within %lld ms",
             (long long)c->st->uri.timeout_ms);
  }
  conn_fail(c, why);
}

static void watchdog(pgs_conn *c, int progress) {
  int waiting = c->state == C_CONNECTING || c->state == C_SETUP ||
                (c->state == C_READY && !idem_queue_empty(&c->sent));
  if (!waiting) {
    if (c->watching && c->state == C_READY)
      uv_timer_stop(&c->timer);
    c->watching = 0;
  } else if (progress || !c->watching) {
    uv_timer_start(&c->timer, on_watchdog, (uint64_t)c->st->uri.timeout_ms, 0);
    c->watching = 1;
  }
}

/* Unless the URI sets its own, a statement waits at most this long for a
 * row lock (one held by an in-transaction caller, say) before its batch
 * fails and goes again one by one. */
static const char lock_timeout_sql[] =
    "SELECT set_config('lock_timeout', '5s', false) "
    "WHERE current_setting('lock_timeout') IN ('0', '0ms')";

/* Prepare every statement and check the schema, in one pipelined round. */
static void conn_setup(pgs_conn *c) {
  PGconn *pg = c->pg;
  int ok = PQsetnonblocking(pg, 1) == 0 && PQenterPipelineMode(pg);
  for (int i = 0; ok && i < IDEM_PG_NSTMT; i++) {
    const idem_pg_statement *s = &idem_pg_statements[i];
    ok = PQsendPrepare(pg, s->name, s->sql, s->nparams, s->types);
  }
  ok = ok && PQsendQueryParams(pg, lock_timeout_sql, 0, NULL, NULL, NULL, NULL, 0) &&
       PQsendQueryParams(pg, idem_pg_version_sql, 0, NULL, NULL, NULL, NULL, 0) &&
       PQpipelineSync(pg);
  c->state = C_SETUP;
  if (!ok || flush(c))
    conn_fail(c, PQerrorMessage(pg));
  else
    watchdog(c, 1);
}

static void connect_step(pgs_conn *c, PostgresPollingStatusType want) {
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

/* Start libpq's connection; at the looked-up addresses when lists is
 * given (one entry per address: libpq tries them in order, as it tries
 * every address of a name it looks up itself). */
static void conn_connect(pgs_conn *c, const idem_pg_lists *lists) {
  if (lists) {
    /* later keywords override what the expanded URI (dbname) sets */
    const char *const keys[] = {"dbname", "host", "hostaddr", lists->ports[0] ? "port" : NULL,
                                NULL};
    const char *const values[] = {c->st->uri.conninfo, lists->hosts, lists->addrs,
                                  lists->ports, NULL};
    c->pg = PQconnectStartParams(keys, values, 1);
  } else {
    c->pg = PQconnectStart(c->st->uri.conninfo);
  }
  if (!c->pg || PQstatus(c->pg) == CONNECTION_BAD) {
    conn_fail(c, c->pg ? PQerrorMessage(c->pg) : "out of memory");
    return;
  }
  connect_step(c, PGRES_POLLING_WRITING);
}

/* The round of lookups is over: connect, or keep the addresses for the
 * next attempt if this one ended meanwhile. */
static void lookups_done(pgs_conn *c) {
  pgs_store *st = c->st;
  int n = idem_pg_hosts_lists(&st->hosts, c->found, &st->slow, &c->lists);
  if (c->state != C_CONNECTING || c->pg) {
    /* its attempt timed out (or the store closes): the next attempt
     * starts from these addresses */
    c->addrs_ready = n > 0;
  } else if (n > 0) {
    conn_connect(c, &c->lists);
  } else {
    conn_fail(c, c->lookup_error);
  }
}

/* Host i of the round gave no address: keep the round's first reason. */
static void lookup_failed(pgs_conn *c, int i, const char *why) {
  if (!c->lookup_error[0])
    snprintf(c->lookup_error, sizeof c->lookup_error, "cannot resolve %.100s: %s",
             c->st->hosts.name[i], why);
}

static void on_lookup(void *owner, int status, const struct addrinfo *ai) {
  pgs_lookup *l = owner;
  pgs_conn *c = l->c;
  pgs_store *st = c->st;
  st->lookups--;
  idem_pg_found *f = &c->found[l->host];
  f->n = status == 0 ? idem_lookup_addresses(ai, f->addr, IDEM_LOOKUP_MAX) : 0;
  if (f->n == 0)
    lookup_failed(c, l->host, status ? uv_strerror(status) : "no address");
  if (--c->lookups_out == 0)
    lookups_done(c);
  maybe_closed(st); /* a close may have been waiting for this lookup */
}

/* Look every host name up on the thread pool (numeric hosts stand for
 * themselves); lookups_done follows when the last one answers. */
static void lookups_start(pgs_conn *c) {
  pgs_store *st = c->st;
  c->lookup_error[0] = '\0';
  c->lookups_out = 1; /* held while starting: done runs once, at the end */
  for (int i = 0; i < st->hosts.n; i++) {
    idem_pg_found *f = &c->found[i];
    f->n = 0;
    if (st->hosts.numeric[i]) {
      snprintf(f->addr[0], sizeof f->addr[0], "%s", st->hosts.name[i]);
      f->n = 1;
      continue;
    }
    c->lookup[i] = (pgs_lookup){c, i};
    int rc = idem_lookup_start(st->store->loop, st->hosts.name[i], on_lookup, &c->lookup[i]);
    if (rc < 0) {
      lookup_failed(c, i, uv_strerror(rc));
      continue;
    }
    c->lookups_out++;
    st->lookups++;
  }
  if (--c->lookups_out == 0)
    lookups_done(c);
}

static void conn_start(pgs_conn *c) {
  pgs_store *st = c->st;
  c->state = C_CONNECTING;
  watchdog(c, 1); /* bounds the whole connection attempt, lookups included */
  if (!st->hosts.n) {
    conn_connect(c, NULL);
    return;
  }
  /* A DNS server slower than timeout=: the lookups of an attempt that
   * timed out answer the next attempt (still out: when they come; done: at
   * once), so lookups never pile up and a slow one still counts. */
  if (c->lookups_out)
    return;
  if (c->addrs_ready) {
    c->addrs_ready = 0;
    conn_connect(c, &c->lists);
    return;
  }
  lookups_start(c);
}

/* ---- results ----------------------------------------------------------- */

static int is_error(const PGresult *r) {
  ExecStatusType st = PQresultStatus(r);
  return st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK;
}

static void setup_done(pgs_conn *c) {
  PGresult *r = c->setup;
  c->setup = NULL;
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
  idem_backoff_reset(&c->backoff);
  if (c->st->hosts.n)
    idem_slow_addrs_forget(&c->st->slow, PQhostaddr(c->pg));
}

/* The batch at the head has its sync: it committed, or nothing of it did. */
static void batch_done(pgs_conn *c) {
  batch *b = oldest_batch(c);
  idem_queue_remove(&b->node);
  c->in_flight -= (size_t)b->n;
  pgs_store *st = c->st;
  if (!b->failed) {
    for (int i = 0; i < b->n; i++) {
      idem_req *req = b->reqs[i];
      idem_pg_result_fill(&req->op, b->res[i], &req->result, NULL);
      idem_req_finish(req);
    }
  } else if (b->n == 1) {
    idem_req_fail(b->reqs[0], b->err);
  } else {
    /* rolled back as a whole: each goes again in a transaction of its own */
    for (int i = 0; i < b->n; i++)
      push(&st->solo, b->reqs[i]);
  }
  batch_free(b);
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
      batch *b = oldest_batch(c);
      if (c->state != C_SETUP && b->got < b->n)
        b->got++;
      continue;
    }
    nulls = 0;
    if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
      PQclear(r);
      if (c->state == C_SETUP)
        setup_done(c);
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
      batch *b = oldest_batch(c);
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
      conn_fail(c, PQerrorMessage(c->pg));
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
      conn_close(&st->conns[i]);
}

static void on_poll(uv_poll_t *handle, int status, int events) {
  pgs_conn *c = handle->data;
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
  watchdog(c, events & UV_READABLE);
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
      idem_req_fail(pop(q), IDEM_ENOMEM);
    return;
  }
  b->reqs = (idem_req **)(b + 1);
  b->res = (PGresult **)(b->reqs + n);
  b->n = n;
  for (int i = 0; i < n; i++)
    b->reqs[i] = pop(q);
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
  if (!ok || !PQpipelineSync(c->pg) || flush(c))
    conn_fail(c, PQerrorMessage(c->pg));
  else
    watchdog(c, 0);
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

/* ---- the backend ------------------------------------------------------- */

static void pgs_submit(idem_store *store, idem_req *req) {
  pgs_store *st = store->impl;
  if (!available(st)) {
    idem_req_fail(req, IDEM_ESTORE);
    return;
  }
  /* gc locks its rows in expiry order, not key order: alone it cannot
   * take part in a deadlock with a batch */
  push(req->op.kind == IDEM_OP_GC ? &st->solo : &st->pending, req);
  /* sent at the end of this turn of the loop, with whatever else comes */
  uv_prepare_start(&st->prepare, on_prepare);
}

/* Operations already submitted still run; connections close as they drain. */
static void pgs_close(idem_store *store) {
  pgs_store *st = store->impl;
  st->closing = 1;
  for (int i = 0; i < st->nconns; i++) {
    pgs_conn *c = &st->conns[i];
    if (c->state == C_DOWN || c->state == C_CONNECTING)
      conn_close(c);
  }
  if (!available(st)) {
    fail_queue(&st->solo, IDEM_ECLOSED);
    fail_queue(&st->pending, IDEM_ECLOSED);
  }
  close_idle(st);
  maybe_closed(st);
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
  conn_setup(&conns[0]);
  for (int i = 1; i < st->nconns; i++)
    conn_start(&conns[i]);
  return 0;
}

const idem_backend idem_backend_postgres = {
    .scheme = "postgres",
    .open = pgs_open,
    .submit = pgs_submit,
    .close = pgs_close,
};

/*
 * postgres_conn.c - the life of each of the PostgreSQL store's connections,
 * and the store's teardown.
 *
 *   DOWN ──backoff──► CONNECTING ──libpq connected──► SETUP ──schema ok──► READY
 *     ▲                    │ refused, timeout            │ error, timeout    │
 *     └────────────────────┴─────────────────────────────┴── lost, silent ◄──┘
 *
 * and from any state to CLOSED when the store closes (at once if DOWN or
 * CONNECTING, once drained otherwise).
 *
 * Every (re)connection is asynchronous and checks the schema again. libpq
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

#include "store/postgres_env.h"

/* ---- queues and batches ------------------------------------------------ */

void pgs_push(req_queue *q, idem_req *req) {
  idem_queue_insert_tail(&q->reqs, &req->node);
  q->n++;
}

idem_req *pgs_pop(req_queue *q) {
  idem_req *req = idem_req_of(idem_queue_pop(&q->reqs));
  if (req)
    q->n--;
  return req;
}

void pgs_fail_queue(req_queue *q, int err) {
  idem_req *req;
  while ((req = pgs_pop(q)))
    idem_req_fail(req, err);
}

int pgs_available(const pgs_store *st) {
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
batch *pgs_oldest_batch(const pgs_conn *c) {
  idem_queue *node = idem_queue_head(&c->sent);
  return node ? IDEM_QUEUE_DATA(node, batch, node) : NULL;
}

void pgs_batch_free(batch *b) {
  for (int i = 0; i < b->n; i++)
    PQclear(b->res[i]);
  free(b);
}

/* ---- closing ----------------------------------------------------------- */

void pgs_handle_closed(uv_handle_t *handle) {
  pgs_store *st = handle->data;
  st->handles--;
  pgs_maybe_closed(st);
}

/* When closing and every connection is closed: close the prepare handle,
 * then, once every handle is gone, free and tell the generic layer. */
void pgs_maybe_closed(pgs_store *st) {
  if (st->closing != 1)
    return;
  for (int i = 0; i < st->nconns; i++)
    if (st->conns[i].state != C_CLOSED)
      return;
  if (!st->prepare_closed) {
    st->prepare_closed = 1;
    uv_close((uv_handle_t *)&st->prepare, pgs_handle_closed);
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
  pgs_maybe_closed(st);
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
    if (uv_poll_start(c->poll, events, c->st->on_poll))
      return -1;
    c->poll_events = events;
  }
  return 0;
}

/* Push buffered output; watch for writability while some is left. */
int pgs_flush(pgs_conn *c) {
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
  while ((b = pgs_oldest_batch(c))) {
    idem_queue_remove(&b->node);
    /* the batch may or may not have committed: the caller must know */
    for (int i = 0; i < b->n; i++)
      idem_req_fail(b->reqs[i], IDEM_ESTORE);
    pgs_batch_free(b);
  }
}

void pgs_conn_close(pgs_conn *c) {
  conn_drop(c);
  c->state = C_CLOSED;
  c->timer.data = c->st;
  uv_close((uv_handle_t *)&c->timer, pgs_handle_closed);
}

static void on_timer(uv_timer_t *timer) { pgs_conn_start(timer->data); }

void pgs_conn_fail(pgs_conn *c, const char *why) {
  pgs_store *st = c->st;
  set_error(st, why);
  if (st->closing) {
    pgs_conn_close(c);
  } else {
    conn_drop(c);
    c->state = C_DOWN;
    uv_timer_start(&c->timer, on_timer, idem_backoff_next(&c->backoff), 0);
  }
  if (!pgs_available(st)) {
    pgs_fail_queue(&st->solo, st->closing ? IDEM_ECLOSED : IDEM_ESTORE);
    pgs_fail_queue(&st->pending, st->closing ? IDEM_ECLOSED : IDEM_ESTORE);
  }
  pgs_maybe_closed(st);
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
  pgs_conn_fail(c, why);
}

void pgs_watchdog(pgs_conn *c, int progress) {
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
void pgs_conn_setup(pgs_conn *c) {
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
  if (!ok || pgs_flush(c))
    pgs_conn_fail(c, PQerrorMessage(pg));
  else
    pgs_watchdog(c, 1);
}

void pgs_setup_done(pgs_conn *c) {
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
    pgs_conn_fail(c, msg && !strncmp(msg, "postgres: ", 10) ? msg + 10 : "setup failed");
    free(msg);
    return;
  }
  c->state = C_READY;
  idem_backoff_reset(&c->backoff);
  if (c->st->hosts.n)
    idem_slow_addrs_forget(&c->st->slow, PQhostaddr(c->pg));
}

static void connect_step(pgs_conn *c, PostgresPollingStatusType want) {
  switch (want) {
  case PGRES_POLLING_READING:
    if (watch(c, UV_READABLE))
      pgs_conn_fail(c, "cannot watch the connection's socket");
    return;
  case PGRES_POLLING_WRITING:
    if (watch(c, UV_WRITABLE))
      pgs_conn_fail(c, "cannot watch the connection's socket");
    return;
  case PGRES_POLLING_OK:
    pgs_conn_setup(c);
    return;
  default:
    pgs_conn_fail(c, PQerrorMessage(c->pg));
    return;
  }
}

void pgs_conn_advance(pgs_conn *c) { connect_step(c, PQconnectPoll(c->pg)); }

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
    pgs_conn_fail(c, c->pg ? PQerrorMessage(c->pg) : "out of memory");
    return;
  }
  idem_pg_log_notices(c->pg, "idem");
  connect_step(c, PGRES_POLLING_WRITING);
}

/* ---- host lookups (see the top) ---------------------------------------- */

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
    pgs_conn_fail(c, c->lookup_error);
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
  pgs_maybe_closed(st); /* a close may have been waiting for this lookup */
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

void pgs_conn_start(pgs_conn *c) {
  pgs_store *st = c->st;
  c->state = C_CONNECTING;
  pgs_watchdog(c, 1); /* bounds the whole connection attempt, lookups included */
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

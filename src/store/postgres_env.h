/*
 * postgres_env.h - internals shared by the PostgreSQL store's two async
 * files, the first using the second and never the reverse:
 *   postgres.c       the backend: open, submit, close; batches sent and
 *                    their results
 *   postgres_conn.c  each connection's life (lookups, connect, setup,
 *                    watchdog, reconnection) and the store's teardown
 * (postgres.h is what every PostgreSQL file shares: statements, URI, hosts.)
 */
#ifndef IDEM_STORE_POSTGRES_ENV_H
#define IDEM_STORE_POSTGRES_ENV_H

#include <libpq-fe.h>
#include <uv.h>

#include "store/backend.h"
#include "store/backoff.h"
#include "store/lookup.h"
#include "store/postgres.h"
#include "core/queue.h"

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
 * defining it here would give PGconn this layout in every file that
 * includes this. The pgs_ prefix (PostgreSQL store) keeps out of libpq's
 * pg_ names. */
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
  uv_timer_t sweep;     /* the background gc's next chunk (postgres.c) */
  int sweeping;         /* its chunk is in flight */
  int prepare_closed;
  int closing; /* 1: closing, 2: freed */
  int handles; /* libuv handles not yet closed */
  char *last_error;
  uv_poll_cb on_poll;  /* postgres.c: a connection's socket is ready */
  idem_pg_hosts hosts; /* looked up before each connection (n: 0, by libpq) */
  int lookups;       /* uv_getaddrinfo requests not yet called back */
  idem_slow_addrs slow; /* their addresses that timed out: tried last */
};

/* ---- postgres_conn.c */
void pgs_push(req_queue *q, idem_req *req);
idem_req *pgs_pop(req_queue *q);
/* Fail every req of q with err. */
void pgs_fail_queue(req_queue *q, int err);
/* Whether a connection is up (or about to be, in C_SETUP). */
int pgs_available(const pgs_store *st);
/* The oldest batch c has sent and not yet had answered, or NULL. */
batch *pgs_oldest_batch(const pgs_conn *c);
void pgs_batch_free(batch *b);

/* Start connecting (DOWN -> CONNECTING). */
void pgs_conn_start(pgs_conn *c);
/* CONNECTING, and the socket is ready: libpq goes on connecting. */
void pgs_conn_advance(pgs_conn *c);
/* Prepare the statements and check the schema on a connection just made. */
void pgs_conn_setup(pgs_conn *c);
/* C_SETUP's last result is in (c->setup): READY, or a failure. */
void pgs_setup_done(pgs_conn *c);
/* Drop c and what it carried (why: the store's last error); reconnect
 * after a backoff, or close when the store closes. */
void pgs_conn_fail(pgs_conn *c, const char *why);
/* Drop c for good (the store closes). */
void pgs_conn_close(pgs_conn *c);
/* Push buffered output; watch for writability while some is left. */
int pgs_flush(pgs_conn *c);
/* (Re)arm or stop c's watchdog; progress: an answer came. */
void pgs_watchdog(pgs_conn *c, int progress);
/* When closing and every connection is closed: release everything, then
 * idem_backend_closed. */
void pgs_maybe_closed(pgs_store *st);
/* The close callback of a handle whose data is the store: one fewer open. */
void pgs_handle_closed(uv_handle_t *handle);

#endif
